# shellcheck shell=bash disable=SC2034
# Shell helpers for slidewin's test, demo and benchmark scripts.  Source it:
#
#   . "$(dirname "$0")/lib.sh"
#
# It starts and stops throwaway servers on loopback: a Redis and a PostgreSQL
# cluster, each living entirely in a directory the caller chooses (normally
# under `mktemp -d`).  It never touches a system Redis or a system cluster.
# Callers must stop what they start; trap EXIT INT TERM and call stop_pg,
# stop_redis (and reap_under for anything a child may have left behind).
#
# The Redis server is redis-server, or whatever $SLIDEWIN_REDIS_SERVER names
# (valkey-server), with its client $SLIDEWIN_REDIS_CLI (default: the server's
# name with -server replaced by -cli).
#
# Sourcing changes no shell options and starts nothing.  It sets:
#   PG_CONFIG             pg_config to use (respected if already set)
#   PG_BINDIR             the server's bin directory (initdb, pg_ctl, psql)
#   PG_REGRESS            pg_regress from PGXS
#   PG_ISOLATION_REGRESS  pg_isolation_regress from PGXS
#   PG_TAP_PERL           directory holding PostgreSQL::Test::Cluster
#   SLIDEWIN_PG_USER      OS user that owns clusters: `postgres` when run as
#                         root (PostgreSQL refuses to run as root), else
#                         the current user

PG_CONFIG=${PG_CONFIG:-pg_config}

PG_BINDIR=$("$PG_CONFIG" --bindir 2>/dev/null) || PG_BINDIR=
_slidewin_pgxs=$("$PG_CONFIG" --pgxs 2>/dev/null) || _slidewin_pgxs=
if [[ -n $_slidewin_pgxs ]]; then
	# pgxs is <pgxs root>/src/makefiles/pgxs.mk
	_slidewin_pgxs=${_slidewin_pgxs%/src/makefiles/pgxs.mk}
	PG_REGRESS=$_slidewin_pgxs/src/test/regress/pg_regress
	PG_ISOLATION_REGRESS=$_slidewin_pgxs/src/test/isolation/pg_isolation_regress
	PG_TAP_PERL=$_slidewin_pgxs/src/test/perl
else
	PG_REGRESS='' PG_ISOLATION_REGRESS='' PG_TAP_PERL=''
fi
unset _slidewin_pgxs

SLIDEWIN_REDIS_SERVER=${SLIDEWIN_REDIS_SERVER:-redis-server}
SLIDEWIN_REDIS_CLI=${SLIDEWIN_REDIS_CLI:-${SLIDEWIN_REDIS_SERVER%-server}-cli}
export SLIDEWIN_REDIS_SERVER SLIDEWIN_REDIS_CLI

if ((EUID == 0)); then
	SLIDEWIN_PG_USER=postgres
else
	SLIDEWIN_PG_USER=$(id -un)
fi

# as_pg_user CMD...: run CMD as SLIDEWIN_PG_USER.  Paths must be absolute:
# the command starts in /, since the caller's directory may be closed to
# that user.
as_pg_user() {
	if ((EUID == 0)); then
		(cd / && runuser -u "$SLIDEWIN_PG_USER" -- "$@")
	else
		"$@"
	fi
}

# pg_user_prefix: the argv prefix that as_pg_user would use, for when the
# command has to be a real argv (timeout, env ...) rather than a function.
pg_user_prefix() {
	if ((EUID == 0)); then
		printf '%s\n' runuser -u "$SLIDEWIN_PG_USER" --
	fi
}

_port_in_use() {
	# Something answers on 127.0.0.1:port?
	if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
		return 0
	fi
	# Any TCP socket bound to it on any address (when ss is installed)?
	if command -v ss >/dev/null 2>&1 &&
		ss -Htan 2>/dev/null | awk -v p=":$1" '$4 ~ p"$" { found = 1 } END { exit !found }'; then
		return 0
	fi
	return 1
}

# port_range: print "LO HI", the ports free_port draws from: 20000-60000,
# or SLIDEWIN_PORT_RANGE=LO-HI when set (so that runs side by side, or a
# machine with a firewall or other services, can each keep to their own
# ports).  Fails with a message on a malformed range.
port_range() {
	local r=${SLIDEWIN_PORT_RANGE:-20000-60000}
	if [[ $r =~ ^([0-9]{1,5})-([0-9]{1,5})$ ]] &&
		((BASH_REMATCH[1] >= 1024 && BASH_REMATCH[1] <= BASH_REMATCH[2] && BASH_REMATCH[2] <= 65535)); then
		echo "${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
		return 0
	fi
	echo "SLIDEWIN_PORT_RANGE=$r: expected LO-HI with 1024 <= LO <= HI <= 65535" >&2
	return 1
}

# free_port: print a TCP port in port_range that nothing uses on loopback.
# The port is not reserved: start the server on it before asking for the
# next one, or the same port may come back.
free_port() {
	local i p lo hi
	read -r lo hi < <(port_range) || return 1
	[[ -n $hi ]] || return 1
	for ((i = 0; i < 200; i++)); do
		p=$(((RANDOM * 32768 + RANDOM) % (hi - lo + 1) + lo))
		if ! _port_in_use "$p"; then
			echo "$p"
			return 0
		fi
	done
	echo "free_port: no free port in $lo-$hi found after 200 tries" >&2
	return 1
}

# free_cluster_port: a free port for a Redis Cluster node, whose cluster bus
# listens 10000 above it: at most 55535, with the bus port free too.
free_cluster_port() {
	local i p
	for ((i = 0; i < 200; i++)); do
		p=$(free_port) || return 1
		if ((p <= 55535)) && ! _port_in_use $((p + 10000)); then
			echo "$p"
			return 0
		fi
	done
	echo "free_cluster_port: no port for a cluster node found after 200 tries" >&2
	return 1
}

# start_redis_cluster DIR N: N cluster-enabled servers in DIR/node1..N,
# joined into a cluster of N masters without replicas; prints their ports on
# one line once every node says cluster_state:ok. Status 1 if any step fails.
start_redis_cluster() {
	local dir=$1 n=$2 i p ok ports=()
	for ((i = 1; i <= n; i++)); do
		p=$(free_cluster_port) && start_redis "$p" "$dir/node$i" --cluster-enabled yes \
			--cluster-config-file nodes.conf --cluster-node-timeout 5000 >/dev/null || return 1
		ports+=("$p")
	done
	"$SLIDEWIN_REDIS_CLI" --cluster create "${ports[@]/#/127.0.0.1:}" --cluster-replicas 0 \
		--cluster-yes >"$dir/create.log" 2>&1 || return 1
	for _ in $(seq 150); do
		ok=0
		for p in "${ports[@]}"; do
			"$SLIDEWIN_REDIS_CLI" -p "$p" cluster info 2>/dev/null | grep -q cluster_state:ok && ok=$((ok + 1))
		done
		if ((ok == n)); then
			echo "${ports[*]}"
			return 0
		fi
		sleep 0.2
	done
	return 1
}

# Redis 7 refuses DEBUG unless enable-debug-command is set; older servers
# do not know the option and refuse to start with it.
_redis_debug_args() {
	local v
	v=$("$SLIDEWIN_REDIS_SERVER" --version 2>/dev/null | sed -n 's/.* v=\([0-9]*\)\..*/\1/p')
	if [[ -n $v ]] && ((v >= 7)); then
		printf '%s\n' --enable-debug-command yes
	fi
}

# A live redis-server with this pid?  A daemonized Redis is not our child, so
# once dead it may linger as a zombie until init reaps it: that counts as gone.
_is_redis_pid() {
	local stat
	[[ $1 =~ ^[0-9]+$ ]] || return 1
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	[[ $stat == *"(redis-server"* || $stat == *"(valkey-server"* ]] || return 1
	stat=${stat##*) }
	[[ ${stat%% *} != [ZX] ]]
}

# start_redis PORT DIR [ARGS...]: a Redis on 127.0.0.1:PORT with no persistence
# (ARGS go to redis-server, e.g. --replicaof 127.0.0.1 6379),
# keeping its pid file and log in DIR.  Returns once that server (not some
# other one already on the port) answers PING, or fails after 10 s.
start_redis() {
	local port=$1 dir=$2 i pid='' served=''
	shift 2
	mkdir -p "$dir" && dir=$(cd "$dir" && pwd) || return 1
	local args=(
		--port "$port" --bind 127.0.0.1
		--daemonize yes
		--save '' --appendonly no
		--dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
	)
	mapfile -t -O "${#args[@]}" args < <(_redis_debug_args)
	args+=("$@")
	rm -f "$dir/redis.pid"
	if ! "$SLIDEWIN_REDIS_SERVER" "${args[@]}"; then
		echo "start_redis: $SLIDEWIN_REDIS_SERVER did not launch" >&2
		return 1
	fi
	for ((i = 0; i < 100; i++)); do
		[[ -s $dir/redis.pid ]] && pid=$(<"$dir/redis.pid")
		if [[ -n $pid ]]; then
			served=$("$SLIDEWIN_REDIS_CLI" -h 127.0.0.1 -p "$port" info server 2>/dev/null |
				tr -d '\r' | sed -n 's/^process_id://p')
			if [[ $served == "$pid" ]]; then
				echo "$port" >"$dir/redis.port"
				return 0
			fi
		fi
		sleep 0.1
	done
	echo "start_redis: no answer from our redis-server on 127.0.0.1:$port within 10 s" >&2
	if [[ -f $dir/redis.log ]]; then
		tail -n 20 "$dir/redis.log" >&2
	fi
	stop_redis "$dir"
	return 1
}

# stop_redis DIR: stop the Redis whose pid file is in DIR, if it runs.
stop_redis() {
	local dir=$1 pid i
	[[ -f $dir/redis.pid ]] || return 0
	pid=$(<"$dir/redis.pid")
	if _is_redis_pid "$pid"; then
		kill -TERM "$pid" 2>/dev/null
		for ((i = 0; i < 100; i++)); do
			_is_redis_pid "$pid" || break
			sleep 0.1
		done
		if _is_redis_pid "$pid"; then
			kill -KILL "$pid" 2>/dev/null
		fi
	fi
	rm -f "$dir/redis.pid"
}

# start_pg PORT DIR [REDIS_PORT|URL]: a new cluster in DIR/data, superuser
# `postgres`, trust auth, listening on 127.0.0.1:PORT and on a socket in
# DIR.  With REDIS_PORT, slidewin.redis_url points at that Redis (a URL is
# taken as it is: redis-cluster://...).  Waits up
# to 60 s for the server to accept connections.  Server log: DIR/postgres.log.
start_pg() {
	local port=$1 dir=$2 redis_port=${3:-}
	if [[ -z $PG_BINDIR || ! -x $PG_BINDIR/initdb ]]; then
		echo "start_pg: initdb not found (PG_CONFIG=$PG_CONFIG)" >&2
		return 1
	fi
	mkdir -p "$dir" && dir=$(cd "$dir" && pwd) || return 1
	if ((EUID == 0)); then
		chown "$SLIDEWIN_PG_USER:" "$dir" && chmod 700 "$dir" || return 1
	fi
	if ! as_pg_user test -w "$dir"; then
		echo "start_pg: user $SLIDEWIN_PG_USER cannot write $dir (are its parents traversable?)" >&2
		return 1
	fi
	if ! as_pg_user "$PG_BINDIR/initdb" -D "$dir/data" -U postgres -A trust \
		-E UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1; then
		echo "start_pg: initdb failed:" >&2
		tail -n 20 "$dir/initdb.log" >&2
		return 1
	fi
	{
		echo
		echo "# throwaway test cluster"
		echo "listen_addresses = '127.0.0.1'"
		echo "port = $port"
		echo "unix_socket_directories = '$dir'"
		echo "fsync = off"
		echo "max_connections = 100"
		echo "max_prepared_transactions = 10"
		echo "shared_preload_libraries = 'slidewin'"
		if [[ $redis_port == *://* ]]; then
			echo "slidewin.redis_url = '$redis_port'"
		elif [[ -n $redis_port ]]; then
			echo "slidewin.redis_url = 'redis://127.0.0.1:$redis_port'"
		fi
	} >>"$dir/data/postgresql.conf"
	cat >"$dir/data/pg_hba.conf" <<-'EOF'
		local all all trust
		host  all all 127.0.0.1/32 trust
		host  all all ::1/128 trust
	EOF
	if ! as_pg_user "$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" \
		-w -t 60 start >"$dir/pg_ctl.log" 2>&1; then
		echo "start_pg: server did not start on port $port; log tail:" >&2
		tail -n 20 "$dir/postgres.log" >&2
		stop_pg "$dir"
		return 1
	fi
}

_pg_ctl_stop_datadir() {
	local data=$1
	[[ -f $data/postmaster.pid ]] || return 0
	as_pg_user "$PG_BINDIR/pg_ctl" -D "$data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
		as_pg_user "$PG_BINDIR/pg_ctl" -D "$data" -m immediate -w -t 30 stop >/dev/null 2>&1
	return 0
}

# stop_pg DIR: fast shutdown of the cluster start_pg made in DIR, if running.
stop_pg() {
	_pg_ctl_stop_datadir "$1/data"
}

# reap_under DIR: stop every server whose pid file lies under DIR: clusters
# (postmaster.pid) and Redis servers (redis.pid) that a test started and did
# not stop, for instance because it was killed by a timeout.
reap_under() {
	local dir=$1 f
	[[ -d $dir ]] || return 0
	while IFS= read -r -d '' f; do
		as_pg_user "$PG_BINDIR/pg_ctl" -D "${f%/postmaster.pid}" -m immediate -w -t 30 stop >/dev/null 2>&1
	done < <(find "$dir" -name postmaster.pid -print0 2>/dev/null)
	while IFS= read -r -d '' f; do
		stop_redis "${f%/redis.pid}"
	done < <(find "$dir" -name redis.pid -print0 2>/dev/null)
	return 0
}
