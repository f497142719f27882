#!/usr/bin/env bash
# valgrind.sh: the regression suite (pg_regress, sql/*.sql) against a server
# whose every process runs under valgrind memcheck.  `make valgrind` runs it;
# it is not part of `make test` (it takes about five minutes).
#
# slidewin is built as usual (-O2 -g) into a private installation of its own,
# so that the server can run under the wrapper of test/private_pg.sh:
#   SLIDEWIN_VALGRIND_ROOT   that root, kept between runs (default:
#                            $SLIDEWIN_PRIVATE_ROOT/valgrind when that is set,
#                            else a temporary directory removed afterwards)
#   SLIDEWIN_VALGRIND_TIMEOUT  seconds for the suite (default 1800)
#   SLIDEWIN_KEEP=1          keep the work directory (valgrind's logs)
#   SLIDEWIN_ONLY=REGEX      run only the regression tests whose names match
#
# Each process logs to its own file.  An error whose stack (or whose block's
# allocation stack) passes through slidewin is a finding and fails the run;
# it is printed in full.  Other errors belong to PostgreSQL or glibc:
# the known ones are suppressed (test/valgrind.supp), and any other is
# printed and counted, but does not fail the run.  --run-libc-freeres=no:
# glibc's clean-up at exit frees memory PostgreSQL moved (the environment,
# for the ps display), which memcheck reports in every process.
#
# Every regression test counts as one test, and so does the finding check.
# The last line is `N passed, M failed`.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

passed=0
failed=0
failures=()
work=
tmp_root=
pass() { passed=$((passed + 1)); }
fail() {
	failed=$((failed + 1))
	failures+=("$1")
}
# shellcheck disable=SC2317
finish() {
	trap - EXIT INT TERM
	if [[ -n $work ]]; then
		{
			stop_pg "$work/pg"
			stop_redis "$work/redis"
			reap_under "$work"
		} >/dev/null 2>&1
		if [[ ${SLIDEWIN_KEEP:-} == 1 ]]; then
			echo "work directory kept: $work"
		else
			rm -rf "$work"
		fi
	fi
	[[ -z $tmp_root || ${SLIDEWIN_KEEP:-} == 1 ]] || rm -rf "$tmp_root"
	if ((passed + failed == 0)); then
		failed=1
	fi
	if ((${#failures[@]} > 0)); then
		echo
		echo "failed:"
		printf '  %s\n' "${failures[@]}"
	fi
	echo "$passed passed, $failed failed"
	# an explicit status: a bare exit in a trap keeps the status it ran on
	if ((failed > 0)); then
		exit 1
	fi
	exit 0
}
trap finish EXIT
trap 'fail "run interrupted"; exit 130' INT TERM

if ! command -v valgrind >/dev/null 2>&1; then
	if ((EUID == 0)) && command -v apt-get >/dev/null 2>&1; then
		echo "valgrind: installing the valgrind package"
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends valgrind >/dev/null ||
			{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends valgrind >/dev/null; }
	fi
	if ! command -v valgrind >/dev/null 2>&1; then
		fail "setup: valgrind is not installed (apt-get install valgrind)"
		exit 1
	fi
fi

root=${SLIDEWIN_VALGRIND_ROOT:-}
if [[ -z $root && -n ${SLIDEWIN_PRIVATE_ROOT:-} ]]; then
	root=$SLIDEWIN_PRIVATE_ROOT/valgrind
fi
if [[ -z $root ]]; then
	tmp_root=$(mktemp -d "${TMPDIR:-/tmp}/slidewin-valgrind.XXXXXX") || exit 1
	root=$tmp_root
fi
echo "valgrind: building into $root"
if ! PG_CONFIG=$(bash "$here/private_build.sh" "$root" | tail -n 1); then
	fail "setup: build"
	exit 1
fi
export PG_CONFIG
root=$(cd "$root" && pwd)
# shellcheck source-path=SCRIPTDIR
. "$here/lib.sh"

mapfile -t tests < <(for f in "$repo"/sql/*.sql; do
	f=${f##*/}
	[[ $f == slidewin--* ]] || echo "${f%.sql}"
done | LC_ALL=C sort)
if [[ -n ${SLIDEWIN_ONLY:-} ]]; then
	mapfile -t tests < <(printf '%s\n' "${tests[@]}" | grep -E -- "$SLIDEWIN_ONLY")
	echo "SLIDEWIN_ONLY=$SLIDEWIN_ONLY: a partial run"
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/slidewin-valgrind-run.XXXXXX") || exit 1
chmod 755 "$work"
vgdir=$work/valgrind
mkdir -p "$vgdir"
((EUID != 0)) || chown "$SLIDEWIN_PG_USER:" "$vgdir"

export SLIDEWIN_SERVER_WRAPPER="valgrind --quiet --trace-children=no --leak-check=no --num-callers=30 --fullpath-after= --run-libc-freeres=no --suppressions=$here/valgrind.supp --log-file=$vgdir/%p.log"
echo "servers run under SLIDEWIN_SERVER_WRAPPER=$SLIDEWIN_SERVER_WRAPPER"

if ! redis_port=$(free_port) || ! start_redis "$redis_port" "$work/redis" ||
	! pg_port=$(free_port) || ! start_pg "$pg_port" "$work/pg" "$redis_port"; then
	fail "setup: could not start the servers"
	exit 1
fi
if ! grep -q valgrind "/proc/$(head -n 1 "$work/pg/data/postmaster.pid")/cmdline" 2>/dev/null &&
	! ls "$vgdir"/*.log >/dev/null 2>&1; then
	fail "setup: the server does not run under valgrind"
	exit 1
fi

timeout=${SLIDEWIN_VALGRIND_TIMEOUT:-1800}
echo "regression suite under valgrind (${#tests[@]} tests, at most $timeout s: SLIDEWIN_VALGRIND_TIMEOUT)"
mkdir -p "$work/regression"
started=$SECONDS
timeout -k 15 "$timeout" "$PG_REGRESS" --inputdir="$repo" --outputdir="$work/regression" \
	--bindir="$PG_BINDIR" --host=127.0.0.1 --port="$pg_port" --user=postgres \
	--dbname=contrib_regression --load-extension=slidewin "${tests[@]}" >"$work/regression.log" 2>&1 </dev/null
rc=$?
cat "$work/regression.log"
if ((rc == 124 || rc == 137)); then
	echo "regression: TIMED OUT after $timeout s (SLIDEWIN_VALGRIND_TIMEOUT)"
fi
echo "regression suite took $((SECONDS - started)) s"
for t in "${tests[@]}"; do
	if grep -Eq "^(test)? +$t +\.\.\. ok( |\$)|^ok [0-9]+ +[-+] +$t( |\$)" "$work/regression.log"; then
		pass
	else
		fail "regression: $t"
	fi
done
if [[ -s $work/regression/regression.diffs ]]; then
	head -n 200 "$work/regression/regression.diffs"
fi
# Processes write their last errors as they exit.
stop_pg "$work/pg" >/dev/null 2>&1

# Split the logs into errors (a block of "==PID== ..." lines ending with an
# empty one).  A block with a frame in slidewin is a finding: with debug
# information valgrind names the source file, in full (--fullpath-after=),
# so a frame in slidewin names a file of the build's src/; without, it names
# slidewin.so.
echo
echo "======== valgrind errors ========"
findings=$(awk -v src="$root/build/src/" '
	function flush() {
		if (n == 0) return
		if (index(block, src) > 0 || block ~ /slidewin\.so/) { print "FINDING " FILENAME; print block; found++ }
		else { kind[first]++ ; other++ }
		n = 0; block = ""
	}
	FNR == 1 { flush() }
	/^==[0-9]+== ?$/ { flush(); next }
	/^==[0-9]+== / {
		line = $0; sub(/^==[0-9]+== /, "", line)
		if (n == 0) first = line
		block = block "    " line "\n"; n++
	}
	END {
		flush()
		for (k in kind) printf "  not in slidewin (PostgreSQL or glibc), %d x: %s\n", kind[k], k
		printf "SUMMARY %d %d\n", found + 0, other + 0
	}' "$vgdir"/*.log 2>/dev/null)
printf '%s\n' "$findings" | grep -v '^SUMMARY '
read -r _ nfind nother < <(printf '%s\n' "$findings" | grep '^SUMMARY ')
nlogs=$(find "$vgdir" -name '*.log' | wc -l)
echo "$nlogs processes logged; ${nfind:-?} errors in slidewin, ${nother:-?} elsewhere (not counted)"
if ((nlogs == 0)); then
	fail "valgrind: no process logged (did valgrind run?)"
elif [[ ${nfind:-x} == 0 ]]; then
	pass
else
	fail "valgrind: errors with a frame in slidewin"
fi
exit 0
