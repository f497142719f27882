#!/usr/bin/env bash
# private_pg.sh ROOT: a private, relocatable copy of the PostgreSQL
# installation under ROOT, so that a build of slidewin can be installed and
# tested without touching the system's library directory (a sanitizer build,
# or two checkouts tested side by side).
#
# PostgreSQL finds its share, lib and include directories relative to its own
# binaries when they keep the same layout, so mirroring the installed
# directories below ROOT is enough: ROOT/usr/lib/postgresql/NN/bin/pg_config
# then reports paths below ROOT, and PGXS installs there.
#
# The copy's `postgres` is a small script that runs the real server
# (postgres.real) under $SLIDEWIN_SERVER_WRAPPER when that is set in the
# server's environment, for example "valgrind --log-file=..." or
# "env LD_PRELOAD=libasan.so.8"; pg_ctl, initdb and the TAP modules start
# the server as usual.
#
# Prints the pg_config of the copy. Copies only what is missing, so a second
# call is cheap; remove ROOT to start over.
set -euo pipefail

root=${1:?usage: private_pg.sh ROOT}
sys_pg_config=${SYSTEM_PG_CONFIG:-$(command -v pg_config || echo pg_config)}
if ! "$sys_pg_config" --bindir >/dev/null 2>&1; then
	echo "private_pg: $sys_pg_config not found; run test/deps.sh first" >&2
	exit 1
fi
mkdir -p "$root"
root=$(cd "$root" && pwd)

bindir=$("$sys_pg_config" --bindir)
sharedir=$("$sys_pg_config" --sharedir)
includedir=$("$sys_pg_config" --includedir)
# bin's parent holds bin and lib (Debian: /usr/lib/postgresql/NN)
for dir in "${bindir%/bin}" "$sharedir" "$includedir"; do
	[[ -d $dir ]] || continue
	if [[ ! -e $root$dir ]]; then
		mkdir -p "$(dirname "$root$dir")"
		cp -a "$dir" "$root$dir"
	fi
done
if [[ ! -e $root$bindir/postgres.real ]]; then
	mv "$root$bindir/postgres" "$root$bindir/postgres.real"
	cat >"$root$bindir/postgres" <<'WRAPPER'
#!/bin/sh
# Written by slidewin's test/private_pg.sh: the server, under
# $SLIDEWIN_SERVER_WRAPPER when it is set. Version checks, bootstrap and
# single-user runs (initdb) are not wrapped.
real="$(dirname "$0")/postgres.real"
case "${1:-}" in
--boot | --single | -C | -V | --version | --describe-config | --check)
	exec "$real" "$@" ;;
esac
# shellcheck disable=SC2086
exec ${SLIDEWIN_SERVER_WRAPPER:-} "$real" "$@"
WRAPPER
	chmod 755 "$root$bindir/postgres"
fi
# The server loads its modules from pkglibdir; a copy carries whatever slidewin
# the system had, which the caller's `make install` replaces.
echo "$root$bindir/pg_config"
