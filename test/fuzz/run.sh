#!/usr/bin/env bash
# Build slidewin's libFuzzer targets and run each for a while.
#
#   bash test/fuzz/run.sh [--seconds N] [--build-only] [TARGET...]
#
# TARGET is a name such as url (test/fuzz/fuzz_url.c); the default is every
# target. Each target is built with clang and -fsanitize=fuzzer,address,
# undefined from its fuzz_NAME.c plus slidewin's pure files (src/transport/redis_url.c,
# reply_check.c, reply_cap.c, src/sql/tenant_kind.c,
# src/transport/cluster_slots.c) and hiredis: no PGXS, no server. A rebuild happens only when a source is newer than the
# build.
#
# Each run starts from a scratch copy of test/fuzz/corpus/NAME/, so the
# repository's corpus is never rewritten, and uses test/fuzz/NAME.dict when
# there is one. A crash, a sanitizer report, a failed check or a hang fails
# the run: the report is printed and the input that caused it is saved under
# test/fuzz/artifacts/RUN/ (git-ignored), where RUN names this run.
#
# Exit status: 0 when every target ran clean, 1 otherwise. The last line is
# "fuzz: N targets clean, M failed".
#
# Knobs (environment): FUZZ_CC (default clang, Debian's default version), FUZZ_BUILD (build
# directory, default test/fuzz/build), FUZZ_ARTIFACTS (default
# test/fuzz/artifacts), PG_CONFIG (for the server headers tenant_kind.c
# reads OIDs from).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

seconds=60
build_only=
targets=()
while (($# > 0)); do
	case $1 in
	--seconds)
		seconds=$2
		shift 2
		;;
	--seconds=*)
		seconds=${1#--seconds=}
		shift
		;;
	--build-only)
		build_only=1
		shift
		;;
	-*)
		echo "usage: $0 [--seconds N] [--build-only] [TARGET...]" >&2
		exit 2
		;;
	*)
		targets+=("${1#fuzz_}")
		shift
		;;
	esac
done
if ! [[ $seconds =~ ^[0-9]+$ ]] || ((seconds < 1)); then
	echo "fuzz: --seconds must be a positive number, not '$seconds'" >&2
	exit 2
fi

cc=${FUZZ_CC:-clang}
build=${FUZZ_BUILD:-$here/build}
artifacts_root=${FUZZ_ARTIFACTS:-$here/artifacts}
PG_CONFIG=${PG_CONFIG:-pg_config}

pure=(transport/redis_url transport/reply_check transport/reply_cap sql/tenant_kind transport/cluster_slots)
if ((${#targets[@]} == 0)); then
	for f in "$here"/fuzz_*.c; do
		[[ -f $f ]] || continue
		f=${f##*/fuzz_}
		targets+=("${f%.c}")
	done
fi
if ((${#targets[@]} == 0)); then
	echo "fuzz: no targets found in $here" >&2
	exit 1
fi
for t in "${targets[@]}"; do
	if [[ ! -f $here/fuzz_$t.c ]]; then
		echo "fuzz: no target $t (no test/fuzz/fuzz_$t.c)" >&2
		exit 1
	fi
done

# ---- build -------------------------------------------------------------------

if ! command -v "$cc" >/dev/null 2>&1; then
	echo "fuzz: $cc not found; run test/deps.sh (packages clang, libclang-rt-dev)" >&2
	exit 1
fi
server_inc=$("$PG_CONFIG" --includedir-server 2>/dev/null) || server_inc=
if [[ -z $server_inc || ! -f $server_inc/utils/fmgroids.h ]]; then
	echo "fuzz: PostgreSQL's server headers not found ($PG_CONFIG); run test/deps.sh" >&2
	exit 1
fi

# shellcheck disable=SC2054 # the commas are clang's, not array separators
cflags=(-g -O1 -fno-omit-frame-pointer -Wall -Wextra -Werror -Wno-unused-parameter -Wno-ignored-attributes
	-fsanitize=address,undefined -fno-sanitize-recover=undefined
	-I"$server_inc")
cflags+=(-I"$repo/src")
for d in "$repo"/src/*/ "$repo"/src/*/*/; do cflags+=(-I"${d%/}"); done

# newer_than OUT IN...: true when OUT is missing or older than any IN.
newer_than() {
	local out=$1 in
	shift
	[[ -f $out ]] || return 0
	for in in "$@"; do
		[[ $in -nt $out ]] && return 0
	done
	return 1
}

mkdir -p "$build" || exit 1
headers=("$repo"/src/*.h "$repo"/src/*/*.h "$repo"/src/*/*/*.h "$here"/*.h)
built=0
for p in "${pure[@]}"; do
	o=$build/${p##*/}.o
	if newer_than "$o" "$repo/src/$p.c" "${headers[@]}" "$0"; then
		"$cc" "${cflags[@]}" -fsanitize=fuzzer-no-link -c "$repo/src/$p.c" -o "$o" || exit 1
		built=$((built + 1))
	fi
done
for t in "${targets[@]}"; do
	objs=()
	for p in "${pure[@]}"; do objs+=("$build/${p##*/}.o"); done
	if newer_than "$build/fuzz_$t" "$here/fuzz_$t.c" "${objs[@]}" "${headers[@]}" "$0"; then
		"$cc" "${cflags[@]}" -fsanitize=fuzzer "$here/fuzz_$t.c" "${objs[@]}" -lhiredis \
			-o "$build/fuzz_$t" || exit 1
		built=$((built + 1))
	fi
done
echo "fuzz: ${#targets[@]} targets built in $build ($built files compiled)"
if [[ -n $build_only ]]; then
	exit 0
fi

# ---- run -----------------------------------------------------------------------

run=$(date +%Y%m%d-%H%M%S)-$$
artifacts=$artifacts_root/$run
scratch=$(mktemp -d "${TMPDIR:-/tmp}/slidewin-fuzz.XXXXXX") || exit 1
# shellcheck disable=SC2317
cleanup() { rm -rf "$scratch"; }
trap cleanup EXIT

clean=0
failed=0
for t in "${targets[@]}"; do
	corpus=$scratch/corpus_$t
	log=$scratch/$t.log
	mkdir -p "$corpus" "$artifacts"
	if [[ -d $here/corpus/$t ]]; then
		cp -p "$here/corpus/$t"/* "$corpus"/ 2>/dev/null
	fi
	args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
		-artifact_prefix="$artifacts/$t-")
	if [[ -f $here/$t.dict ]]; then
		args+=(-dict="$here/$t.dict")
	fi
	start=$SECONDS
	timeout -k 10 $((seconds + 120)) "$build/fuzz_$t" "${args[@]}" "$corpus" >"$log" 2>&1 </dev/null
	rc=$?
	took=$((SECONDS - start))
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -n 1)
	if ((rc == 0)) && ! grep -q -E '^(==[0-9]+==ERROR|SUMMARY: )|runtime error:' "$log"; then
		echo "fuzz_$t: clean, ${runs:-?} inputs in ${took} s (${cov:-cov: ?}, corpus $(find "$corpus" -type f | wc -l) inputs)"
		clean=$((clean + 1))
	else
		echo "fuzz_$t: FAILED (status $rc after ${took} s); the report:"
		# from the first line of the report on, without libFuzzer's progress lines
		report=$(awk '/==ERROR|runtime error:|check failed|deadly signal|ALARM|out-of-memory/ { on = 1 }
			on && !/^#[0-9]+\t/' "$log" | head -n 150)
		[[ -n $report ]] || report=$(tail -n 40 "$log")
		printf '%s\n' "$report" | sed 's/^/    /'
		saved=$(find "$artifacts" -name "$t-*" -type f 2>/dev/null)
		if [[ -n $saved ]]; then
			echo "fuzz_$t: input saved: $saved"
			echo "fuzz_$t: reproduce with: $build/fuzz_$t $saved"
		else
			echo "fuzz_$t: no input was saved"
		fi
		cp "$log" "$artifacts/$t.log"
		failed=$((failed + 1))
	fi
done
rmdir "$artifacts" 2>/dev/null
rmdir "$artifacts_root" 2>/dev/null
echo "fuzz: $clean targets clean, $failed failed"
((failed == 0))
