#!/usr/bin/env bash
# test/luacheck.sh: lint slidewin's Lua with luacheck (Debian's lua-check).
#
# What is linted is what Redis runs: each script of src/store/redis/scripts.c's table,
# put together out of the files of src/store/redis/lua by test/bench/lua_source.pl
# (byte for byte what slidewin sends), and the library of functions
# (lua_source.pl --library). A file of src/store/redis/lua alone is only a piece of a
# script: a body uses the prelude's functions and the head's locals. Each
# finding is reported at the line of the .lua file it comes from, with the
# script it was found in. Every file of src/store/redis/lua must be part of some script,
# so that none escapes the lint. The configuration is .luacheckrc.
#
# Exit status 0 when clean, 1 on a finding, 2 when it cannot run.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
src=$repo/src/store/redis/scripts.c
lua_source=$repo/test/bench/lua_source.pl

if ! command -v luacheck >/dev/null 2>&1; then
	echo "luacheck: not found; run test/deps.sh (package lua-check)" >&2
	exit 2
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/slidewin-luacheck.XXXXXX") || exit 2
# shellcheck disable=SC2317
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

mapfile -t arrays < <(sed -n 's/^[[:space:]]*\[SCRIPT_[A-Z_]*\][[:space:]]*=[[:space:]]*{\(lua_[a-z0-9_]*\).*/\1/p' "$src")
if ((${#arrays[@]} == 0)); then
	echo "luacheck: no script found in the table of $src" >&2
	exit 2
fi
cd "$repo" || exit 2
for a in "${arrays[@]}"; do
	if ! perl "$lua_source" src/store/redis/scripts.c "$a" >"$work/$a.lua" ||
		! perl "$lua_source" src/store/redis/scripts.c --map "$a" >"$work/$a.map"; then
		echo "luacheck: cannot put $a together out of src/store/redis/lua" >&2
		exit 2
	fi
done
if ! perl "$lua_source" src/store/redis/scripts.c --library >"$work/library.lua"; then
	echo "luacheck: cannot put the library together out of src/store/redis/lua" >&2
	exit 2
fi

status=0
for f in src/store/redis/lua/*.lua; do
	if ! cut -f 2 "$work"/*.map | grep -qxF -- "$f"; then
		echo "$f: part of no script of src/store/redis/scripts.c, so never linted (nor run)"
		status=1
	fi
done

# plain: FILE:LINE:COL: (CODE) message, one finding a line.
luacheck --config "$repo/.luacheckrc" --formatter plain --codes --no-color \
	"$work"/*.lua >"$work/out" 2>&1
rc=$?
# A finding in script S at line L: the piece of S's map that holds L.
awk -v work="$work/" '
	match($0, /^[^:]+:[0-9]+:/) {
		path = $0; sub(/:.*/, "", path)
		rest = substr($0, length(path) + 2)
		line = rest + 0; sub(/^[0-9]+/, "", rest)
		name = path; sub(/^.*\//, "", name); sub(/\.lua$/, "", name)
		map = work name ".map"
		file = ""
		while ((getline m < map) > 0) {
			split(m, f, "\t")
			if (f[1] + 0 <= line) { file = f[2]; first = f[1]; head = f[3] }
		}
		close(map)
		if (file != "" && file != "-")
			print file ":" (line - first + 1 + head) rest " [in " name "]"
		else
			print name ".lua (lua_source.pl " (name == "library" ? "--library" : name) "):" line rest
		next
	}
	{ print }' "$work/out"
if ((rc != 0)); then
	status=1
fi
n=$(($(find "$work" -name '*.lua' | wc -l)))
if ((status == 0)); then
	echo "luacheck: ${#arrays[@]} scripts and the library ($n files) clean"
fi
exit "$status"
