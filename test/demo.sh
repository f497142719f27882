#!/usr/bin/env bash
# `make demo`: start a throwaway Redis and PostgreSQL on loopback, run the
# scenario in demo.sql, the boundary experiment in demo_boundary.sql (and its
# chart, test/bench/charts/boundary.svg, drawn by test/bench/charts.sh), what
# Redis ran for them (slidewin's library of functions), and the
# Sentinel failover scene of demo_failover.sh, the Redis Cluster scene
# of demo_cluster.sh, the HTTP scene of demo_fastapi.sh (examples/fastapi), the
# concurrency slots of demo_slots.sh, the statistics of demo_stats.sql and
# the local batches of demo_batch.sh against them, and stop everything again.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

work=$(mktemp -d)
chmod 755 "$work"
cleanup() {
    stop_pg "$work/pg" >/dev/null 2>&1 || true
    stop_redis "$work/redis" >/dev/null 2>&1 || true
    reap_under "$work" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

redis_port=$(free_port)
mkdir -p "$work/redis"
start_redis "$redis_port" "$work/redis" >/dev/null
pg_port=$(free_port)
start_pg "$pg_port" "$work/pg" "$redis_port" >/dev/null

echo "slidewin demo: PostgreSQL on 127.0.0.1:$pg_port, Redis on 127.0.0.1:$redis_port"
"$PG_BINDIR/psql" -X -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -f "$here/demo.sql"
# The outage of scene 8, as the server logged it: one WARNING when the first
# call failed over, one LOG line when Redis answered again.
echo
echo "== The outage of scene 8 in the server log: one line when it began, one when it ended"
grep -E 'slidewin (still )?cannot reach Redis|slidewin reaches Redis at' -A1 "$work/pg/postgres.log" |
	sed -E 's/^[0-9-]+ [0-9:.]+ [A-Z]+ \[[0-9]+\] //; s/^/   /' | grep -v '^   --$' || true
"$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -f "$here/demo_boundary.sql"
# The same experiment on the test clock, call by call, drawn with gnuplot.
chart_dir=${SLIDEWIN_DEMO_CHARTS:-$here/bench/charts}
mkdir -p "$chart_dir"
"$PG_BINDIR/psql" -X -q -At -F $'\t' -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres \
	-f "$here/bench/boundary.sql" >"$work/boundary.tsv"
bash "$here/bench/charts.sh" boundary "$work/boundary.tsv" "$chart_dir/boundary.svg"
echo "The same experiment on the test clock (a call every 10 ms from 9 s to 11 s), call by call:"
awk -F '\t' '{ last[$1] = $3 } END { for (a in last) printf "   %-16s %3d admitted\n", a, last[a] }' "$work/boundary.tsv" | sort -k2,2nr
echo "drawn in $chart_dir/boundary.svg (set SLIDEWIN_DEMO_CHARTS to draw it elsewhere)"
# What Redis ran for all of the above: slidewin's library of functions.
echo
echo "== What Redis ran: the calls that decide went to slidewin's library of functions (FCALL),"
echo "   loaded once with FUNCTION LOAD; refunds, blocks and slots are scripts (EVALSHA)"
"$SLIDEWIN_REDIS_CLI" -p "$redis_port" FUNCTION LIST | awk 'prev == "library_name" { print "   library " $0 } { prev = $0 }'
"$SLIDEWIN_REDIS_CLI" -p "$redis_port" INFO commandstats | tr -d '\r' |
	awk -F'[:,=]' '$1 ~ /^cmdstat_(fcall|evalsha|eval|function\|load)$/ {
		for (i = 2; i < NF; i += 2) { if ($i == "calls") c = $(i + 1); if ($i == "usec_per_call") u = $(i + 1) }
		printf "   %-14s %6d calls, %6.2f us of Redis each\n", substr($1, 9), c, u }'
bash "$here/demo_failover.sh" "$work" "$pg_port"
bash "$here/demo_cluster.sh" "$work" "$pg_port"
bash "$here/demo_fastapi.sh" "$work" "$pg_port"
bash "$here/demo_slots.sh" "$work" "$pg_port" "$redis_port"
"$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -f "$here/demo_stats.sql"
bash "$here/demo_batch.sh" "$work" "$pg_port" "$redis_port"
