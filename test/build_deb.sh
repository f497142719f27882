#!/usr/bin/env bash
# make deb: build_deb.sh OUTDIR. The Debian packages postgresql-NN-slidewin,
# one for each PostgreSQL major whose postgresql-server-dev-NN is installed
# (and debian/pgversions allows), built by pg_buildext through debhelper
# (debian/rules).
#
# The build runs in a fresh copy of the tree, OUTDIR/slidewin, so that the
# checkout keeps no build products; dpkg-buildpackage writes the packages
# beside it, into OUTDIR. Only the packages of this run are left there: the
# ones of an earlier run are removed first.
#
# Prints the path of each package built, one a line, at the end.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out=${1:?usage: build_deb.sh OUTDIR}

missing=()
for tool in pg_buildext dh dpkg-buildpackage dpkg-deb; do
	command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]} > 0)); then
	echo "deb: ${missing[*]} not found; install debhelper and postgresql-server-dev-all (make deps does)" >&2
	exit 1
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
[[ $out != "$repo" ]] || {
	echo "deb: the output directory must not be the checkout itself" >&2
	exit 1
}
src=$out/slidewin
rm -rf "$src"
rm -f "$out"/postgresql-*-slidewin*_*.deb "$out"/postgresql-*-slidewin*_*.ddeb \
	"$out"/slidewin_*.changes "$out"/slidewin_*.buildinfo
mkdir "$src"

# The copy: the sources without build products, nor OUTDIR if it lies in the
# checkout (build/deb by default).
excludes=(--exclude=./.git --exclude='*.o' --exclude='*.so' --exclude='*.bc'
	--exclude=./src/store/redis/lua_scripts.h --exclude=./test/fuzz/build
	--exclude=./results --exclude=./regression.diffs --exclude=./regression.out)
if [[ $out == "$repo"/* ]]; then
	excludes+=("--exclude=./${out#"$repo"/}")
fi
tar -C "$repo" "${excludes[@]}" -cf - . | tar -C "$src" -xf -

# A clean environment for the package build: no private installation of
# PostgreSQL (SLIDEWIN_PRIVATE_ROOT, PG_CONFIG) and no variables of the make
# that called us; pg_buildext names each major's pg_config itself.
cd "$src"
env -u PG_CONFIG -u SLIDEWIN_PRIVATE_ROOT -u SYSTEM_PG_CONFIG \
	-u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES \
	PG_SUPPORTED_VERSIONS=installed \
	bash -c 'set -e; pg_buildext updatecontrol; dpkg-buildpackage -us -uc -b'

shopt -s nullglob
debs=("$out"/postgresql-*-slidewin_*.deb)
if ((${#debs[@]} == 0)); then
	echo "deb: dpkg-buildpackage succeeded but left no postgresql-NN-slidewin package in $out" >&2
	exit 1
fi
echo
echo "deb: built into $out:"
printf '%s\n' "${debs[@]}"
