#!/usr/bin/env bash
# Build slidewin's unit tests and run each once.
#
#   bash test/unit/run.sh [TEST...]
#
# TEST is a name such as unit_cluster (test/unit/unit_cluster.c); the
# default is every test/unit/unit_*.c. Each is a standalone C program with a
# main(), built with cc, -Wall -Wextra -Werror and AddressSanitizer plus
# UndefinedBehaviorSanitizer, from its own file, slidewin's pure sources
# (src/transport/cluster_slots.c, redis_url.c, reply_cap.c: no PostgreSQL) and
# hiredis. No server is started.
#
# A test passes when it builds, exits 0 and prints no sanitizer report. Each
# prints one line per failed check and ends with "NAME: N checks, M failed".
#
# Exit status: 0 when every test passed, 1 otherwise. The last line is
# "unit: N tests passed, M failed".
#
# Knobs (environment): UNIT_CC (default cc), UNIT_BUILD (build directory,
# default: a temporary one, removed afterwards).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

cc=${UNIT_CC:-cc}
pure=(transport/cluster_slots transport/redis_url transport/reply_cap)
cflags=(-g -O1 -fno-omit-frame-pointer -Wall -Wextra -Werror
	-fsanitize=address,undefined -fno-sanitize-recover=undefined)
cflags+=(-I"$repo/src")
for d in "$repo"/src/*/ "$repo"/src/*/*/; do cflags+=(-I"${d%/}"); done

tests=()
for a in "$@"; do
	case $a in
	-*)
		echo "usage: $0 [TEST...]" >&2
		exit 2
		;;
	esac
	a=${a%.c}
	tests+=("unit_${a#unit_}")
done
if ((${#tests[@]} == 0)); then
	for f in "$here"/unit_*.c; do
		[[ -f $f ]] || continue
		f=${f##*/}
		tests+=("${f%.c}")
	done
fi
if ((${#tests[@]} == 0)); then
	echo "unit: no tests found in $here" >&2
	exit 1
fi
for t in "${tests[@]}"; do
	if [[ ! -f $here/$t.c ]]; then
		echo "unit: no test $t (no test/unit/$t.c)" >&2
		exit 1
	fi
done
if ! command -v "$cc" >/dev/null 2>&1; then
	echo "unit: $cc not found; run test/deps.sh (package build-essential)" >&2
	exit 1
fi

if [[ -n ${UNIT_BUILD:-} ]]; then
	build=$UNIT_BUILD
	mkdir -p "$build" || exit 1
else
	build=$(mktemp -d -t slidewin-unit.XXXXXX) || exit 1
	# shellcheck disable=SC2317
	cleanup() { rm -rf "$build"; }
	trap cleanup EXIT
fi

srcs=()
for p in "${pure[@]}"; do srcs+=("$repo/src/$p.c"); done

passed=0
failed=0
for t in "${tests[@]}"; do
	log=$build/$t.log
	if ! "$cc" "${cflags[@]}" "$here/$t.c" "${srcs[@]}" -lhiredis -o "$build/$t" >"$log" 2>&1; then
		echo "$t: FAILED to build:"
		sed 's/^/    /' "$log"
		failed=$((failed + 1))
		continue
	fi
	ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} timeout -k 10 120 "$build/$t" >"$log" 2>&1 </dev/null
	rc=$?
	if ((rc == 0)) && ! grep -q -E '^(==[0-9]+==ERROR|SUMMARY: )|runtime error:' "$log"; then
		echo "$t: ok ($(tail -n 1 "$log" | sed "s/^$t: //"))"
		passed=$((passed + 1))
	else
		echo "$t: FAILED (status $rc):"
		sed 's/^/    /' "$log" | head -n 200
		failed=$((failed + 1))
	fi
done
echo "unit: $passed tests passed, $failed failed"
((failed == 0))
