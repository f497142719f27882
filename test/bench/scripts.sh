#!/usr/bin/env bash
# test/bench/scripts.sh: what each of slidewin's scripts costs Redis per
# call, beside a naive script, in Redis alone (no PostgreSQL in the loop).
#
#   bash test/bench/scripts.sh [REQUESTS] [--instructions]   (make bench-scripts)
#
# A throwaway redis-server on a free loopback port. slidewin's library of
# functions is loaded with FUNCTION LOAD and its scripts with SCRIPT LOAD,
# both put together byte for byte out of src/store/redis/lua, as src/store/redis/scripts.c does, by
# lua_source.pl; each row runs slidewin's function with FCALL (what
# slidewin sends where the server has functions), the naive script with
# EVALSHA, slidewin's script with EVALSHA (what it sends to Redis 6.2, or
# with slidewin.redis_functions off)
# and the naive script as a function, by redis-benchmark, 8 connections,
# REQUESTS calls each (default 200,000). Each run resets the counters
# (CONFIG RESETSTAT) and reads INFO commandstats after it: the Redis CPU per
# call is usec / calls of FCALL or EVALSHA, the time Redis spent inside the
# script, which is what a change to a script changes. The whole process's
# CPU (user + system from /proc, the socket work included) is shown beside
# it for the first two. The many-keys rows empty the database (FLUSHDB,
# which keeps scripts and functions) before each run.
#
# The naive script is the one the design documents start from: TIME,
# ZREMRANGEBYSCORE, ZCARD, ZADD and EXPIRE on one sorted set, one member
# per call. It is neither exact for weighted costs nor O(log n) (its trim
# is O(entries removed), its members carry a random suffix): it is the
# price of the simplest limiter, against which slidewin's is measured.
#
# Rows (all on the Redis clock, win 1 hour unless said):
#   many keys      100,000 keys, every call admitted
#   hot keys       one key in its steady state, windows of 20 ms and 2 s
#                  (about 1,000 and 100,000 entries at 50,000 calls a second;
#                  the table says how many each held), admitted
#   denial         one key that is full (lim 1,000 of 1,000): denied, no write
#   counting       fixed_window, sliding_counter, token_bucket on many keys
#
# Output: a Markdown table, slidewin's function against the naive script,
# ratio, then the other two.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../lib.sh
. "$repo/test/lib.sh"

requests=200000
instructions=
for a in "$@"; do
	case $a in
	--instructions) instructions=1 ;;
	*) requests=$a ;;
	esac
done
[[ ${SLIDEWIN_SCRIPT_INSTRUCTIONS:-} == 1 ]] && instructions=1
[[ $requests =~ ^[1-9][0-9]*$ ]] || { echo "scripts.sh: REQUESTS must be a positive integer" >&2; exit 2; }
for tool in "$SLIDEWIN_REDIS_SERVER" "$SLIDEWIN_REDIS_CLI" redis-benchmark perl awk; do
	command -v "$tool" >/dev/null 2>&1 || { echo "scripts.sh: missing $tool (run test/deps.sh)" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/slidewin-scripts.XXXXXX")
port=$(free_port) || exit 1
start_redis "$port" "$work/redis" >/dev/null || { echo "scripts.sh: could not start Redis" >&2; exit 1; }
trap 'stop_redis "$work/redis"; rm -rf "$work"' EXIT
rcli() { "$SLIDEWIN_REDIS_CLI" -h 127.0.0.1 -p "$port" "$@"; }
pid=$(<"$work/redis/redis.pid")

load() { # load FILE: its SHA1 in Redis
	rcli -x SCRIPT LOAD <"$1" | tr -d '\r'
}
for a in lua_log_attempt lua_fixed_window lua_sliding_counter lua_token_bucket; do
	perl "$here/lua_source.pl" "$repo/src/store/redis/scripts.c" "$a" >"$work/$a.lua" ||
		{ echo "scripts.sh: cannot read $a out of src/store/redis/scripts.c" >&2; exit 1; }
done
# slidewin's library of functions, as src/store/redis/scripts.c builds it, and the
# names of the functions in it
perl "$here/lua_source.pl" "$repo/src/store/redis/scripts.c" --library >"$work/library.lua" ||
	{ echo "scripts.sh: cannot build the library out of src/store/redis/scripts.c" >&2; exit 1; }
declare -A fn
for a in log_attempt fixed_window sliding_counter token_bucket; do
	fn[lua_$a]=$(perl "$here/lua_source.pl" "$repo/src/store/redis/scripts.c" --function "$a") ||
		{ echo "scripts.sh: no function $a in the library" >&2; exit 1; }
done
cat >"$work/naive.lua" <<'EOF'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local lim, win = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - win)
if redis.call('ZCARD', KEYS[1]) + 1 > lim then return 0 end
redis.call('ZADD', KEYS[1], now, now .. ':' .. math.random(1000000000))
redis.call('EXPIRE', KEYS[1], math.ceil(win / 1000000))
return 1
EOF
declare -A sha
for f in naive lua_log_attempt lua_fixed_window lua_sliding_counter lua_token_bucket; do
	sha[$f]=$(load "$work/$f.lua")
	[[ ${sha[$f]} =~ ^[0-9a-f]{40}$ ]] || { echo "scripts.sh: SCRIPT LOAD of $f failed: ${sha[$f]}" >&2; exit 1; }
done
loaded=$(rcli -x FUNCTION LOAD <"$work/library.lua" | tr -d '\r')
[[ $loaded == slidewin_* ]] || { echo "scripts.sh: FUNCTION LOAD of slidewin's library failed: $loaded" >&2; exit 1; }
# The naive script as a function too, to tell what FCALL alone saves it.
{ echo '#!lua name=naive'; echo 'redis.register_function("naive", function(KEYS, ARGV)'; cat "$work/naive.lua"; echo 'end)'; } >"$work/naive_lib.lua"
loaded=$(rcli -x FUNCTION LOAD <"$work/naive_lib.lua" | tr -d '\r')
[[ $loaded == naive ]] || { echo "scripts.sh: FUNCTION LOAD of the naive script failed: $loaded" >&2; exit 1; }
fn[naive]=naive

proc_cpu() { # Redis's user + system CPU so far, in clock ticks
	awk '{ print $14 + $15 }' "/proc/$pid/stat"
}
hz=$(getconf CLK_TCK)

# run SCRIPT ARGS...: redis-benchmark's EVALSHA of SCRIPT (a name of sha)
# with ARGS; frun: the same as FCALL of its function. Each prints
# "us_script us_process".
run() { run_cmd EVALSHA "${sha[$1]}" "${@:2}"; }
frun() { run_cmd FCALL "${fn[$1]}" "${@:2}"; }
run_cmd() {
	local c0 c1 out stats cmd
	cmd=$(tr '[:upper:]' '[:lower:]' <<<"$1")
	rcli CONFIG RESETSTAT >/dev/null
	c0=$(proc_cpu)
	out=$(redis-benchmark -h 127.0.0.1 -p "$port" -c 8 -n "$requests" -r 100000 -q "$@" 2>&1)
	c1=$(proc_cpu)
	stats=$(rcli INFO commandstats | tr -d '\r' | awk -F'[:,=]' -v want="cmdstat_$cmd" '$1 == want {
		for (i = 2; i < NF; i += 2) { if ($i == "calls") c = $(i + 1); if ($i == "usec") u = $(i + 1); if ($i == "failed_calls") f = $(i + 1) }
	} END { print c + 0, u + 0, f + 0 }')
	read -r calls usec failed <<<"$stats"
	if ((calls == 0 || failed > 0)); then
		echo "scripts.sh: $1 $2 failed ($calls calls, $failed failed): $out" >&2
		echo "- -"
		return
	fi
	awk -v u="$usec" -v n="$calls" -v t=$((c1 - c0)) -v hz="$hz" \
		'BEGIN { printf "%.2f %.2f\n", u / n, t * 1e6 / hz / n }'
}

# sample KEY FILE: the median of the entries KEY holds, read every 20 ms
# while a row runs (until redis-benchmark's connections are gone)
sample() {
	local v=() i
	sleep 0.05
	for ((i = 0; i < 200; i++)); do
		v+=("$(rcli ZCARD "$1" | tr -d '\r')")
		(($(rcli INFO clients | tr -d '\r' | sed -n 's/^connected_clients://p') > 1)) || break
		sleep 0.02
	done
	printf '%s\n' "${v[@]}" | sort -n | awk '{ a[NR] = $1 } END { print (NR ? a[int((NR + 1) / 2)] : 0) }' >"$2"
}

# warm SCRIPT ARGS...: run the row once untimed (as FCALL), so that a hot
# key reaches its steady state (as many entries expire per call as are added)
warm() {
	redis-benchmark -h 127.0.0.1 -p "$port" -c 8 -n "$requests" -r 100000 -q FCALL "${fn[$1]}" "${@:2}" >/dev/null 2>&1
}

big=1000000000000
win=3600000000
rows=()
# row LABEL SCRIPT NAIVE ARGS_SLIDEWIN -- ARGS_NAIVE: slidewin's function
# (FCALL, what slidewin sends), the naive script (EVALSHA, as written),
# slidewin's script by EVALSHA (functions off, or Redis 6.2) and the naive
# script as a function; with the reset of each key set run between them by
# prep (a command, or empty), so that each starts from the same state.
prep=
row() {
	local label=$1 script=$2 naive=$3 a=() b=() f n e nf x
	shift 3
	while (($#)) && [[ $1 != -- ]]; do a+=("$1"); shift; done
	shift
	b=("$@")
	[[ -z $prep ]] || eval "$prep"
	f=$(frun "$script" "${a[@]}")
	[[ -z $prep ]] || eval "$prep"
	n=$(run "$naive" "${b[@]}")
	[[ -z $prep ]] || eval "$prep"
	e=$(run "$script" "${a[@]}")
	[[ -z $prep ]] || eval "$prep"
	nf=$(frun "$naive" "${b[@]}")
	local fs fp ns np es nfs
	read -r fs fp <<<"$f"
	read -r ns np <<<"$n"
	read -r es _ <<<"$e"
	read -r nfs _ <<<"$nf"
	ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f ×", a / b; else print "-" }'; }
	rows+=("| $label | $fs | $ns | $(ratio "$fs" "$ns") | $es | $(ratio "$es" "$ns") | $nfs | $fp | $np |")
}

echo "Redis $(rcli INFO server | tr -d '\r' | sed -n 's/^redis_version://p'), $requests calls per row, 8 connections" >&2

prep='rcli FLUSHDB >/dev/null'
row 'many keys, admitted' lua_log_attempt naive \
	3 'log:__rand_int__' 'logr:__rand_int__' 'blk:__rand_int__' $big $win 1 -- 1 'naive:__rand_int__' $big $win
# Hot keys in their steady state: a window short enough that entries leave
# it as fast as calls add them, about 1,000 and 100,000 entries at this
# machine's rate (the label gives the entries each key held, sampled while
# slidewin's function ran, and the naive script's).
for w in 20000 2000000; do
	warm lua_log_attempt 3 "hot$w" "hot$w:r" "hot$w:b" $big $w 1
	redis-benchmark -h 127.0.0.1 -p "$port" -c 8 -n "$requests" -r 100000 -q EVALSHA "${sha[naive]}" 1 "naivehot$w" $big $w >/dev/null 2>&1
	sample "hot$w" "$work/e1" &
	f=$(frun lua_log_attempt 3 "hot$w" "hot$w:r" "hot$w:b" $big $w 1)
	wait
	sample "naivehot$w" "$work/e2" &
	n=$(run naive 1 "naivehot$w" $big $w)
	wait
	e=$(run lua_log_attempt 3 "hot$w" "hot$w:r" "hot$w:b" $big $w 1)
	nf=$(frun naive 1 "naivehot$w" $big $w)
	read -r fs fp <<<"$f"; read -r ns np <<<"$n"; read -r es _ <<<"$e"; read -r nfs _ <<<"$nf"
	r1=$(awk -v a="$fs" -v b="$ns" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f ×", a / b; else print "-" }')
	r2=$(awk -v a="$es" -v b="$ns" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f ×", a / b; else print "-" }')
	rows+=("| hot key, window $((w / 1000)) ms, admitted (about $(<"$work/e1") and $(<"$work/e2") entries) | $fs | $ns | $r1 | $es | $r2 | $nfs | $fp | $np |")
done
# A full key: lim 1,000, 1,000 entries in an hour's window; every call denied.
prep=
redis-benchmark -h 127.0.0.1 -p "$port" -c 1 -n 1000 -q FCALL "${fn[lua_log_attempt]}" 3 full full:r full:b 1000 $win 1 >/dev/null 2>&1
redis-benchmark -h 127.0.0.1 -p "$port" -c 1 -n 1000 -q EVALSHA "${sha[naive]}" 1 naivefull 1000 $win >/dev/null 2>&1
row 'denial (a full key, lim 1,000)' lua_log_attempt naive \
	3 full full:r full:b 1000 $win 1 -- 1 naivefull 1000 $win
prep='rcli FLUSHDB >/dev/null'
for a in fixed_window sliding_counter token_bucket; do
	row "$a, many keys" "lua_$a" naive \
		2 "$a:__rand_int__" "$a:b:__rand_int__" $big $win 1 -- 1 'naive2:__rand_int__' $big $win
done

echo "| row | slidewin's function (FCALL), µs per call (commandstats) | naive script (EVALSHA) | ratio | slidewin's script (EVALSHA) | ratio | naive script as a function (FCALL) | slidewin FCALL, Redis process CPU µs per call | naive, process |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"

# ---- instructions per call (--instructions) -----------------------------------
# The times above move by 10 % and more from run to run on a shared machine.
# With --instructions, each row runs again in a Redis of its own under
# valgrind's callgrind, counting the instructions executed inside FCALL or
# EVALSHA (the script and the commands it calls), which repeat from run to run to
# about 1 %: a change to a script shows its saving there. One connection;
# keys drawn from 2,500 (about two calls per key, as above); 2,500 calls
# to warm up, then 5,000 counted. The hot key's window is 1 s (valgrind is
# slow: the table says how many entries it held).
[[ -n $instructions ]] || exit 0
if ! command -v valgrind >/dev/null 2>&1 && ((EUID == 0)) && command -v apt-get >/dev/null 2>&1; then
	echo "scripts.sh: installing the valgrind package" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends valgrind >/dev/null ||
		{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends valgrind >/dev/null; }
fi
command -v valgrind >/dev/null 2>&1 || { echo "scripts.sh: --instructions needs valgrind (apt-get install valgrind)" >&2; exit 2; }
ir() { # ir CALL FILE ZCARD_KEY KEYS_AND_ARGS...: "instructions_per_call entries"
	# CALL: EVALSHA (FILE a script) or a function's name (FILE the library)
	local call=$1 f=$2 ck=$3 vport vdir vpid s calls total=0 x o card cmd tog stat
	shift 3
	if [[ $call == EVALSHA ]]; then tog=evalShaCommand stat=evalsha; else tog=fcallCommand stat=fcall; fi
	vport=$(free_port) || return 1
	vdir=$(mktemp -d "$work/cg.XXXXXX")
	valgrind --tool=callgrind --toggle-collect=$tog --callgrind-out-file="$vdir/out.%p" \
		"$SLIDEWIN_REDIS_SERVER" --port "$vport" --bind 127.0.0.1 --save '' --appendonly no >"$vdir/log" 2>&1 &
	vpid=$!
	for _ in $(seq 1 200); do "$SLIDEWIN_REDIS_CLI" -p "$vport" PING >/dev/null 2>&1 && break; sleep 0.1; done
	if [[ $call == EVALSHA ]]; then
		s=$("$SLIDEWIN_REDIS_CLI" -p "$vport" -x SCRIPT LOAD <"$f" | tr -d '\r')
		cmd=(EVALSHA "$s")
	else
		"$SLIDEWIN_REDIS_CLI" -p "$vport" -x FUNCTION LOAD <"$f" >/dev/null
		cmd=(FCALL "$call")
	fi
	redis-benchmark -h 127.0.0.1 -p "$vport" -c 1 -n 2500 -r 2500 -q "${cmd[@]}" "$@" >/dev/null 2>&1
	callgrind_control -z "$vpid" >/dev/null 2>&1
	"$SLIDEWIN_REDIS_CLI" -p "$vport" CONFIG RESETSTAT >/dev/null
	redis-benchmark -h 127.0.0.1 -p "$vport" -c 1 -n 5000 -r 2500 -q "${cmd[@]}" "$@" >/dev/null 2>&1
	calls=$("$SLIDEWIN_REDIS_CLI" -p "$vport" INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$stat:calls=\([0-9]*\),.*/\1/p")
	card=$("$SLIDEWIN_REDIS_CLI" -p "$vport" ZCARD "$ck" | tr -d '\r')
	"$SLIDEWIN_REDIS_CLI" -p "$vport" SHUTDOWN NOSAVE >/dev/null 2>&1
	wait "$vpid"
	for o in "$vdir"/out.*; do
		x=$(sed -n 's/^\(summary\|totals\): \([0-9]*\).*/\2/p' "$o" | head -n 1)
		total=$((total + ${x:-0}))
	done
	if [[ -z $calls ]] || ((calls == 0)); then echo "- -"; else echo "$((total / calls)) $card"; fi
}
irows=()
irow() { # irow LABEL "FCALL_IR ENTRIES" "NAIVE_IR ENTRIES" "EVALSHA_IR ENTRIES"
	local a b c
	read -r a _ <<<"$2"
	read -r b _ <<<"$3"
	read -r c _ <<<"$4"
	irows+=("| $1 | $(commas "$a") | $(commas "$b") | $(iratio "$a" "$b") | $(commas "$c") | $(iratio "$c" "$b") |")
}
iratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f ×", a / b; else print "-" }'; }
commas() { printf "%s" "$1" | sed -e :a -e 's/\([0-9]\)\([0-9]\{3\}\)\($\|,\)/\1,\2\3/; ta'; }
echo "instructions per call (callgrind), a Redis of its own per row..." >&2
lib=$work/library.lua
args=(3 'log:__rand_int__' 'logr:__rand_int__' 'blk:__rand_int__' $big $win 1)
irow 'many keys, admitted' \
	"$(ir "${fn[lua_log_attempt]}" "$lib" none "${args[@]}")" \
	"$(ir EVALSHA "$work/naive.lua" none 1 'naive:__rand_int__' $big $win)" \
	"$(ir EVALSHA "$work/lua_log_attempt.lua" none "${args[@]}")"
args=(3 hot hot:r hot:b $big 1000000 1)
hs=$(ir "${fn[lua_log_attempt]}" "$lib" hot "${args[@]}")
hn=$(ir EVALSHA "$work/naive.lua" naivehot 1 naivehot $big 1000000)
he=$(ir EVALSHA "$work/lua_log_attempt.lua" hot "${args[@]}")
irow "hot key, window 1 s, admitted (about ${hs#* } and ${hn#* } entries)" "$hs" "$hn" "$he"
args=(3 full full:r full:b 1000 $win 1)
irow 'denial (a full key, lim 1,000)' \
	"$(ir "${fn[lua_log_attempt]}" "$lib" none "${args[@]}")" \
	"$(ir EVALSHA "$work/naive.lua" none 1 naivefull 1000 $win)" \
	"$(ir EVALSHA "$work/lua_log_attempt.lua" none "${args[@]}")"
ir_naive=$(ir EVALSHA "$work/naive.lua" none 1 'naive:__rand_int__' $big $win)
for a in fixed_window sliding_counter token_bucket; do
	args=(2 "$a:__rand_int__" "$a:b:__rand_int__" $big $win 1)
	irow "$a, many keys" "$(ir "${fn[lua_$a]}" "$lib" none "${args[@]}")" "$ir_naive" \
		"$(ir EVALSHA "$work/lua_$a.lua" none "${args[@]}")"
done
echo
echo "| row | slidewin's function (FCALL), instructions per call (callgrind) | naive script (EVALSHA) | ratio | slidewin's script (EVALSHA) | ratio |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${irows[@]}"
