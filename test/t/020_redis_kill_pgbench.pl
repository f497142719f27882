# Redis is SIGKILLed under a pgbench load and restarted 3 s later.  Under the
# default policy (fallback) no transaction fails; the calls move to the
# fallback store and back to Redis within redis_retry_interval of the restart.
# Every admission is logged with its store and the admission time the store
# recorded, and the log is checked window by window: a 2 s window never holds
# more than lim (30) units of one store, so never more than 30 units where
# one store answered and never more than 60 across a switch of stores.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest;

my $lim      = 30;
my $win_s    = 2;
my $keys     = 20;
my $duration = 9;
my $kill_at    = 2.5;
my $restart_at = 5.5;

my $redis = SlidewinTest::start_redis();
my $node  = SlidewinTest::new_node('pgbench', $redis, ['max_connections = 30']);

$node->safe_psql('postgres', q{
	CREATE TABLE adm (
		id    bigserial PRIMARY KEY,
		pid   int NOT NULL,           -- the backend that made the call
		k     int NOT NULL,
		cost  int NOT NULL,
		store text NOT NULL,
		ts    timestamptz NOT NULL    -- admission time recorded by the store
	);
	CREATE INDEX adm_k_ts ON adm (k, ts);
	-- calls the fallback store answered after 90 ms or more: a request to
	-- Redis that ran out of slidewin.command_timeout (100 ms) first
	CREATE TABLE slow (pid int NOT NULL, at timestamptz NOT NULL);
});
is($node->safe_psql('postgres', "LOAD 'slidewin'; SHOW slidewin.on_redis_error"), 'fallback',
	'the default policy is fallback');

my $dir    = PostgreSQL::Test::Utils::tempdir('pgbench');
my $script = "$dir/attempt.sql";
open(my $fh, '>', $script) or die "cannot write $script: $!";
print $fh <<"EOS";
\\set k random(1, $keys)
\\set c random(1, 3)
WITH r AS MATERIALIZED (
  SELECT r.*, clock_timestamp() AS done
  FROM rl_attempt('pgb:' || :k, $lim, interval '$win_s seconds', :c) r),
s AS (INSERT INTO slow (pid, at)
  SELECT pg_backend_pid(), r.done FROM r
  WHERE r.store = 'fallback' AND r.done - statement_timestamp() >= interval '90 ms')
INSERT INTO adm (pid, k, cost, store, ts)
SELECT pg_backend_pid(), :k, :c, r.store, r.reset_at - interval '$win_s seconds'
FROM r
WHERE r.allowed;
EOS
close $fh;

my ($bench_out, $bench_err) = ('', '');
my @cmd = (
	'pgbench', '-n', '-c', '8', '-j', '2', '-T', $duration,
	'-f', $script, '-h', $node->host, '-p', $node->port, 'postgres');
note("running: @cmd");
my $t0    = time;
my $bench = IPC::Run::start(\@cmd, '<', \undef, '>', \$bench_out, '2>', \$bench_err);

sub sleep_until
{
	my ($at) = @_;
	my $d = $t0 + $at - time;
	usleep(int($d * 1e6)) if $d > 0;
}

sleep_until($kill_at);
$redis->kill9;
my $kill_time = time;
note(sprintf('redis killed at +%.2f s', $kill_time - $t0));

sleep_until($restart_at);
my $restart_begin = time;
$redis->restart;
my $restart_time = time;
note(sprintf('redis restarted at +%.2f s (up at +%.2f s)',
		$restart_begin - $t0, $restart_time - $t0));

$bench->finish;
my $bench_rc = $bench->full_result(0) >> 8;
note("pgbench stdout:\n$bench_out");
note("pgbench stderr:\n$bench_err");

is($bench_rc, 0, 'pgbench exits 0');
like($bench_out, qr/^number of failed transactions: 0 \(/m, 'pgbench: 0 failed transactions');
unlike($bench_err, qr/abort/i, 'pgbench: no client aborted');
my ($processed) = $bench_out =~ /number of transactions actually processed: (\d+)/;
cmp_ok($processed // 0, '>', 1000, 'pgbench ran transactions (' . ($processed // 0) . ')');
cmp_ok(time - $t0, '>=', $duration, 'pgbench ran past the restart');

my $admitted = $node->safe_psql('postgres', 'SELECT count(*) FROM adm');
cmp_ok($admitted, '>', 0, "admissions logged ($admitted)");
cmp_ok($admitted, '<', $processed // 0,
	"the limit denied calls ($admitted admitted of $processed)");

# Which store answered when.
my ($redis_before, $fallback, $redis_after, $redis_during, $other) = split /\|/,
  $node->safe_psql('postgres', qq{
	SELECT count(*) FILTER (WHERE store = 'redis' AND extract(epoch FROM ts) < $kill_time),
	       count(*) FILTER (WHERE store = 'fallback'),
	       count(*) FILTER (WHERE store = 'redis' AND extract(epoch FROM ts) > $restart_begin),
	       count(*) FILTER (WHERE store = 'redis' AND extract(epoch FROM ts) BETWEEN $kill_time AND $restart_begin),
	       count(*) FILTER (WHERE store NOT IN ('redis', 'fallback'))
	FROM adm});
cmp_ok($redis_before, '>', 0, "admissions by Redis before the kill ($redis_before)");
cmp_ok($fallback,     '>', 0, "admissions by the fallback store ($fallback)");
cmp_ok($redis_after,  '>', 0, "admissions by Redis after the restart ($redis_after)");
is($redis_during, '0', 'no Redis admission while Redis was dead');
is($other,        '0', "no admission from any other store (policy fallback)");

my ($fb_first, $fb_last) = split /\|/, $node->safe_psql('postgres', qq{
	SELECT round((min(extract(epoch FROM ts)) - $t0)::numeric, 3),
	       round((max(extract(epoch FROM ts)) - $t0)::numeric, 3)
	FROM adm WHERE store = 'fallback'});
note("fallback admissions from +$fb_first s to +$fb_last s");

# Back to Redis: a backend retries Redis redis_retry_interval (1 s) after its
# last failure, so 1.5 s after the restart every admission is Redis's; or
# after the backend's last failure, if it had one later. Once Redis is up,
# the only failure that can come is a request that runs out of
# slidewin.command_timeout, on a loaded machine (CI saw a fallback
# admission 1.56 s after the restart): its call took 100 ms and more, and
# is in table slow. At most one such call per client, or Redis was not
# really back.
my $late_limit = $restart_time + 1.5;
my $slow_late = $node->safe_psql('postgres', qq{
	SELECT count(*) FROM slow WHERE extract(epoch FROM at) > $restart_time + 0.5});
note("fallback calls of 90 ms or more, more than 0.5 s after the restart: $slow_late");
cmp_ok($slow_late, '<=', 8, 'at most one timed-out request per client once Redis was back');
my ($late_total, $late_not_redis) = split /\|/, $node->safe_psql('postgres', qq{
	SELECT count(*), count(*) FILTER (WHERE a.store <> 'redis' AND
	  extract(epoch FROM a.ts) > greatest($late_limit,
	    (SELECT extract(epoch FROM max(s.at)) + 1.5 FROM slow s WHERE s.pid = a.pid)))
	FROM adm a WHERE extract(epoch FROM a.ts) > $late_limit});
cmp_ok($late_total, '>', 0, "admissions more than 1.5 s after the restart ($late_total)");
is($late_not_redis, '0',
	"every admission more than 1.5 s after the restart, and after its backend's last timed-out request, is by Redis");

# The restart emptied Redis.  Its rows from before the kill and after the
# restart must never share a window, or Redis alone could admit 2 x lim in
# one: the outage (the fallback phase) is longer than the window.
my $mid = ($kill_time + $restart_begin) / 2;
my $gap = $node->safe_psql('postgres', qq{
	SELECT round(min(extract(epoch FROM a.ts) - b.last)::numeric, 3)
	FROM (SELECT k, min(ts) AS ts FROM adm
	      WHERE store = 'redis' AND extract(epoch FROM ts) > $mid GROUP BY k) a
	JOIN (SELECT k, max(extract(epoch FROM ts)) AS last FROM adm
	      WHERE store = 'redis' AND extract(epoch FROM ts) < $mid GROUP BY k) b USING (k)});
cmp_ok($gap, '>=', $win_s,
	"Redis rows before the kill and after the restart are more than a window apart (min gap $gap s)");

# Every window [t, t + 2 s) that starts at an admission of its key.
my $windows = qq{
	WITH w AS (
		SELECT a.id, a.k, a.ts,
		       sum(b.cost) AS total,
		       count(DISTINCT b.store) AS nstores,
		       coalesce(sum(b.cost) FILTER (WHERE b.store = 'redis'), 0) AS by_redis,
		       coalesce(sum(b.cost) FILTER (WHERE b.store = 'fallback'), 0) AS by_fallback
		FROM adm a
		JOIN adm b ON b.k = a.k AND b.ts >= a.ts
		          AND b.ts < a.ts + interval '$win_s seconds'
		GROUP BY a.id, a.k, a.ts)
};
my ($n_windows, $worst_single, $worst_mixed, $n_mixed, $worst_per_store) = split /\|/,
  $node->safe_psql('postgres', qq{$windows
	SELECT count(*),
	       coalesce(max(total) FILTER (WHERE nstores = 1), 0),
	       coalesce(max(total) FILTER (WHERE nstores = 2), 0),
	       count(*) FILTER (WHERE nstores = 2),
	       max(greatest(by_redis, by_fallback))
	FROM w});
is($n_windows, $admitted, 'one window per admission');
note("$n_mixed windows hold admissions of both stores");
cmp_ok($n_mixed, '>', 0, "some windows span a switch of stores ($n_mixed)");
cmp_ok($worst_single, '<=', $lim,
	"one-store windows hold at most $lim units (worst $worst_single)");
cmp_ok($worst_single, '>=', $lim - 2,
	"the limit was reached, so the bound is not vacuous (worst $worst_single)");
cmp_ok($worst_mixed, '<=', 2 * $lim,
	"windows with both stores hold at most 2 x $lim units (worst $worst_mixed)");
cmp_ok($worst_per_store, '<=', $lim,
	"no store admits more than $lim units in any window (worst $worst_per_store)");

if ($worst_single > $lim || $worst_mixed > 2 * $lim || $worst_per_store > $lim)
{
	diag('worst windows:');
	diag($node->safe_psql('postgres', qq{$windows
		SELECT k, ts, total, by_redis, by_fallback FROM w
		ORDER BY greatest(by_redis, by_fallback) DESC, total DESC LIMIT 5}));
}

done_testing();
