#!/usr/bin/env bash
# private_pg.sh ROOT: a private, relocatable copy of the PostgreSQL
# installation under ROOT, so that a build of slidewin can be installed and
# tested without touching the system's library directory (a sanitizer build,
# or two checkouts tested side by side).
#
# PostgreSQL finds its share, lib and include directories relative to its own
# binaries when they keep the same layout, so mirroring the installed
# directories below ROOT is enough: ROOT/usr/lib/postgresql/15/bin/pg_config
# then reports paths below ROOT, and PGXS installs there.
#
# Prints the pg_config of the copy. Copies only what is missing, so a second
# call is cheap; remove ROOT to start over.
set -euo pipefail

root=${1:?usage: private_pg.sh ROOT}
sys_pg_config=${SYSTEM_PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
if [[ ! -x $sys_pg_config ]]; then
	echo "private_pg: $sys_pg_config not found; run test/deps.sh first" >&2
	exit 1
fi
mkdir -p "$root"
root=$(cd "$root" && pwd)

bindir=$("$sys_pg_config" --bindir)
sharedir=$("$sys_pg_config" --sharedir)
includedir=$("$sys_pg_config" --includedir)
# bin's parent holds bin and lib (Debian: /usr/lib/postgresql/15)
for dir in "${bindir%/bin}" "$sharedir" "$includedir"; do
	[[ -d $dir ]] || continue
	if [[ ! -e $root$dir ]]; then
		mkdir -p "$(dirname "$root$dir")"
		cp -a "$dir" "$root$dir"
	fi
done
# The server loads its modules from pkglibdir; a copy carries whatever slidewin
# the system had, which the caller's `make install` replaces.
echo "$root$bindir/pg_config"
