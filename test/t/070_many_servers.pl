# Many PostgreSQL servers, one Redis: the budget of a key is shared.
#
# Two clusters, both preloading slidewin, point at the same Redis.
#  - 8 pgbench clients on each hammer one key with lim = 100 and a window of
#    an hour, starting together: exactly 100 calls are admitted in all, as
#    counted by each server in its own table and summed.
#  - A refund on one server frees units for the other: server A admits with
#    refund_on_abort inside a transaction and rolls back; server B then gets
#    those units.
#  - A reset on one server reaches a denial that the other server holds in
#    its deny cache only when that cached answer runs out: until the oldest
#    entry of the window leaves it (here sooner than retry_after).  Until
#    then B is denied from its cache without asking Redis (counted with INFO
#    commandstats); then Redis admits it.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
my @conf  = ("shared_preload_libraries = 'slidewin'", 'max_connections = 30');
my $a_node = SlidewinTest::new_node('server_a', $redis, \@conf);
my $b_node = SlidewinTest::new_node('server_b', $redis, \@conf);

# ---------------------------------------------------------------------
# Exactly lim admitted across both servers
# ---------------------------------------------------------------------
my $lim = 100;
for my $n ($a_node, $b_node)
{
	$n->safe_psql('postgres', 'CREATE UNLOGGED TABLE adm (at timestamptz DEFAULT clock_timestamp())');
}

# Every client of both servers waits for the same start time, so neither
# server can use up the key before the other has begun; then each call comes
# after a short random pause, so the two servers' calls interleave.
my $dir    = PostgreSQL::Test::Utils::tempdir('pgbench');
my $script = "$dir/hot.sql";
open(my $fh, '>', $script) or die "cannot write $script: $!";
print $fh <<"EOS";
SELECT pg_sleep(greatest(0, :start - extract(epoch FROM clock_timestamp())));
\\set s random(0, 3)
\\sleep :s ms
INSERT INTO adm SELECT WHERE rl_allow('ms:hot', $lim, '1 hour');
EOS
close $fh;

my $start = sprintf('%.3f', time + 2);
my @bench;
for my $n ($a_node, $b_node)
{
	my ($out, $err) = ('', '');
	my @cmd = (
		'pgbench', '-n', '-c', '8', '-j', '2', '-t', '150',
		'-D', "start=$start", '-f', $script,
		'-h', $n->host, '-p', $n->port, 'postgres');
	my $h = IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	push @bench, { node => $n, h => $h, out => \$out, err => \$err };
}
my $total = 0;
my @per_server;
for my $b (@bench)
{
	$b->{h}->finish;
	my $name = $b->{node}->name;
	is($b->{h}->full_result(0) >> 8, 0, "$name: pgbench exits 0");
	like(${ $b->{out} }, qr{processed: 1200/1200}, "$name: 8 clients x 150 calls ran")
	  or diag(${ $b->{out} } . ${ $b->{err} });
	my $n = $b->{node}->safe_psql('postgres', 'SELECT count(*) FROM adm');
	push @per_server, $n;
	$total += $n;
}
note("admitted: server A $per_server[0], server B $per_server[1]");
is($total, $lim, "exactly $lim admitted across both servers ($per_server[0] + $per_server[1])");
cmp_ok($per_server[0], '>', 0, "server A admitted some ($per_server[0])");
cmp_ok($per_server[1], '>', 0, "server B admitted some ($per_server[1])");
is($redis->cli('zcard', 'slidewin:log:ms:hot'), $lim, 'Redis holds one entry per admitted call');
for my $n ($a_node, $b_node)
{
	is($n->safe_psql('postgres', q{SELECT allowed, remaining, store FROM rl_peek('ms:hot', 100, '1 hour')}),
		'f|0|redis', $n->name . ': rl_peek sees the key used up');
}

# ---------------------------------------------------------------------
# A refund on A frees units for B
# ---------------------------------------------------------------------
my $sa = $a_node->background_psql('postgres');
$sa->query_safe('BEGIN');
is($sa->query_safe(q{
	SELECT string_agg(r.allowed || ':' || r.remaining, ',')
	FROM generate_series(1, 2) g,
	     LATERAL rl_attempt('ms:rf', 2, '1 hour', 1 + 0 * g, refund_on_abort => true) r}),
	'true:1,true:0', 'A admits 2 of 2 inside a transaction');
# Each safe_psql is a new session: B's answers below come from Redis, never
# from a deny cache.
is($b_node->safe_psql('postgres', q{SELECT allowed, remaining FROM rl_attempt('ms:rf', 2, '1 hour')}),
	'f|0', "B is denied while A's transaction holds the units");
$sa->query_safe('ROLLBACK');
is($sa->query_safe('SELECT refunded, refunds_dropped FROM rl_backend_stats()'),
	'2|0', 'A gave back its 2 units');
is($b_node->safe_psql('postgres', q{
	SELECT string_agg(r.allowed || ':' || r.remaining, ',')
	FROM generate_series(1, 3) g, LATERAL rl_attempt('ms:rf', 2, '1 hour', 1 + 0 * g) r}),
	'true:1,true:0,false:0', "after A's rollback B gets both units, and no more");
$sa->quit;

# ---------------------------------------------------------------------
# A reset on A, and a denial cached by B
# ---------------------------------------------------------------------
# lim 3, win 5 s, entries at t1, t2 = t1 + 2 s and t3 just after.  A call
# of cost 2 needs 2 units to leave the window: retry_after runs to t2 + 5 s.
# But its answer stays the same only until t1 + 5 s, when the oldest entry
# leaves and remaining changes: that is when B's cached denial ends.
my $win = 5;
$b_node->safe_psql('postgres', q{
	CREATE FUNCTION spin(k text, lim bigint, win interval, cost bigint) RETURNS text
	LANGUAGE plpgsql AS $$
	DECLARE r rl_result; calls int := 0;
	BEGIN
	  LOOP
	    calls := calls + 1;
	    r := rl_attempt(k, lim, win, cost);
	    EXIT WHEN r.allowed;
	    PERFORM pg_sleep(0.001);
	  END LOOP;
	  RETURN calls || ' ' || extract(epoch FROM clock_timestamp());
	END $$;
});
my $sb = $b_node->background_psql('postgres');
$sb->query_safe(q{SELECT rl_peek('warm', 1, '1 second')});   # connected

# The time of the entry an admission on A recorded (Redis TIME).
sub entry_time
{
	my ($key) = @_;
	return $a_node->safe_psql('postgres',
		qq{SELECT extract(epoch FROM reset_at) - $win FROM rl_attempt('$key', 3, '$win seconds') WHERE allowed});
}
my $t1 = entry_time('ms:dc');
usleep(2_000_000);
my $t2 = entry_time('ms:dc');
my $t3 = entry_time('ms:dc');
ok($t1 ne '' && $t2 ne '' && $t3 ne '', 'A admits 3 of 3');
my $stable_end = $t1 + $win;    # the oldest entry leaves the window
my $retry_end  = $t2 + $win;    # 2 units have left the window
note(sprintf('entries at t1, t1 + %.3f s, t1 + %.3f s', $t2 - $t1, $t3 - $t1));

my $before = $redis->scripts_run;
my ($allowed, $retry) = split /\|/, $sb->query_safe(
	qq{SELECT allowed, extract(epoch FROM clock_timestamp() + retry_after)
	   FROM rl_attempt('ms:dc', 3, '$win seconds', 2)});
is($allowed, 'f', 'B: a call of cost 2 is denied by Redis');
is($redis->scripts_run - $before, 1, 'B: that denial came from Redis');
cmp_ok(abs($retry - $retry_end), '<', 0.1,
	sprintf('B: its retry_after runs to t2 + win (off by %.3f s)', $retry - $retry_end));
$before = $redis->scripts_run;
is($sb->query_safe(qq{SELECT allowed FROM rl_attempt('ms:dc', 3, '$win seconds', 2)}),
	'f', 'B: denied again');
is($redis->scripts_run - $before, 0, 'B: the second denial came from its cache');

is($a_node->safe_psql('postgres', q{SELECT rl_reset('ms:dc')}), '', 'A resets the key');
is($redis->cli('exists', 'slidewin:log:ms:dc'), '0', 'the key is gone from Redis');

$before = $redis->scripts_run;
my $now;
($allowed, $now) = split /\|/, $sb->query_safe(
	qq{SELECT allowed, extract(epoch FROM clock_timestamp())
	   FROM rl_attempt('ms:dc', 3, '$win seconds', 2)});
is($allowed, 'f', "B: denied right after A's reset");
is($redis->scripts_run - $before, 0, 'B: from its cache, without asking Redis');
cmp_ok($now, '<', $stable_end - 0.5,
	sprintf('(that call came %.3f s before the cached answer ends)', $stable_end - $now));

# B spins on the call until it is admitted.  The cached answer ends at most
# a round trip before t1 + win (its clock starts before the request is
# sent), and B notices within one spin (1 ms) and some scheduling delay on a
# busy machine: 0.1 s of slack below, 0.3 s above, and a second to spare
# before t2 + win.
$before = $redis->scripts_run;
my ($calls, $admitted_at) = split / /,
  $sb->query_safe(qq{SELECT spin('ms:dc', 3, '$win seconds', 2)});
my $spin_trips = $redis->scripts_run - $before;
my $late = $admitted_at - $stable_end;
note(sprintf('B admitted %.3f s after t1 + win, %.3f s before t2 + win, after %d calls and %d round trips',
		$late, $retry_end - $admitted_at, $calls, $spin_trips));
cmp_ok($calls, '>', 100, "B spun $calls times before it was admitted");
is($spin_trips, 1, 'B asked Redis once: the call that was admitted');
cmp_ok($late, '>=', -0.1,
	sprintf('B was not admitted before its cached answer ended (%.3f s from t1 + win)', $late));
cmp_ok($late, '<=', 0.3,
	sprintf('B was admitted once the oldest entry left the window (%.3f s after t1 + win)', $late));
cmp_ok($admitted_at, '<', $retry_end - 1,
	'B did not wait for its retry_after (t2 + win)');
$sb->quit;

for my $n ($a_node, $b_node)
{
	unlike(slurp_file($n->logfile), qr/PANIC|terminated by signal/, $n->name . ': no crash in the log');
}
$a_node->stop;
$b_node->stop;
done_testing();
