#!/usr/bin/env bash
# The cluster scene of `make demo`: a Redis Cluster of three masters on
# loopback; tenants land on different masters; then the slot of one tenant is
# moved to another master (CLUSTER SETSLOT, MIGRATE) while a session keeps
# calling, and every call is still answered by Redis.
#
# Usage (from demo.sh): demo_cluster.sh WORKDIR PGPORT. Everything it starts
# lives under WORKDIR, and demo.sh's cleanup stops it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
work=$1
pg_port=$2

mkdir -p "$work/cl"
cluster_ports=$(start_redis_cluster "$work/cl" 3) || {
	echo "demo_cluster.sh: could not start a Redis Cluster" >&2
	exit 1
}
read -r -a ports <<<"$cluster_ports"
cli() { "$SLIDEWIN_REDIS_CLI" -h 127.0.0.1 "$@"; }

url="redis-cluster://127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}"
sql() {
	PGOPTIONS="-c slidewin.redis_url=$url" "$PG_BINDIR/psql" -X -At -h 127.0.0.1 -p "$pg_port" \
		-U postgres -d postgres "$@"
}
# which master holds a tenant's sliding log
holder() {
	local p
	for p in "${ports[@]}"; do
		if [[ -n $(cli -p "$p" --scan --pattern "slidewin:{*}log:$1") ]]; then
			echo "$p"
			return
		fi
	done
	echo none
}

echo
echo "== 12. Redis Cluster: three masters (ports ${ports[*]})"
echo "slidewin.redis_url = '$url'"
sql -c "SELECT count(*) FILTER (WHERE (r).allowed) FROM generate_series(1, 6) g, rl_attempt('tenant:' || g, 100, '1 hour') r" >/dev/null
for t in 1 2 3 4 5 6; do
	k=$(cli -p "$(holder "tenant:$t")" --scan --pattern "slidewin:{*}log:tenant:$t")
	echo "   tenant:$t  -> master on port $(holder "tenant:$t")  (Redis key $k, slot $(cli -p "${ports[0]}" cluster keyslot "$k"))"
done

key=$(cli -p "$(holder tenant:1)" --scan --pattern "slidewin:{*}log:tenant:1")
src=$(holder tenant:1)
for p in "${ports[@]}"; do [[ $p != "$src" ]] && dst=$p && break; done
slot=$(cli -p "$src" cluster keyslot "$key")
sid=$(cli -p "$src" cluster myid)
did=$(cli -p "$dst" cluster myid)
echo "The slot of tenant:1 ($slot) moves from port $src to port $dst while one session calls every 0.1 s:"
sql -c "SELECT g, (r).store, (r).remaining FROM generate_series(1, 30) g,
	LATERAL (SELECT pg_sleep(0.1 + 0 * g)) s,
	LATERAL rl_attempt('tenant:1' || left(g::text, 0), 100, '1 hour') r" >"$work/cluster-calls.out" &
calls=$!
sleep 0.8
cli -p "$dst" cluster setslot "$slot" importing "$sid" >/dev/null
cli -p "$src" cluster setslot "$slot" migrating "$did" >/dev/null
echo "   --- slot $slot: migrating (calls on tenant:1 still go to port $src) ---"
sleep 0.8
mapfile -t keys < <(cli -p "$src" cluster getkeysinslot "$slot" 100)
cli -p "$src" migrate 127.0.0.1 "$dst" "" 0 5000 keys "${keys[@]}" >/dev/null
echo "   --- MIGRATE of ${#keys[@]} keys: calls are sent on with ASK ---"
sleep 0.8
for p in "$dst" "${ports[@]}"; do cli -p "$p" cluster setslot "$slot" node "$did" >/dev/null; done
echo "   --- slot $slot now belongs to port $dst: calls meet MOVED once, then go there ---"
wait "$calls"
awk -F'|' '{ n[$2]++; last = $3 } END { for (s in n) printf "   %d calls answered by %s; remaining after the last: %s\n", n[s], s, last }' "$work/cluster-calls.out"
echo "   tenant:1 is now on port $(holder tenant:1): 1 + 30 units spent of 100, none lost or doubled by the move."
echo "Several keys in different slots, all or nothing (here fixed_window, 3 per hour each): each slot's"
echo "keys are reserved on their master, then confirmed, or cancelled if any key has no room."
sql -c "SELECT rl_attempt('quota:c', 3, '1 hour', 3, algorithm => 'fixed_window')" >/dev/null
# rl_attempt_all over the keys named, 3 an hour each
all() {
	sql -F ' ' -c "SELECT (r).allowed, (r).remaining
		FROM (SELECT ARRAY[$1] AS k) a,
		     rl_attempt_all(a.k, array_fill(3::bigint, ARRAY[cardinality(a.k)]),
		                    array_fill('1 hour'::interval, ARRAY[cardinality(a.k)]),
		                    algorithm => 'fixed_window') r"
}
peeks() {
	sql -At -c "SELECT string_agg(k || ' ' || (rl_peek(k, 3, '1 hour', algorithm => 'fixed_window')).remaining, ', ')
		FROM unnest(ARRAY['quota:a', 'quota:b', 'quota:c']) k"
}
read -r ok rem < <(all "'quota:a', 'quota:b'")
echo "   quota:a and quota:b: allowed $ok; left: $(peeks)"
read -r ok rem < <(all "'quota:a', 'quota:b', 'quota:c'")
echo "   quota:a, quota:b and quota:c (c is full): allowed $ok; left: $(peeks): nothing charged"
echo "   where the three counters live:"
for k in quota:a quota:b quota:c; do
	for p in "${ports[@]}"; do
		if [[ -n $(cli -p "$p" --scan --pattern "*$k") ]]; then
			echo "     $k on the master on port $p"
		fi
	done
done
# scripts a master has run so far (FCALL and EVALSHA)
master_calls() {
	cli -p "$1" INFO commandstats | tr -d '\r' |
		awk -F'[:,=]' '$1 ~ /^cmdstat_(fcall|evalsha)$/ {
			for (i = 2; i < NF; i += 2) if ($i == "calls") n += $(i + 1) } END { print n + 0 }'
}
sql -c "SELECT rl_attempt('budget:c', 1000000, '1 minute')" >/dev/null
hp=$(holder budget:c)
before=$(master_calls "$hp")
admitted=$(sql -c "SET slidewin.local_batch = 100; SET slidewin.local_batch_time = '50ms';
	SELECT count(*) FILTER (WHERE (r).allowed)
	  FROM generate_series(1, 2000) g, rl_attempt('budget:c', 1000000, '1 minute', 1 + 0 * g) r" | tail -n 1)
echo "Local batches (scene 16) under Cluster: 2,000 calls of one hot key with local_batch = 100:"
echo "   $admitted admitted, $(($(master_calls "$hp") - before)) scripts run on its master (port $hp), which holds the batches' entries."
