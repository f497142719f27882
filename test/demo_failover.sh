#!/usr/bin/env bash
# The failover scene of `make demo`: a master, a replica and three sentinels
# on loopback; slidewin reaches the master through the sentinels; the master
# is killed (kill -9) while calls go on, and each call says which store
# answered: Redis, then the fallback store while no master is reachable,
# then Redis again on the promoted replica.
#
# Usage (from demo.sh): demo_failover.sh WORKDIR PGPORT. Everything it
# starts lives under WORKDIR, and demo.sh's cleanup stops it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
work=$1
pg_port=$2

master_port=$(free_port)
start_redis "$master_port" "$work/fo-master" >/dev/null
replica_port=$(free_port)
start_redis "$replica_port" "$work/fo-replica" --replicaof 127.0.0.1 "$master_port" >/dev/null

sentinels=()
for i in 1 2 3; do
	p=$(free_port)
	d=$work/fo-sentinel$i
	mkdir -p "$d"
	cat >"$d/sentinel.conf" <<-EOF
		port $p
		bind 127.0.0.1
		daemonize yes
		pidfile $d/redis.pid
		logfile $d/sentinel.log
		dir $d
		sentinel monitor demo 127.0.0.1 $master_port 2
		sentinel down-after-milliseconds demo 1000
		sentinel failover-timeout demo 10000
	EOF
	"$SLIDEWIN_REDIS_SERVER" "$d/sentinel.conf" --sentinel
	sentinels+=("127.0.0.1:$p")
done
s1=${sentinels[0]##*:}

sentinel_master() {
	"$SLIDEWIN_REDIS_CLI" -p "$s1" sentinel get-master-addr-by-name demo 2>/dev/null | tail -n 1
}
# wait until the sentinels know the replica and each other
for _ in $(seq 100); do
	info=$("$SLIDEWIN_REDIS_CLI" -p "$s1" sentinel master demo 2>/dev/null | tr '\n' ' ')
	[[ $info == *"num-slaves 1 "* && $info == *"num-other-sentinels 2 "* ]] && break
	sleep 0.2
done

url="redis-sentinel://$(
	IFS=,
	echo "${sentinels[*]}"
)/demo"
echo
echo "== 11. Sentinel failover: a master, a replica and three sentinels"
echo "slidewin.redis_url = '$url'"
echo "The master (port $master_port) is killed after the 4th call; a call every 0.3 s says who answered:"

t0=$(date +%s.%N)
for i in $(seq 1 24); do
	if ((i == 5)); then
		kill -9 "$(cat "$work/fo-master/redis.pid")"
		echo "   --- kill -9 of the master ---"
	fi
	store=$(PGOPTIONS="-c slidewin.redis_url=$url -c slidewin.connect_timeout=200" \
		"$PG_BINDIR/psql" -X -At -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres \
		-c "SELECT (r).store FROM rl_attempt('failover-demo', 1000000, '1 hour') r" 2>&1 || true)
	printf '   +%4.1f s  call %2d answered by %-8s (sentinels name port %s)\n' \
		"$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')" "$i" "$store" "$(sentinel_master)"
	sleep 0.3
done
echo "The replica (port $replica_port) was promoted; calls went to the fallback store only while"
echo "no master could be reached, and never failed."
