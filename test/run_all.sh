#!/usr/bin/env bash
# Run every slidewin test suite; `make test` calls this after `make install`.
#
# Suites, each found by globbing (a suite with no files is simply absent):
#   regression  sql/*.sql except sql/slidewin--*.sql, expected/*.out;
#               pg_regress against the server started here
#   isolation   test/isolation/specs/*.spec, test/isolation/expected/*.out;
#               pg_isolation_regress against the same server
#   TAP         test/t/*.pl, run by prove; each script starts its own
#               servers through test/perl/SlidewinTest.pm
#   fuzz        test/fuzz/fuzz_*.c, libFuzzer targets built and run briefly
#               by test/fuzz/run.sh; no server
#   unit        test/unit/unit_*.c, standalone programs over the pure files,
#               built and run by test/unit/run.sh; no server
#   luacheck    the Lua scripts (src/store/redis/lua) as Redis runs them, linted by
#               test/luacheck.sh with luacheck (package lua-check); no server
#   layers      the layer rules of src/ (src/LAYERS) checked by
#               test/check_layers.pl on the objects just built; no server
#   meta        META.json (PGXN) checked by test/check_meta.pl against the
#               spec, slidewin.control and debian/; no server
#
# Every regression test, isolation spec, TAP file, fuzz target
# (test/fuzz/fuzz_*.c, a short run of each) and unit test counts as one
# test, and so do luacheck, layers and meta, and so do the log scan and the benchmark smoke run (test/bench/run.sh
# --smoke).  A
# test passes only when its runner says so; one that did not run is a
# failure, and so is a harness step that could not run (a server that does
# not start).
#
# Log scan: once the suites are over, the shared server's log and every TAP
# node's log (tmp_check/log/*.log) are searched for sanitizer reports
# (AddressSanitizer, UndefinedBehaviorSanitizer, "runtime error:") and
# crashes ("terminated by signal", "PANIC:").  Each log with such a line is
# one failure, and its lines (a sanitizer report in full) are printed; a clean
# scan is one pass.  A TAP script that crashes a process on purpose declares
# each expected line with SlidewinTest::allow_log_line (a file LOG.allow next
# to the node's log, one fixed string per expected line, each used once);
# sanitizer reports cannot be allowed.
#
# Sanitize pass: after everything else, test/sanitize.sh builds slidewin with
# AddressSanitizer and UndefinedBehaviorSanitizer into a private installation
# of its own and runs this script again against it (without the benchmark);
# its tests are added to the counts, with failures named "sanitize: ...".
# It runs unless SLIDEWIN_SANITIZE=0, or SLIDEWIN_ONLY is set and
# SLIDEWIN_SANITIZE=1 is not; `make sanitize` runs it alone.  The last line of output is always `N passed, M failed`; the
# exit status is non-zero when M > 0, and a run that finds no tests at all
# reports `0 passed, 1 failed`.
#
# Knobs (environment):
#   PG_CONFIG              pg_config of the server to test (default: 15)
#   SLIDEWIN_TAP_JOBS      TAP files run at once (default: CPUs, at most 4)
#   SLIDEWIN_TAP_WAIT_JOBS more TAP files at once, of those that mostly wait
#                          (listed in run_tap_suite; default 1, 0: none)
#   SLIDEWIN_SUITE_TIMEOUT seconds for pg_regress or isolation (default 240)
#   SLIDEWIN_TAP_TIMEOUT   seconds for one TAP file (default 240)
#   PGISOLATIONTIMEOUT     seconds isolationtester lets one step wait before
#                          it cancels it (default here 60; its own is 300)
#                          A run that hits a limit fails and says TIMED OUT.
#   SLIDEWIN_SANITIZE      1: run the sanitize pass, 0: skip it (see above)
#   SLIDEWIN_VALKEY        1: run the suites again against valkey-server, 0:
#                          skip that pass; unset: run it unless SLIDEWIN_ONLY
#   SLIDEWIN_PORT_RANGE    LO-HI: ports for the servers started here and for
#                          the TAP scripts' Redis servers (see test/lib.sh)
#   SLIDEWIN_KEEP=1        keep the work directory (logs, data) afterwards
#   SLIDEWIN_ONLY=REGEX    run only the tests whose names match (egrep); the
#                          benchmark smoke runs only if "bench" matches, and a
#                          fuzz target or unit test by its name (fuzz_url,
#                          unit_cluster), the lint by "luacheck"
#   SLIDEWIN_FUZZ_SECONDS  seconds each fuzz target runs (default 6)
#   PG_TEST_PORT_DIR       port lock directory shared with other runs (default:
#                          one per run, so parallel runs only have bind checks)
#
# TAP scripts run as $SLIDEWIN_PG_USER (postgres when we are root), from a
# directory that user can write, with this environment:
#   SLIDEWIN_SRC           repository root (a private copy if the checkout is
#                          unreadable to that user)
#   PERL5LIB               PostgreSQL's TAP modules, then test/perl
#   PATH                   the server's bin directory first
#   TESTDIR, PG_REGRESS, PG_TEST_PORT_DIR   what PostgreSQL::Test::Cluster needs
#   SLIDEWIN_SERVER_WRAPPER, SLIDEWIN_SERVER_MUST_MAP, ASAN_OPTIONS,
#   UBSAN_OPTIONS, SLIDEWIN_PORT_RANGE   passed through as they are
#   SLIDEWIN_REDIS_PORT, SLIDEWIN_PGHOST, SLIDEWIN_PGPORT
#                          the shared servers, when they started (PGHOST and
#                          PGPORT are passed too, but PostgreSQL::Test::Utils
#                          deletes them when it loads)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source-path=SCRIPTDIR
. "$here/lib.sh"

# A normal run needs about 15 s for each pg_regress-style suite and 15 s for
# the slowest TAP file, the sanitize pass about twice that: a hang fails
# within four minutes, with a generous margin for a slow machine.
suite_timeout=${SLIDEWIN_SUITE_TIMEOUT:-240}
tap_timeout=${SLIDEWIN_TAP_TIMEOUT:-240}
export PGISOLATIONTIMEOUT=${PGISOLATIONTIMEOUT:-60}
sanitize_timeout=${SLIDEWIN_SANITIZE_TIMEOUT:-1800}
run_label=${SLIDEWIN_PASS:-} # set by test/sanitize.sh for its inner run
tap_jobs=${SLIDEWIN_TAP_JOBS:-$(nproc 2>/dev/null || echo 1)}
if [[ -z ${SLIDEWIN_TAP_JOBS:-} ]] && ((tap_jobs > 4)); then
	tap_jobs=4
fi
# Extra TAP slots for the files that mostly wait (see run_tap_suite).
tap_wait_jobs=${SLIDEWIN_TAP_WAIT_JOBS:-1}
diff_lines=300
tap_log_lines=150

passed=0
failed=0
failures=()
# The machine's CPU time (all cores: busy, total) at the start, from
# /proc/stat, for the line at the end that says how busy this run kept it.
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat 2>/dev/null; }
read -r cpu_busy0 cpu_all0 < <(cpu_ticks)
started_at=$SECONDS
work=
finished=
interrupted=
declare -A running=() # pid of a background runner -> what it runs

pass() { passed=$((passed + 1)); }
fail() {
	failed=$((failed + 1))
	failures+=("$1")
}

banner() { printf '\n======== %s ========\n' "$*"; }

# Print FILE, at most LIMIT lines, saying how much was left out.
print_capped() {
	local file=$1 limit=$2 total
	[[ -f $file ]] || return 0
	total=$(wc -l <"$file")
	head -n "$limit" "$file"
	if ((total > limit)); then
		echo "... ($((total - limit)) more lines not shown)"
	fi
}

# Stop what we started (by pid), report, and leave.  Runs on every exit.
# shellcheck disable=SC2317
finish() {
	local rc=$? pid
	trap - EXIT INT TERM
	if [[ -n $interrupted ]]; then
		fail "run interrupted"
	elif [[ -z $finished ]]; then
		fail "harness stopped early (status $rc)"
	fi
	for pid in "${!running[@]}"; do
		fail "${running[$pid]} (did not finish)"
		kill -TERM "$pid" 2>/dev/null
	done
	for pid in "${!running[@]}"; do
		wait "$pid" 2>/dev/null
	done
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
	if ((passed + failed == 0)); then
		echo "no tests found: nothing was checked"
		failed=1
	fi
	local cpu_busy1 cpu_all1
	if read -r cpu_busy1 cpu_all1 < <(cpu_ticks) && ((cpu_all1 > cpu_all0)); then
		echo "took $((SECONDS - started_at)) s; the machine's CPUs were busy" \
			"$(((cpu_busy1 - cpu_busy0) * 100 / (cpu_all1 - cpu_all0)))% of it ($(nproc) cores)"
	fi
	if ((${#failures[@]} > 0)); then
		echo
		echo "failed:"
		printf '  %s\n' "${failures[@]}"
	fi
	echo "$passed passed, $failed failed"
	if ((failed > 0)); then
		exit 1
	fi
	exit 0
}
trap finish EXIT
trap 'interrupted=1; exit 130' INT TERM

# bounded LOG CMD...: run CMD in the background under `timeout`, so that a
# hung suite ends and a signal to us is handled at once; output goes to LOG.
bounded() {
	local log=$1 pid rc
	shift
	timeout -k 15 "$@" >"$log" 2>&1 </dev/null &
	pid=$!
	running[$pid]=$(basename "$log" .log)
	wait "$pid"
	rc=$?
	unset "running[$pid]"
	return "$rc"
}

# List NAMEs for files DIR/*SUFFIX, sorted bytewise like make's $(sort).
list_names() {
	local dir=$1 suffix=$2 f
	for f in "$dir"/*"$suffix"; do
		[[ -f $f ]] || continue
		f=${f##*/}
		echo "${f%"$suffix"}"
	done | LC_ALL=C sort
}

# ---- discover ---------------------------------------------------------------

mapfile -t regress_tests < <(list_names "$repo/sql" .sql | grep -v '^slidewin--')
mapfile -t isolation_tests < <(list_names "$repo/test/isolation/specs" .spec)
mapfile -t tap_tests < <(list_names "$repo/test/t" .pl)
mapfile -t fuzz_targets < <(list_names "$repo/test/fuzz" .c | grep '^fuzz_')
mapfile -t unit_tests < <(list_names "$repo/test/unit" .c | grep '^unit_')
lint_tests=(luacheck layers meta)
if [[ $run_label == cluster ]]; then
	# The cluster pass: the suites that use the shared servers, now against a
	# Redis Cluster. The TAP scripts start their own servers, each for the
	# topology it tests (100-103 for Cluster); fuzzers and unit tests use none.
	tap_tests=()
	fuzz_targets=()
	unit_tests=()
	lint_tests=()
elif [[ -n $run_label ]]; then
	# The Valkey and sanitize passes: the fuzzers and unit tests use no server
	# and are built with the sanitizers already, so another run of them would
	# check nothing the first did not; nor would a second lint.
	fuzz_targets=()
	unit_tests=()
	lint_tests=()
fi
if [[ $run_label == valkey ]]; then
	# The Valkey pass tests slidewin against another server. A TAP file that
	# starts none (it talks to a fake server, test/perl/FakeRedis.pm, only)
	# would run exactly as in the main pass, so it is left out; it says so
	# with the line "# slidewin: starts no Redis server", and
	# test/perl/SlidewinTest.pm refuses to start a server (Redis, Valkey,
	# sentinel) from a file that says so.
	mapfile -t tap_tests < <(for t in "${tap_tests[@]}"; do
		grep -qx '# slidewin: starts no Redis server' "$repo/test/t/$t.pl" || echo "$t"
	done)
fi
if [[ -n ${SLIDEWIN_ONLY:-} ]]; then
	mapfile -t regress_tests < <(printf '%s\n' "${regress_tests[@]}" | grep -E -- "$SLIDEWIN_ONLY")
	mapfile -t isolation_tests < <(printf '%s\n' "${isolation_tests[@]}" | grep -E -- "$SLIDEWIN_ONLY")
	mapfile -t tap_tests < <(printf '%s\n' "${tap_tests[@]}" | grep -E -- "$SLIDEWIN_ONLY")
	mapfile -t fuzz_targets < <(printf '%s\n' "${fuzz_targets[@]}" | grep -E -- "$SLIDEWIN_ONLY")
	mapfile -t unit_tests < <(printf '%s\n' "${unit_tests[@]}" | grep -E -- "$SLIDEWIN_ONLY")
	mapfile -t lint_tests < <(printf '%s\n' "${lint_tests[@]}" | grep -E -- "$SLIDEWIN_ONLY")
	echo "SLIDEWIN_ONLY=$SLIDEWIN_ONLY: a partial run"
fi

echo "found ${#regress_tests[@]} regression tests, ${#isolation_tests[@]} isolation specs, ${#tap_tests[@]} TAP files, ${#fuzz_targets[@]} fuzz targets, ${#unit_tests[@]} unit tests, ${#lint_tests[@]} lint"
echo "time limits: ${suite_timeout} s for each pg_regress-style suite (SLIDEWIN_SUITE_TIMEOUT)," \
	"${PGISOLATIONTIMEOUT} s for one isolation step (PGISOLATIONTIMEOUT), ${tap_timeout} s for each TAP file (SLIDEWIN_TAP_TIMEOUT)"
if [[ -n ${SLIDEWIN_SERVER_WRAPPER:-} ]]; then
	echo "servers run under SLIDEWIN_SERVER_WRAPPER=$SLIDEWIN_SERVER_WRAPPER"
fi
if ((${#regress_tests[@]} + ${#isolation_tests[@]} + ${#tap_tests[@]} + ${#fuzz_targets[@]} + ${#unit_tests[@]} + ${#lint_tests[@]} == 0)); then
	finished=1
	exit
fi

for tool in "$PG_REGRESS" "$PG_ISOLATION_REGRESS" "$PG_BINDIR/initdb"; do
	if [[ ! -x $tool ]]; then
		echo "missing PostgreSQL tool: ${tool:-(pg_config $PG_CONFIG not found)}; run test/deps.sh" >&2
		fail "setup: PostgreSQL tools"
		finished=1
		exit
	fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/slidewin-test.XXXXXX") || {
	fail "setup: mktemp"
	finished=1
	exit
}
# Clusters run as $SLIDEWIN_PG_USER, which must be able to enter the work dir.
chmod 755 "$work"
if ! as_pg_user test -x "$work"; then
	echo "user $SLIDEWIN_PG_USER cannot reach $work; set TMPDIR to a directory it can" >&2
	fail "setup: work directory"
	finished=1
	exit
fi

# One npm cache for every `npm ci` of this run, its inner passes included
# (TAP 130-132 and the web benchmark's smoke each install from a lockfile):
# a package is downloaded once, not once per file and pass. npm's cache is
# safe to share between installs that run at once. It goes with the work
# directory of the run that made it.
if [[ -z ${SLIDEWIN_NPM_CACHE:-} ]]; then
	export SLIDEWIN_NPM_CACHE=$work/npm-cache
	mkdir -p "$SLIDEWIN_NPM_CACHE"
	if ((EUID == 0)); then
		chown "$SLIDEWIN_PG_USER:" "$SLIDEWIN_NPM_CACHE"
	fi
fi

# ---- shared servers for pg_regress and isolation ------------------------------

server_ok=
if [[ $run_label == cluster ]]; then
	# three masters, no replicas; the server's slidewin.redis_url names two seeds
	if cl=$(start_redis_cluster "$work/cluster" 3); then
		read -r -a cl_ports <<<"$cl"
		redis_port=${cl_ports[0]}
		pg_port=$(free_port) &&
			start_pg "$pg_port" "$work/pg" "redis-cluster://127.0.0.1:${cl_ports[0]},127.0.0.1:${cl_ports[1]}" &&
			server_ok=1
	fi
else
	redis_port=$(free_port) && start_redis "$redis_port" "$work/redis" &&
		pg_port=$(free_port) && start_pg "$pg_port" "$work/pg" "$redis_port" &&
		server_ok=1
fi
# server_maps DATADIR: the postmaster of DATADIR maps $SLIDEWIN_SERVER_MUST_MAP
# (when set), so the wrapper really reached it.
server_maps() {
	local want=${SLIDEWIN_SERVER_MUST_MAP:-} pid
	[[ -n $want ]] || return 0
	pid=$(head -n 1 "$1/postmaster.pid" 2>/dev/null)
	if [[ $pid =~ ^[0-9]+$ ]] && grep -qF -- "$want" "/proc/$pid/maps" 2>/dev/null; then
		return 0
	fi
	echo "the server in $1 does not map $want: SLIDEWIN_SERVER_WRAPPER did not reach it" >&2
	return 1
}
if [[ -n $server_ok ]] && ! server_maps "$work/pg/data"; then
	server_ok=
fi
if [[ -n $server_ok ]]; then
	export SLIDEWIN_REDIS_PORT=$redis_port PGHOST=127.0.0.1 PGPORT=$pg_port
	echo "redis on 127.0.0.1:$redis_port, postgres on 127.0.0.1:$pg_port (work dir $work)"
else
	fail "setup: could not start the Redis and PostgreSQL servers"
fi

# run_pgxs_suite TITLE RUNNER INPUTDIR DBNAME TESTS...: one pg_regress-style
# run; each named test counts as passed only if the runner printed `ok` for it.
run_pgxs_suite() {
	local title=$1 runner=$2 inputdir=$3 dbname=$4 t re rc outdir log
	shift 4
	(($# > 0)) || return 0
	banner "$title ($# tests)"
	if [[ -z $server_ok ]]; then
		echo "not run: no server"
		for t in "$@"; do fail "$title: $t (not run)"; done
		return
	fi
	outdir=$work/$title
	log=$work/$title.log
	mkdir -p "$outdir"
	bounded "$log" "$suite_timeout" "$runner" \
		--inputdir="$inputdir" --outputdir="$outdir" --bindir="$PG_BINDIR" \
		--host=127.0.0.1 --port="$pg_port" --user=postgres \
		--dbname="$dbname" --load-extension=slidewin "$@"
	rc=$?
	cat "$log"
	if ((rc == 124 || rc == 137)); then
		echo "$title: TIMED OUT after $suite_timeout s (SLIDEWIN_SUITE_TIMEOUT): a hang, or a very slow machine"
	fi
	for t in "$@"; do
		# PostgreSQL 15: "test NAME ... ok"; 16 and later: "ok N - NAME".
		re=$(printf %s "$t" | sed 's/[][\.*^$+?(){}|/]/\\&/g')
		if grep -Eq "^(test)? +$re +\.\.\. ok( |\$)|^ok [0-9]+ +[-+] +$re( |\$)" "$log"; then
			pass
		else
			fail "$title: $t"
		fi
	done
	if [[ -s $outdir/regression.diffs ]]; then
		banner "$title: regression.diffs"
		print_capped "$outdir/regression.diffs" "$diff_lines"
	fi
}

run_pgxs_suite regression "$PG_REGRESS" "$repo" contrib_regression "${regress_tests[@]}"
run_pgxs_suite isolation "$PG_ISOLATION_REGRESS" "$repo/test/isolation" isolation_regression "${isolation_tests[@]}"

# ---- TAP ------------------------------------------------------------------------

run_tap_suite() {
	(($# > 0)) || return 0
	banner "TAP ($# files, $tap_jobs at a time, and $tap_wait_jobs more of those that mostly wait)"
	local tapdir=$work/tap src=$repo t pid rc
	local -A rc_of=()

	mkdir -p "$tapdir/portlock"
	if ((EUID == 0)); then
		chown -R "$SLIDEWIN_PG_USER:" "$tapdir"
	fi
	# The scripts run as $SLIDEWIN_PG_USER; give it a copy if it cannot read
	# the checkout (e.g. one below a private home directory).
	# shellcheck disable=SC2016
	if ! as_pg_user sh -c 'find "$1/test" -type f -exec cat {} + >/dev/null 2>&1' _ "$repo"; then
		src=$work/src
		mkdir -p "$src"
		tar -C "$repo" --exclude=./.git -cf - . | tar -C "$src" -xf -
		if ((EUID == 0)); then
			chown -R "$SLIDEWIN_PG_USER:" "$src"
		fi
		echo "($SLIDEWIN_PG_USER cannot read $repo; running TAP from a copy)"
	fi

	local -a prefix envs
	mapfile -t prefix < <(pg_user_prefix)
	envs=(
		PATH="$PG_BINDIR:$PATH"
		PERL5LIB="$PG_TAP_PERL:$src/test/perl"
		TESTDIR="$tapdir"
		TESTDATADIR="$tapdir/tmp_check"
		TESTLOGDIR="$tapdir/tmp_check/log"
		PG_REGRESS="$PG_REGRESS"
		PG_TEST_PORT_DIR="${PG_TEST_PORT_DIR:-$tapdir/portlock}"
		SLIDEWIN_SRC="$src"
		SLIDEWIN_NPM_CACHE="$SLIDEWIN_NPM_CACHE"
	)
	if [[ -n $server_ok ]]; then
		# PostgreSQL::Test::Utils deletes PGHOST and PGPORT when it loads, so
		# scripts that want the shared server read the SLIDEWIN_ names.
		envs+=(
			SLIDEWIN_REDIS_PORT="$redis_port"
			PGHOST=127.0.0.1 PGPORT="$pg_port"
			SLIDEWIN_PGHOST=127.0.0.1 SLIDEWIN_PGPORT="$pg_port"
		)
	fi

	# Start up to $tap_jobs files at once; collect exit statuses by pid.
	# The longest files (by the wall times of a CI run, longest first) start
	# first and the short ones fill in after them: in name order the soak
	# (140, about a minute) started last and ran alone at the end of each
	# pass while the other slots stood idle. Only the order changes; the
	# results are printed in name order below. 056 (mostly waiting on its
	# slots) comes before 080 so that 080's 600k calls, which need a core,
	# do not start beside 057's unpaced pgbench runs (on a machine loaded
	# elsewhere, 080 beside 057 took 231 s of its 240).
	local -a queue=() slow=(057_outage_exact 056_leases 104_cluster_attempt_all 057_partial_outage 080_tls 140_soak
		014_attempt_all 101_cluster_moves 090_sentinel 110_stats 100_cluster
		064_misconf 016_attempt_all_fallback 012_recovery 010_concurrency
		131_example_fastapi 130_example_express 132_headers_all_sfv
		060_standby_known_denials 075_batch_fairness 105_cluster_batch)
	local -A is_slow=()
	for t in "${slow[@]}"; do
		is_slow[$t]=1
		if [[ " $* " == *" $t "* ]]; then
			queue+=("$t")
		fi
	done
	for t in "$@"; do
		[[ -n ${is_slow[$t]:-} ]] || queue+=("$t")
	done

	# The files that mostly wait: for Redis or PostgreSQL timeouts, a
	# sentinel's failover, leases and windows running out. Measured in one
	# main pass (2 CPUs, each file in a cgroup of its own, its servers
	# included), each kept one CPU busy at most 30 % of its run, 17 % on
	# average (104: 9 CPU-seconds in 46 s; 090: 4 in 30 s). Beside the
	# $tap_jobs slots for any file, $tap_wait_jobs more run only these, so
	# that the CPUs they leave idle are not idle for the whole pass: at most
	# $tap_jobs files that need a CPU run at once, as before. The batch tests
	# (074, 105) wait too, but check times to a tenth of a second, and stay
	# in the common slots.
	local -a waiting=(104_cluster_attempt_all 056_leases 090_sentinel 064_misconf
		016_attempt_all_fallback 070_many_servers 060_standby_known_denials
		050_hostile_replies 072_failover 011_timeouts 056_slot_leaks 021_faults
		063_dns 030_wait_shadow 022_policy_sources)
	local -A is_waiting=()
	for t in "${waiting[@]}"; do is_waiting[$t]=1; done
	local -A name_of=()
	local busy=0 i started
	while ((${#queue[@]} > 0 || ${#name_of[@]} > 0)); do
		# Start the first file in the queue that may run now, until none may.
		started=1
		while ((started && ${#queue[@]} > 0)); do
			started=0
			for i in "${!queue[@]}"; do
				t=${queue[i]}
				if [[ -n ${is_waiting[$t]:-} ]]; then
					((${#name_of[@]} < tap_jobs + tap_wait_jobs)) || continue
				else
					((busy < tap_jobs && ${#name_of[@]} < tap_jobs + tap_wait_jobs)) || continue
					busy=$((busy + 1))
				fi
				unset "queue[i]"
				queue=("${queue[@]}")
				timeout -k 15 "$tap_timeout" "${prefix[@]}" env -C "$tapdir" "${envs[@]}" \
					prove "$src/test/t/$t.pl" >"$tapdir/$t.out" 2>&1 </dev/null &
				pid=$!
				name_of[$pid]=$t
				running[$pid]="TAP: $t"
				started=1
				break
			done
		done
		pid=
		wait -n -p pid "${!name_of[@]}"
		rc=$?
		[[ -n $pid ]] || continue
		t=${name_of[$pid]}
		rc_of[$t]=$rc
		[[ -n ${is_waiting[$t]:-} ]] || busy=$((busy - 1))
		unset "name_of[$pid]" "running[$pid]"
	done

	for t in "$@"; do
		cat "$tapdir/$t.out"
		rc=${rc_of[$t]}
		if ((rc == 0)); then
			pass
			continue
		fi
		if ((rc == 124 || rc == 137)); then
			echo "$t: TIMED OUT after $tap_timeout s (SLIDEWIN_TAP_TIMEOUT): a hang, or a very slow machine"
		fi
		fail "TAP: $t"
		# What failed, in the list printed last (the end of a long log
		# is often all a reader of CI gets): Test::More's own lines.
		while IFS= read -r line; do
			failures+=("  $line")
		done < <(grep -E -A6 '^#   Failed test' "$tapdir/$t.out" | grep -v '^--$' | head -n 30)
		banner "TAP $t: last $tap_log_lines lines of its log"
		if [[ -f $tapdir/tmp_check/log/regress_log_$t ]]; then
			tail -n "$tap_log_lines" "$tapdir/tmp_check/log/regress_log_$t"
		else
			echo "(no log)"
		fi
		# and what its servers said (why a call went to the fallback
		# store, say): the last lines of each PostgreSQL log it wrote
		for log in "$tapdir"/tmp_check/log/"${t}"_*.log; do
			[[ -f $log ]] || continue
			banner "TAP $t: last 40 lines of $(basename "$log")"
			tail -n 40 "$log"
		done
	done
}

run_tap_suite "${tap_tests[@]}"

# ---- fuzzers --------------------------------------------------------------------
# A short run of each libFuzzer target (test/fuzz/run.sh, $SLIDEWIN_FUZZ_SECONDS
# each, default 6; `make fuzz` runs them longer). Each target counts as one
# test; a build that fails fails them all. They need no server.
run_fuzz_targets() {
	(($# > 0)) || return 0
	local secs=${SLIDEWIN_FUZZ_SECONDS:-6} t
	banner "fuzz ($# targets, $secs s each)"
	if ! bounded "$work/fuzz_build.log" 600 bash "$repo/test/fuzz/run.sh" --build-only; then
		cat "$work/fuzz_build.log"
		for t in "$@"; do fail "fuzz: $t (not built)"; done
		return
	fi
	# Each target is one process on one CPU: as many run at once as TAP files
	# do, and are reported in name order.
	local -A pid_of=() rc_of=()
	local -a order=("$@")
	local pid rc next=0
	while ((next < ${#order[@]} || ${#pid_of[@]} > 0)); do
		while ((next < ${#order[@]} && ${#pid_of[@]} < tap_jobs)); do
			t=${order[next]}
			next=$((next + 1))
			timeout -k 15 $((secs + 300)) bash "$repo/test/fuzz/run.sh" --seconds "$secs" "$t" \
				>"$work/$t.log" 2>&1 </dev/null &
			pid_of[$!]=$t
			running[$!]="fuzz: $t"
		done
		pid=
		wait -n -p pid "${!pid_of[@]}"
		rc=$?
		[[ -n $pid ]] || continue
		rc_of[${pid_of[$pid]}]=$rc
		unset "pid_of[$pid]" "running[$pid]"
	done
	for t in "${order[@]}"; do
		if ((rc_of[$t] == 0)); then
			grep "^$t:" "$work/$t.log"
			pass
		else
			cat "$work/$t.log"
			fail "fuzz: $t"
		fi
	done
}

# ---- unit tests -----------------------------------------------------------------
# Each test/unit/unit_*.c, built with the sanitizers and run once by
# test/unit/run.sh, counts as one test. They need no server.
run_unit_tests() {
	(($# > 0)) || return 0
	local t
	banner "unit ($# tests)"
	for t in "$@"; do
		if bounded "$work/$t.log" 300 bash "$repo/test/unit/run.sh" "$t"; then
			grep "^$t:" "$work/$t.log"
			pass
		else
			cat "$work/$t.log"
			fail "unit: $t"
		fi
	done
}

# ---- luacheck -------------------------------------------------------------------
# test/luacheck.sh lints every script as Redis runs it (src/store/redis/lua, put together
# as src/store/redis/scripts.c does); one test. No server.
run_luacheck() {
	local t found=0
	for t in "$@"; do [[ $t == luacheck ]] && found=1; done
	((found)) || return 0
	banner "luacheck"
	if bounded "$work/luacheck.log" 120 bash "$repo/test/luacheck.sh"; then
		tail -n 1 "$work/luacheck.log"
		pass
	else
		print_capped "$work/luacheck.log" 200
		fail "luacheck"
	fi
}

# ---- layers ---------------------------------------------------------------------
# test/check_layers.pl: the house rules of src/ (src/LAYERS), read from the
# includes and from the symbols of the objects make built; one test.
run_layers() {
	local t found=0
	for t in "$@"; do [[ $t == layers ]] && found=1; done
	((found)) || return 0
	banner "layers"
	if bounded "$work/layers.log" 120 perl "$repo/test/check_layers.pl" --strict "$repo/src"; then
		tail -n 1 "$work/layers.log"
		pass
	else
		print_capped "$work/layers.log" 200
		fail "layers"
	fi
}

# ---- meta -----------------------------------------------------------------------
# test/check_meta.pl: META.json (PGXN) against the spec, slidewin.control's
# default_version and debian/; one test.
run_meta() {
	local t found=0
	for t in "$@"; do [[ $t == meta ]] && found=1; done
	((found)) || return 0
	banner "meta"
	if bounded "$work/meta.log" 60 perl "$repo/test/check_meta.pl" "$repo"; then
		tail -n 1 "$work/meta.log"
		pass
	else
		print_capped "$work/meta.log" 200
		fail "meta"
	fi
}

# An inner pass (valkey, sanitize) tests the server side again; the fuzzers,
# unit tests and lint ran once already.
if [[ -z $run_label ]]; then
	run_fuzz_targets "${fuzz_targets[@]}"
	run_unit_tests "${unit_tests[@]}"
	run_luacheck "${lint_tests[@]}"
	run_layers "${lint_tests[@]}"
	run_meta "${lint_tests[@]}"
fi

# ---- server logs ----------------------------------------------------------------
# A crash or a sanitizer report must fail the run even when no test output
# changed (a backend that aborts after answering, a report at exit).  The
# shared servers stop first, so that what they log on the way out is seen.

# scan_log LOG: print the lines of LOG that report a sanitizer finding or a
# crash, a sanitizer report with the lines that follow it (its stack), except
# crash lines that LOG.allow declares; exit status 1 if any was printed.
scan_log() {
	local log=$1
	awk -v allowfile="$log.allow" -v name="${log#"$work"/}" '
		BEGIN {
			while ((getline line < allowfile) > 0)
				if (line != "") { n++; allow[n] = line; left[n] = 1 }
		}
		ctx > 0 {
			if (shown < 400) { print "    | " $0; shown++ }
			ctx--
			if ($0 ~ /^SUMMARY: |^==[0-9]+==ABORTING/) ctx = 0
			next
		}
		/AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:|terminated by signal|PANIC:  / {
			sanitizer = ($0 ~ /Sanitizer|runtime error:/)
			if (!sanitizer)
				for (i = 1; i <= n; i++)
					if (left[i] && index($0, allow[i]) > 0) { left[i] = 0; next }
			hits++
			if (shown < 400) { print "  " name ":" FNR ": " $0; shown++ }
			if (sanitizer) ctx = 80
		}
		END {
			for (i = 1; i <= n; i++)
				if (left[i])
					print "  note: " name ".allow: no line with \"" allow[i] "\"" > "/dev/stderr"
			if (shown >= 400) print "  ... (more not shown)"
			exit hits > 0
		}' "$log"
}

scan_logs() {
	local -a logs=()
	local log bad=0
	[[ -f $work/pg/postgres.log ]] && logs+=("$work/pg/postgres.log")
	for log in "$work"/tap/tmp_check/log/*.log; do
		[[ -f $log ]] && logs+=("$log")
	done
	((${#logs[@]} > 0)) || return 0
	banner "log scan (${#logs[@]} server logs)"
	for log in "${logs[@]}"; do
		if ! scan_log "$log"; then
			fail "log scan: ${log#"$work"/}"
			bad=1
		fi
	done
	if ((bad == 0)); then
		echo "no sanitizer report, signal or PANIC in ${#logs[@]} logs"
		pass
	fi
}

if [[ -n $server_ok ]]; then
	stop_pg "$work/pg" >/dev/null 2>&1
fi
scan_logs

# ---- sanitize pass --------------------------------------------------------------
# test/sanitize.sh prints a whole run of this script; its counts join ours.
# start_inner_pass NAME TIMEOUT VARIABLE CMD...: start another whole run of
# this script in the background (CMD runs it, with SLIDEWIN_PASS set); its
# output goes to $work/NAME.out. finish_inner_pass NAME waits for it, prints
# that output, and adds its counts to ours; its failures are named
# "NAME: ...". run_inner_pass does both, for a pass that runs alone.
declare -A inner_pid inner_limit inner_var
start_inner_pass() {
	local name=$1
	inner_limit[$name]=$2
	inner_var[$name]=$3
	shift 3
	timeout -k 15 "${inner_limit[$name]}" "$@" >"$work/$name.out" 2>&1 </dev/null &
	inner_pid[$name]=$!
	running[$!]="$name pass"
}
finish_inner_pass() {
	local name=$1 out=$work/$1.out pid=${inner_pid[$1]} rc summary
	banner "$name pass"
	wait "$pid"
	rc=$?
	unset "running[$pid]"
	cat "$out"
	if ((rc == 124 || rc == 137)); then
		echo "$name pass: TIMED OUT after ${inner_limit[$name]} s (${inner_var[$name]})"
	fi
	summary=$(tail -n 1 "$out")
	if [[ $summary =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
		passed=$((passed + BASH_REMATCH[1]))
		failed=$((failed + BASH_REMATCH[2]))
		mapfile -t -O "${#failures[@]}" failures < <(
			sed -n '/^failed:$/,$p' "$out" | sed -n "s/^  \(.*\)/$name: \1/p")
		if ((rc != 0 && BASH_REMATCH[2] == 0)); then
			fail "$name pass (status $rc)"
		fi
	else
		fail "$name pass (no summary line, status $rc)"
	fi
}
run_inner_pass() {
	start_inner_pass "$@"
	finish_inner_pass "$1"
}

# should_run SETTING NAME: whether an extra pass runs (1: yes, 0: no, unset:
# yes unless this is a partial run), saying so when it does not.
should_run() {
	case ${1:-} in
	1) return 0 ;;
	0)
		echo "$2 pass skipped (set to 0)"
		return 1
		;;
	*)
		if [[ -n ${SLIDEWIN_ONLY:-} ]]; then
			echo "$2 pass skipped: a partial run (set it to 1 to run it)"
			return 1
		fi
		return 0
		;;
	esac
}

if [[ -z $run_label ]]; then
	# The Redis-facing suites again, against Valkey 8 (TAP 001 checks which
	# server they got). A missing valkey-server is a failure, not a skip.
	# The cluster pass runs beside it: about 40 s of pg_regress and the
	# isolation tester against a Redis Cluster, which keep a third of one CPU
	# busy, while the Valkey pass starts the same way. Each pass has servers
	# of its own; the output still comes one pass after the other.
	valkey_started=
	if should_run "${SLIDEWIN_VALKEY:-}" "Valkey (SLIDEWIN_VALKEY)"; then
		if command -v valkey-server >/dev/null 2>&1; then
			start_inner_pass valkey "$sanitize_timeout" SLIDEWIN_SANITIZE_TIMEOUT \
				env SLIDEWIN_PASS=valkey SLIDEWIN_REDIS_SERVER=valkey-server \
				SLIDEWIN_REDIS_CLI=valkey-cli bash "$here/run_all.sh"
			valkey_started=1
		else
			fail "valkey pass: valkey-server is not installed (run test/deps.sh)"
		fi
	fi
	# The suites that use the shared servers, again against a Redis Cluster.
	cluster_started=
	if should_run "${SLIDEWIN_CLUSTER:-}" "cluster (SLIDEWIN_CLUSTER)"; then
		start_inner_pass cluster "$sanitize_timeout" SLIDEWIN_SANITIZE_TIMEOUT \
			env SLIDEWIN_PASS=cluster bash "$here/run_all.sh"
		cluster_started=1
	fi
	[[ -z $valkey_started ]] || finish_inner_pass valkey
	[[ -z $cluster_started ]] || finish_inner_pass cluster
	if should_run "${SLIDEWIN_SANITIZE:-}" "sanitize (SLIDEWIN_SANITIZE)"; then
		run_inner_pass sanitize "$sanitize_timeout" SLIDEWIN_SANITIZE_TIMEOUT \
			bash "$here/sanitize.sh"
	fi
fi

# ---- benchmark smoke ------------------------------------------------------------
# `make bench` is not part of the tests, but a short run of every workload is,
# so that the benchmark cannot rot. It checks that each workload runs, not the
# performance targets.
if [[ -n $run_label ]] || { [[ -n ${SLIDEWIN_ONLY:-} ]] && ! grep -Eq -- "$SLIDEWIN_ONLY" <<<bench; }; then
	finished=1
	exit 0
fi
# The three smokes run at once, each on a third of the port range (they
# check that each workload runs, not its speed, so sharing the CPUs costs
# them nothing but time, and saves the suite a minute), and are reported
# one after the other.
read -r smoke_lo smoke_hi < <(port_range)
smoke_step=$(((smoke_hi - smoke_lo + 1) / 3))
declare -A smoke_pid
start_smoke() { # start_smoke NAME INDEX LIMIT CMD...: in the background, output in $work/NAME.out
	local name=$1 i=$2 limit=$3 lo
	shift 3
	lo=$((smoke_lo + i * smoke_step))
	SLIDEWIN_PORT_RANGE=$lo-$((lo + smoke_step - 1)) timeout -k 15 "$limit" "$@" \
		>"$work/$name.out" 2>&1 </dev/null &
	smoke_pid[$name]=$!
	running[$!]="$name"
}
wait_smoke() { # wait_smoke NAME: its exit status
	local name=$1 pid=${smoke_pid[$1]} rc=0
	wait "$pid" || rc=$?
	unset "running[$pid]"
	return "$rc"
}
start_smoke bench_smoke 0 300 bash "$repo/test/bench/run.sh" --smoke
# The script-level benchmark (make bench-scripts), as briefly: every row
# must come out with a figure for both scripts.
start_smoke scripts_smoke 1 120 bash "$repo/test/bench/scripts.sh" 2000
# The web benchmark (make bench-web), as briefly: every route of its app
# answers 200 under autocannon.
start_smoke web_smoke 2 300 bash "$repo/test/bench/web.sh" --smoke

banner "bench smoke (test/bench/run.sh --smoke)"
if wait_smoke bench_smoke; then
	tail -n 3 "$work/bench_smoke.out"
	pass
else
	tail -n 40 "$work/bench_smoke.out"
	fail "bench smoke"
fi
banner "script benchmark smoke (test/bench/scripts.sh 2000)"
if wait_smoke scripts_smoke &&
	[[ $(grep -cE '^\| [a-z].* \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ ×' "$work/scripts_smoke.out") -eq 7 ]]; then
	echo "7 rows, each measured"
	pass
else
	tail -n 20 "$work/scripts_smoke.out"
	fail "script benchmark smoke"
fi
banner "web benchmark smoke (test/bench/web.sh --smoke)"
if wait_smoke web_smoke; then
	grep -E '^\| many ' "$work/web_smoke.out" | wc -l | sed 's/$/ routes, each answered 200/'
	pass
else
	tail -n 30 "$work/web_smoke.out"
	fail "web benchmark smoke"
fi

finished=1
exit 0
