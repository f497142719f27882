#!/usr/bin/env bash
# private_build.sh ROOT [MAKE ARGS...]: build slidewin from a fresh copy of
# this checkout and install it into the private PostgreSQL copy under ROOT
# (made by test/private_pg.sh when missing).  For builds that must never
# replace the normal one, such as the sanitizer or valgrind builds: the
# checkout's own objects are neither used nor overwritten.  Extra arguments
# go to make (COPT=..., for instance).  Prints the copy's pg_config last;
# the build's output goes to ROOT/build.log.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
root=${1:?usage: private_build.sh ROOT [MAKE ARGS...]}
shift
mkdir -p "$root"
root=$(cd "$root" && pwd)
# The servers run as another user when we are root.
chmod 755 "$root"

# The installation copied is the one PG_CONFIG names (SYSTEM_PG_CONFIG wins).
if [[ -z ${SYSTEM_PG_CONFIG:-} && -n ${PG_CONFIG:-} ]]; then
	export SYSTEM_PG_CONFIG=$PG_CONFIG
fi
pg_config=$(bash "$here/private_pg.sh" "$root")
build=$root/build
rm -rf "$build"
mkdir -p "$build"
tar -C "$repo" --exclude=./.git --exclude='*.o' --exclude='*.so' --exclude='*.bc' -cf - . |
	tar -C "$build" -xf -
# MAKEFLAGS of an outer make would carry its own SLIDEWIN_PRIVATE_ROOT here.
# with_llvm=no: no JIT bitcode, and none left from the copied installation.
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u PG_CONFIG \
	timeout 600 make -C "$build" -s -j"$(nproc 2>/dev/null || echo 1)" \
	SLIDEWIN_PRIVATE_ROOT="$root" with_llvm=no "$@" all install >"$root/build.log" 2>&1; then
	tail -n 40 "$root/build.log" >&2
	echo "private_build: the build failed (log: $root/build.log)" >&2
	exit 1
fi
pkglibdir=$("$pg_config" --pkglibdir)
rm -rf "$pkglibdir/bitcode/slidewin" "$pkglibdir/bitcode/slidewin.index.bc"
echo "$pg_config"
