#!/usr/bin/env bash
# The concurrency-slots scene of `make demo`: at most 3 exports per tenant at
# once (rl_acquire), taken from several sessions on two PostgreSQL servers
# that share the demo's Redis. Three exports hold a slot, a fourth waits for
# one and a fifth is denied; each slot comes back when its transaction
# commits. Then a holder's backend is killed with kill -9, so no COMMIT or
# ROLLBACK ever releases its slot, and rl_holders, polled every 0.25 s,
# shows the slot coming back when its 2 s lease ends, not before.
#
# The killed holder runs on a second throwaway server, not on the demo's:
# when a backend dies of kill -9, its postmaster ends every other backend and
# reinitialises shared memory (restart_after_crash), which would reset the
# counters that the statistics scene shows last and cut any session still
# open there. pg_terminate_backend would not do instead: it ends the
# transaction cleanly, and the slot would be released at once.
#
# Usage (from demo.sh): demo_slots.sh WORKDIR PGPORT REDISPORT. Everything it
# starts lives under WORKDIR; it stops its own server, and demo.sh's cleanup
# stops whatever is left.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
work=$1
a_port=$2
redis_port=$3

b_port=$(free_port)
start_pg "$b_port" "$work/slots-pg" "$redis_port" >/dev/null
trap 'stop_pg "$work/slots-pg" >/dev/null 2>&1 || true' EXIT
mkdir -p "$work/slots"

port_of() { if [[ $1 == A ]]; then echo "$a_port"; else echo "$b_port"; fi; }
sql() { # sql SERVER ARGS...
	"$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(port_of "$1")" \
		-U postgres -d postgres "${@:2}"
}
sql B -c "SET client_min_messages = warning" -c "CREATE EXTENSION IF NOT EXISTS slidewin"
holders() { sql A -c "SELECT rl_holders('export:acme')"; }

# export_job N SERVER HOLD TIMEOUT: one export's transaction. It prints one
# line per event, "EPOCH N SERVER EVENT [HOLDERS ASKED_AT]": acquired (or
# denied), then commits, just before the COMMIT that releases the slot.
export_job() {
	sql "$2" -F ' ' <<-EOF
		BEGIN;
		SELECT extract(epoch FROM clock_timestamp()) AS asked \gset
		SELECT acquired, holders, extract(epoch FROM clock_timestamp()) AS t
		  FROM rl_acquire('export:acme', 3, lease => '2 seconds', timeout => '$4') \gset
		\if :acquired
		\echo :t $1 $2 acquired :holders :asked
		SELECT pg_sleep($3) \gset
		SELECT extract(epoch FROM clock_timestamp()) AS t \gset
		\echo :t $1 $2 commits
		\else
		\echo :t $1 $2 denied :holders :asked
		\endif
		COMMIT;
	EOF
}

echo
echo "== 14. Concurrency slots: at most 3 exports at once per tenant, on every server"
echo "Server A is the demo's PostgreSQL (port $a_port); server B (port $b_port) is a second one"
echo "sharing its Redis. Each export runs in a session of its own:"
echo "   BEGIN; SELECT * FROM rl_acquire('export:acme', 3, lease => '2 seconds', timeout => ...);"
echo "   ... the export ...; COMMIT;   -- the slot is released at COMMIT (or ROLLBACK)"
t0=$(date +%s.%N)
jobs=()
export_job 1 A 1.0 0 >"$work/slots/1" &
jobs+=($!)
export_job 2 B 1.3 0 >"$work/slots/2" &
jobs+=($!)
export_job 3 A 1.6 0 >"$work/slots/3" &
jobs+=($!)
for _ in $(seq 100); do
	[[ $(holders) == 3 ]] && break
	sleep 0.05
done
# Export 4 waits up to 3 s for a slot; export 5, a moment later, does not wait.
export_job 4 B 0.3 '3 seconds' >"$work/slots/4" &
jobs+=($!)
sleep 0.1
export_job 5 A 0.3 0 >"$work/slots/5" &
jobs+=($!)
for j in "${jobs[@]}"; do wait "$j"; done
# A call that waited gets a line of its own when it started waiting.
awk '$4 == "acquired" && $1 - $6 >= 0.05 { print $6, $2, $3, "waits" } { print }' "$work/slots/"[1-5] |
	sort -g | awk -v t0="$t0" '
	{ at = sprintf("   +%4.2f s  export %s (server %s)", $1 - t0, $2, $3) }
	$4 == "acquired" && $1 - $6 < 0.05 { printf "%s  acquired a slot (holders: %d)\n", at, $5 }
	$4 == "waits" { printf "%s  finds all 3 slots taken and waits (timeout 3 s)\n", at }
	$4 == "acquired" && $1 - $6 >= 0.05 { printf "%s  acquired a slot after waiting %.2f s (holders: %d)\n", at, $1 - $6, $5 }
	$4 == "denied" { printf "%s  denied at once (timeout 0; holders: %d)\n", at, $5 }
	$4 == "commits" { printf "%s  commits: its slot is released\n", at }'
echo "   holders now: $(holders)"

echo "A holder dies: export 6 on server B acquires with lease => '2 seconds', then its backend is"
echo "killed with kill -9, so no COMMIT or ROLLBACK releases its slot. rl_holders('export:acme')"
echo "on server A, every 0.25 s after the acquisition:"
sql B -F ' ' >"$work/slots/6" 2>&1 <<-'EOF' &
	BEGIN;
	SELECT acquired, holders, extract(epoch FROM clock_timestamp()) AS t, pg_backend_pid() AS pid
	  FROM rl_acquire('export:acme', 3, lease => '2 seconds') \gset
	\echo :t :pid :acquired :holders
	SELECT pg_sleep(60);
	COMMIT;
EOF
doomed=$!
for _ in $(seq 100); do
	[[ -s $work/slots/6 ]] && break
	sleep 0.05
done
read -r t_acq pid acquired _ <"$work/slots/6" || true
if [[ ${acquired:-} != t ]]; then
	echo "demo_slots.sh: export 6 did not acquire a slot: $(cat "$work/slots/6")" >&2
	exit 1
fi
# wait_until OFFSET: sleep until OFFSET seconds after the acquisition.
wait_until() {
	local s
	s=$(awk -v a="$t_acq" -v o="$1" -v now="$(date +%s.%N)" 'BEGIN { s = a + o - now; print (s > 0 ? s : 0) }')
	sleep "$s"
}
wait_until 0.5
kill -9 "$pid"
echo "   +$(awk -v a="$t_acq" -v now="$(date +%s.%N)" 'BEGIN { printf "%.2f", now - a }') s  --- kill -9 of export 6's backend (pid $pid) ---"
wait "$doomed" 2>/dev/null || true
freed=
for k in $(seq 3 16); do
	wait_until "$(awk -v k="$k" 'BEGIN { print k * 0.25 }')"
	read -r t n < <(sql A -F ' ' -c "SELECT extract(epoch FROM clock_timestamp()), rl_holders('export:acme')")
	at=$(awk -v t="$t" -v a="$t_acq" 'BEGIN { printf "%.2f", t - a }')
	if ((n > 0)); then
		echo "   +$at s  holders $n"
	else
		echo "   +$at s  holders $n: the lease has ended, and with it the dead holder's slot"
		freed=$at
		break
	fi
done
if [[ -z $freed ]]; then
	echo "demo_slots.sh: the slot of the killed holder did not come back within 4 s" >&2
	exit 1
fi
read -r got n < <(sql A -F ' ' -c "SELECT acquired, holders FROM rl_acquire('export:acme', 3)")
if [[ $got != t ]]; then
	echo "demo_slots.sh: export 7 found no free slot (holders: $n)" >&2
	exit 1
fi
echo "   export 7 (server A) acquires a slot at once (holders: $n)"
echo "A slot stays taken at most its lease after its holder died; a live holder keeps it until"
echo "its transaction ends or its lease runs out, and rl_renew extends a lease that the work would outlast."
