#!/usr/bin/env bash
# The local batches scene of `make demo`: one hot key, a budget shared by
# every caller (an upstream API's capacity), called 2,000 times by one
# session with slidewin.local_batch off and on; Redis's own count of the
# scripts it ran says how many calls reached it. Then a limit that binds:
# batches never admit more than it. Then the unused units of a batch going
# back to Redis once the batch ends. Then the same while Redis cannot
# answer, from the fallback store, whose batches' rest goes back with the
# key's next call (1.18).
#
# Usage (from demo.sh): demo_batch.sh WORKDIR PGPORT REDISPORT, against the
# demo's server, which preloads slidewin (batches need its shared memory and
# its background worker).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
pg_port=$2
redis_port=$3

sql() { "$PG_BINDIR/psql" -X -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres "$@"; }
# scripts Redis has run so far (FCALL and EVALSHA)
redis_calls() {
	"$SLIDEWIN_REDIS_CLI" -h 127.0.0.1 -p "$redis_port" INFO commandstats | tr -d '\r' |
		awk -F'[:,=]' '$1 ~ /^cmdstat_(fcall|evalsha)$/ {
			for (i = 2; i < NF; i += 2) if ($i == "calls") n += $(i + 1) } END { print n + 0 }'
}
# run 2,000 calls of key K with limit L per minute, local_batch B: "admitted redis_calls"
run() {
	local k=$1 l=$2 b=$3 before admitted
	before=$(redis_calls)
	admitted=$(sql -c "SET slidewin.local_batch = $b; SET slidewin.local_batch_time = '50ms';
		SELECT count(*) FILTER (WHERE (r).allowed)
		  FROM generate_series(1, 2000) g, rl_attempt('$k', $l, '1 minute', 1 + 0 * g) r" | tail -n 1)
	echo "$admitted $(($(redis_calls) - before))"
}
peek() { sql -c "SELECT (r).remaining FROM rl_peek('$1', 1000000, '1 minute') r"; }

echo
echo "== 16. One hot key: exact local batches (slidewin.local_batch)"
echo "2,000 calls on one key whose limit never binds (a million a minute):"
read -r a n < <(run upstream:off 1000000 0)
echo "   local_batch = 0 (the default): $a admitted, $n calls reached Redis"
read -r a n < <(run upstream:on 1000000 100)
echo "   local_batch = 100:             $a admitted, $n calls reached Redis"
echo "Each batch is one entry of the key's log, scored at the end of its 50 ms, the latest moment"
echo "any of its units can be used: every window that could hold one of them counts all of them."
read -r a n < <(run upstream:tight 300 100)
echo "A limit that binds (300 a minute), 2,000 calls with local_batch = 100: $a admitted, never more"
echo "(fewer when a batch ends with units unused: they count until they are given back)."
sql -c "SET slidewin.local_batch = 100; SET slidewin.local_batch_time = '1s';
	SELECT count(*) FROM generate_series(1, 3) g, rl_attempt('upstream:back', 1000000, '1 minute', 1 + 0 * g) r
	 WHERE (r).allowed" >/dev/null
during=$(peek upstream:back)
sleep 1.3
after=$(peek upstream:back)
echo "Three calls in a row: a key warms up before it batches, so the first two go to Redis alone, and"
echo "the third, seeing the key called often, takes a batch of up to 100 that lives 1 s and uses 1 unit."
echo "The rest counts as used while the batch lives, and goes back to Redis when it ends (a background"
echo "worker gives it back; a key called once never takes a batch):"
echo "   at once: $during left of 1000000; 1.3 s later: $after left"

# The same hot key while Redis cannot answer (1.17): this session points at
# a port where nothing listens, so every call falls back, and a batch is one
# row of the fallback log instead of one entry in Redis.
fb() {
	local k=$1 b=$2
	sql -c "SET slidewin.redis_url = 'redis://127.0.0.1:1'; SET slidewin.on_redis_error = 'fallback';
		SET slidewin.local_batch = $b; SET slidewin.local_batch_time = '50ms';
		SELECT count(*) FILTER (WHERE (r).allowed)
		  FROM generate_series(1, 2000) g, rl_attempt('$k', 1000000, '1 minute', 1 + 0 * g) r;
		SELECT count(*) || ' ' || coalesce(sum(cost), 0) FROM rl_fallback_log
		 WHERE key = current_setting('slidewin.key_prefix') || '$k'" | tail -n 2 | paste -sd ' '
}
echo "The same 2,000 calls while Redis cannot answer (policy fallback): a batch is reserved from the"
echo "fallback store instead, as one row of its log scored at the batch's end, and the database's"
echo "backends take its units from shared memory once the reserving transaction commits:"
read -r a rows units < <(fb fallback:off 0)
echo "   local_batch = 0:   $a admitted, $rows rows written ($units units)"
read -r a rows units < <(fb fallback:on 100)
echo "   local_batch = 100: $a admitted, $rows rows written ($units units: what the last batch did not use is still counted)"
# 1.18: the key's next call after that batch's end (50 ms) gives its rest
# back, if it comes within 4 times that of the end
sleep 0.1
read -r rows2 units2 < <(sql -c "SET slidewin.redis_url = 'redis://127.0.0.1:1'; SET slidewin.on_redis_error = 'fallback';
	SET slidewin.local_batch = 100; SET slidewin.local_batch_time = '50ms';
	SELECT rl_allow('fallback:on', 1000000, '1 minute');
	SELECT count(*) || ' ' || coalesce(sum(cost), 0) FROM rl_fallback_log
	 WHERE key = current_setting('slidewin.key_prefix') || 'fallback:on'" | tail -n 1)
back=$((units + 1 - units2))
if ((back > 0)); then
	echo "   0.1 s later, the key's next call, after the last batch ended, gave back the $back units it did not"
	echo "   use (1.18): $rows2 rows, $units2 units, for the $((a + 1)) admitted"
else
	echo "   0.1 s later, the key's next call gave nothing back ($rows2 rows, $units2 units): it came after"
	echo "   4 times local_batch_time of the last batch's end, or that batch was used up"
fi
