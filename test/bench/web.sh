#!/usr/bin/env bash
# make bench-web: slidewin in a real web route, beside the limiters web
# developers use, in one Express app (test/bench/web/app.js) on one Redis.
#
#   bash test/bench/web.sh           full run: 11 routes x {many keys, one hot
#                                    key} x {8, 32} connections, BENCH_WEB_SECONDS
#                                    each (default 5), then BENCH_WEB_ROUNDS - 1
#                                    more rounds (default 3 in all) of the six
#                                    routes compared with the peers: about 9
#                                    minutes. Prints a markdown table, writes it
#                                    to test/bench/WEB_RESULTS.md and the chart
#                                    to test/bench/charts/web.svg.
#   bash test/bench/web.sh --smoke   every route for 1 s at 8 connections on
#                                    many keys (make test): exits non-zero
#                                    unless each answered 200, and only 200.
#
# The routes (app.js): no limiting; the limit alone, by slidewin (rl_attempt
# and rl_headers in one prepared statement), rate-limiter-flexible's
# RateLimiterRedis and express-rate-limit with rate-limit-redis (both through
# ioredis); one row read by primary key alone; and the row with the limit:
# slidewin in the same statement, each peer with its Redis call before the
# query; and slidewin's statement again, on connections with local batches
# on (slidewin.local_batch), which a hot key's calls share in shared memory,
# and with algorithm => 'fixed_window', the peers' own algorithm (a counter
# per window), which tells the exact log's cost from the cost of the route's
# shape. The target is judged on the default algorithm. Beside them, the
# ceiling: the same statement with, in place of rl_attempt, one round trip
# to Redis that does nothing (bench_redis_ping, a PING; redis_ping.c, built
# here with PGXS and loaded from the work directory, never installed), so
# that the run shows what the route's shape allows any limiter that the
# statement asks in Redis.
# The limit never binds: this measures what limiting costs.
# autocannon drives each route (test/bench/web/drive.js), which also reads
# from /proc the CPU that the app, PostgreSQL's processes and Redis used
# during the run; the table gives it per 1,000 requests.
# The routes that read a row and limit, which the target compares, run in
# more rounds, one route after the other, so that a slow spell of the
# machine falls on one round of each rather than on one route: the target
# is judged on the median of the rounds' ratios, each round's given beside
# it. The table holds the first round.
#
# The npm packages are the ones test/bench/web/package-lock.json locks,
# installed by `npm ci` into the work directory. The servers are throwaway
# ones on loopback, stopped on exit. Knobs: BENCH_WEB_SECONDS, BENCH_WEB_ROUNDS,
# BENCH_WEB_KEEP=1 (keep the work directory).
set -euo pipefail

SECONDS=0
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$repo/test/lib.sh"

smoke=0
case ${1:-} in
--smoke) smoke=1 ;;
'') ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
secs=${BENCH_WEB_SECONDS:-5}
[[ $secs =~ ^[1-9][0-9]*$ ]] || { echo "web.sh: BENCH_WEB_SECONDS must be a positive whole number" >&2; exit 2; }
rounds=${BENCH_WEB_ROUNDS:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "web.sh: BENCH_WEB_ROUNDS must be a positive whole number" >&2; exit 2; }
routes=(none sw rlf erl row sw-row rlf-row erl-row swb-row swf-row ping-row)
compared=(sw-row rlf-row erl-row swb-row swf-row ping-row)
if ((smoke)); then
	secs=1
	rounds=1
	conns=(8)
	keysets=(many)
else
	conns=(8 32)
	keysets=(many hot)
fi

die() {
	echo "web.sh: $*" >&2
	exit 1
}
progress() { printf '[%4ds] %s\n' "$SECONDS" "$*" >&2; }

for tool in node npm curl make "$PG_BINDIR/psql" "$PG_BINDIR/initdb"; do
	command -v "$tool" >/dev/null 2>&1 || die "missing $tool (run test/deps.sh)"
done

load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
work=$(mktemp -d -t slidewin-bench-web.XXXXXX)
chmod 755 "$work"
app_pid=
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	{
		[[ -n $app_pid ]] && kill -TERM "$app_pid" && wait "$app_pid"
		stop_pg "$work/pg"
		stop_redis "$work/redis"
		reap_under "$work"
	} >/dev/null 2>&1 || true
	if [[ ${BENCH_WEB_KEEP:-} == 1 ]]; then
		echo "work directory kept: $work" >&2
	else
		rm -rf "$work"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# npm ci while the servers start
mkdir -p "$work/node"
cp "$here/web/package.json" "$here/web/package-lock.json" "$here/web/app.js" "$here/web/drive.js" "$work/node/"
# (make test shares one npm cache between its installs: SLIDEWIN_NPM_CACHE)
npm_cache=$work/.npm
npm_offline=()
if [[ -n ${SLIDEWIN_NPM_CACHE:-} && -d $SLIDEWIN_NPM_CACHE ]]; then
	npm_cache=$SLIDEWIN_NPM_CACHE
	npm_offline=(--prefer-offline)
fi
(cd "$work/node" && npm_config_cache=$npm_cache npm_config_update_notifier=false \
	timeout 300 npm ci --omit=dev --no-audit --no-fund --loglevel=error "${npm_offline[@]}") >"$work/npm.log" 2>&1 &
npm_pid=$!
# the ceiling probe, built with PGXS for the server under test
mkdir -p "$work/ping"
cp "$here/web/redis_ping.c" "$work/ping/"
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$work/ping" -f "$here/web/redis_ping.mk" PG_CONFIG="$PG_CONFIG" >"$work/ping.log" 2>&1 ||
	{ cat "$work/ping.log" >&2; die "could not build the probe redis_ping.c"; }

redis_port=$(free_port)
start_redis "$redis_port" "$work/redis" >/dev/null || die "could not start Redis"
pg_port=$(free_port)
start_pg "$pg_port" "$work/pg" "$redis_port" >/dev/null || die "could not start PostgreSQL"
psql_do() { "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres "$@"; }
psql_do -c 'CREATE EXTENSION slidewin' \
	-c 'CREATE TABLE items (id int PRIMARY KEY, payload text NOT NULL)' \
	-c "INSERT INTO items SELECT i, md5(i::text) FROM generate_series(1, 10000) i" \
	-c 'VACUUM ANALYZE items' \
	-c "CREATE FUNCTION bench_redis_ping(int) RETURNS boolean
	      AS '$work/ping/redis_ping.so', 'bench_redis_ping' LANGUAGE C STRICT VOLATILE" ||
	die "could not set up the database"
wait "$npm_pid" || { cat "$work/npm.log" >&2; die "npm ci failed"; }
progress "PostgreSQL on 127.0.0.1:$pg_port, Redis on 127.0.0.1:$redis_port, npm packages installed"

app_port=$(free_port)
PGHOST=127.0.0.1 PGPORT=$pg_port PGUSER=postgres PGDATABASE=postgres \
	REDIS_PORT=$redis_port PORT=$app_port \
	node "$work/node/app.js" >"$work/app.log" 2>&1 &
app_pid=$!
for _ in $(seq 100); do
	curl -fs "http://127.0.0.1:$app_port/none/x" >/dev/null 2>&1 && break
	kill -0 "$app_pid" 2>/dev/null || { cat "$work/app.log" >&2; die "the app exited"; }
	sleep 0.1
done
# Every route answers 200 once, which also prepares the statements on a
# first connection; the pool's other connections open in the warm-up runs.
for r in "${routes[@]}"; do
	code=$(curl -s -o "$work/first.$r" -w '%{http_code}' "http://127.0.0.1:$app_port/$r/first") || code=none
	[[ $code == 200 ]] || { cat "$work/first.$r" "$work/app.log" >&2; die "route /$r answered $code"; }
done
pm_pid=$(head -n 1 "$work/pg/data/postmaster.pid")
redis_pid=$(<"$work/redis/redis.pid")
export CLK_TCK
CLK_TCK=$(getconf CLK_TCK)

drive() { # drive ROUTE CONNS SECONDS KEYS: one JSON line
	node "$work/node/drive.js" "http://127.0.0.1:$app_port" "$1" "$2" "$3" "$4" \
		"$app_pid" "$pm_pid" "$redis_pid"
}
results=$work/results.jsonl
: >"$results"
for keys in "${keysets[@]}"; do
	for c in "${conns[@]}"; do
		# a short warm-up of each route at this concurrency (JIT, the pool's
		# connections and their prepared statements), not recorded
		if ((!smoke)); then
			for r in "${routes[@]}"; do drive "$r" "$c" 1 "$keys" >/dev/null; done
		fi
		for r in "${routes[@]}"; do
			progress "$keys keys, $c connections: /$r"
			drive "$r" "$c" "$secs" "$keys" | sed 's/^{/{"round":1,/' >>"$results" ||
				die "the driver failed on /$r"
		done
		for ((n = 2; n <= rounds; n++)); do
			for r in "${compared[@]}"; do
				progress "$keys keys, $c connections: /$r, round $n of $rounds"
				drive "$r" "$c" "$secs" "$keys" | sed "s/^{/{\"round\":$n,/" >>"$results" ||
					die "the driver failed on /$r"
			done
		done
	done
done

# The table, the targets, and (full run) the chart.
table=$work/table.md
status=0
perl -MJSON::PP -e '
	my %name = (none => "no limiting", sw => "slidewin", rlf => "rate-limiter-flexible",
		erl => "express-rate-limit", row => "row read alone", "sw-row" => "row + slidewin, one statement",
		"rlf-row" => "rate-limiter-flexible, then the row", "erl-row" => "express-rate-limit, then the row",
		"swb-row" => "row + slidewin, one statement, local batches on",
		"swf-row" => "row + slidewin, one statement, fixed_window",
		"ping-row" => "row + one round trip to Redis doing nothing (PING), one statement: the ceiling");
	my (@r, %rps, %rounds, $bad);
	while (<>) {
		my $x = decode_json($_);
		$rounds{"$x->{keys}/$x->{connections}"}{ $x->{round} }{ $x->{route} } = $x->{rps};
		$bad = 1 if $x->{ok} == 0 || $x->{non2xx} + $x->{errors} > 0;
		next if $x->{round} != 1;
		push @r, $x;
		$rps{"$x->{keys}/$x->{connections}/$x->{route}"} = $x->{rps};
	}
	sub median { my @v = sort { $a <=> $b } @_; return @v % 2 ? $v[$#v / 2] : ($v[@v / 2 - 1] + $v[@v / 2]) / 2 }
	# the ratio of route $sw to the faster peer in each round of cell $c
	sub ratios {
		my ($c, $sw) = @_;
		my @q;
		for my $n (sort { $a <=> $b } keys %{ $rounds{$c} }) {
			my $x = $rounds{$c}{$n};
			next unless $x->{$sw} && $x->{"rlf-row"} && $x->{"erl-row"};
			my $peer = $x->{"rlf-row"} > $x->{"erl-row"} ? $x->{"rlf-row"} : $x->{"erl-row"};
			push @q, $x->{$sw} / $peer;
		}
		return @q;
	}
	print "| keys | conns | route | req/s | p50 ms | p99 ms | CPU s per 1,000 req: app / PostgreSQL / Redis | not 200 |\n";
	print "|---|---|---|---|---|---|---|---|\n";
	for my $x (@r) {
		my $per = $x->{total} > 0 ? 1000 / $x->{total} : 0;
		printf "| %s | %d | %s | %.0f | %s | %s | %.3f / %.3f / %.3f | %d |\n", $x->{keys}, $x->{connections},
			$name{ $x->{route} } // $x->{route}, $x->{rps}, $x->{p50}, $x->{p99},
			$x->{cpu}{app} * $per, $x->{cpu}{pg} * $per, $x->{cpu}{redis} * $per, $x->{non2xx} + $x->{errors};
	}
	print "\nTargets, ratios of this run (never pass/fail):\n\n";
	my %seen;
	for my $x (@r) {
		my $c = "$x->{keys}/$x->{connections}";
		next if $seen{$c}++;
		my ($lsw, $lf, $le) = map { $rps{"$c/$_"} } qw(sw rlf erl);
		my @q = ratios($c, "sw-row");
		next unless @q && $lsw && $lf && $le;
		my @qb = ratios($c, "swb-row");
		my @qf = ratios($c, "swf-row");
		my @qp = ratios($c, "ping-row");
		my $m = median(@q);
		my $each = sub { @_ > 1 ? sprintf(" (rounds: %s)", join(", ", map { sprintf "%.2f", $_ } @_)) : "" };
		printf "- %s, %s connections: read a row and limit: slidewin %.2f x the faster peer%s (target >= 1.0: %s)%s%s; limit only: slidewin %.2f x rate-limiter-flexible, %.2f x express-rate-limit\n",
			($x->{keys} eq "hot" ? "one hot key" : "many keys"), $x->{connections}, $m, $each->(@q), ($m >= 1.0 ? "met" : "not met"),
			(@qb ? sprintf(", with local batches on %.2f x%s", median(@qb), $each->(@qb)) : ""),
			(@qf ? sprintf(", with fixed_window (the algorithm of both peers) %.2f x%s", median(@qf), $each->(@qf)) : "")
			. (@qp ? sprintf("; the ceiling, the same statement doing one PING in Redis in place of rl_attempt: %.2f x%s", median(@qp), $each->(@qp)) : ""), $lsw / $lf, $lsw / $le;
	}
	exit($bad ? 3 : 0);
' "$results" >"$table" || status=$?
{
	echo "make bench-web, $(date -u +%Y-%m-%d), $(nproc) CPUs, load average before the run $load_before; node $(node --version), $("$PG_BINDIR/postgres" --version | sed 's/.*) //'), $("${SLIDEWIN_REDIS_SERVER:-redis-server}" --version | sed -n 's/.* v=\([^ ]*\).*/Redis \1/p'); ${secs} s per row"
	echo
	cat "$table"
} >"$work/out.md"
cat "$work/out.md"
if ((status != 0)); then
	echo "web.sh: a route answered other than 200, or not at all (app log: $work/app.log)" >&2
	tail -n 20 "$work/app.log" >&2
	exit 1
fi
if ((!smoke)); then
	cp "$work/out.md" "$here/WEB_RESULTS.md"
	perl -MJSON::PP -e '
		my (%v, @order);
		while (<>) { my $x = decode_json($_); next if $x->{round} != 1; push @order, $x->{route} unless exists $v{ $x->{route} };
			$v{ $x->{route} }{"$x->{keys}/$x->{connections}"} = sprintf "%.0f", $x->{rps} }
		for my $r (@order) { print join("\t", $r, map { $v{$r}{$_} // "" } qw(many/8 many/32 hot/8 hot/32)), "\n" }
	' "$results" >"$work/chart.tsv"
	bash "$here/charts.sh" web "$work/chart.tsv" "$here/charts/web.svg" ||
		echo "web.sh: the chart could not be drawn" >&2
	echo "written: test/bench/WEB_RESULTS.md, test/bench/charts/web.svg"
fi
echo "total elapsed: $SECONDS s"
