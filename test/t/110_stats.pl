# Server-wide statistics (rl_stats, rl_stats_rules, rl_top_keys) where they
# need processes or settings of their own:
#  - counts from many backends add up (pgbench), and agree with Redis;
#  - past slidewin.stats_max_rules, rules go to the overflow row;
#  - past slidewin.track_keys, rl_top_keys keeps Space-Saving's promises:
#    every count within [denied - error, denied] of the truth, and every key
#    denied more than total/track_keys units listed;
#  - a Redis timeout is counted; a slow Redis moves the p99 round trip;
#  - after a crash restart every counter starts again from zero;
#  - without shared_preload_libraries the views raise SQLSTATE 55000.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
my $node = SlidewinTest::new_node('stats', $redis,
	[ "shared_preload_libraries = 'slidewin'", 'slidewin.stats_max_rules = 3',
	  'slidewin.track_keys = 4', 'restart_after_crash = on',
	  'max_connections = 30' ]);

sub sql { return $node->safe_psql('postgres', $_[0]) }

# --- many backends ---------------------------------------------------------
sql('SELECT rl_stats_reset()');
$node->pgbench(
	'-n -c 8 -j 2 -t 100',
	0,
	[qr{processed: 800/800}],
	[qr{^$}],
	'8 clients x 100 calls on one key',
	{ '110_hot' => q{SELECT rl_allow('st:hot', 300, '1 hour');} });
is(sql('SELECT calls, admitted, denied, units_admitted FROM rl_stats'),
	'800|300|500|300', 'the 8 backends\' calls add up: 300 admitted, 500 denied');
is(sql('SELECT calls, admitted, denied FROM rl_stats_rules WHERE lim = 300'),
	'800|300|500', 'and so do the rule\'s');
is($redis->cli('zcard', 'slidewin:log:st:hot'), '300', 'Redis holds the 300 admitted');
# Many quick calls at once (denials from the deny cache): no count is lost
# between backends counting at the same moment.
sql('SELECT rl_stats_reset()');
$node->pgbench(
	'-n -c 8 -j 2 -t 3000',
	0,
	[qr{processed: 24000/24000}],
	[qr{^$}],
	'8 clients x 3000 calls on an exhausted key',
	{ '110_denied' => q{SELECT rl_allow('st:hot', 300, '1 hour');} });
is(sql('SELECT calls, denied, deny_cache_hits + redis_calls FROM rl_stats'),
	'24000|24000|24000', '24,000 denials counted, none lost');
is(sql('SELECT calls, denied FROM rl_stats_rules WHERE lim = 300'), '24000|24000',
	'the rule\'s too');
is(sql(q{SELECT key, denied, error FROM rl_top_keys}), 'st:hot|24000|0',
	'the one denied key, exactly');
is(sql('SELECT calls = redis_calls + deny_cache_hits + fallback_calls + policy_answers FROM rl_stats'),
	't', 'each call has one source');

# --- the overflow rule row -------------------------------------------------
sql('SELECT rl_stats_reset()');
sql(q{SELECT rl_attempt('st:rule', n, '1 hour') FROM generate_series(1, 5) n});
is(sql(q{SELECT string_agg(coalesce(lim::text, 'overflow') || ':' || calls, ' ' ORDER BY lim NULLS LAST)
           FROM rl_stats_rules}),
	'1:1 2:1 3:1 overflow:2', 'three rules have rows; the other two share the overflow row');
sql(q{SELECT rl_attempt('st:rule', 5, '1 hour'), rl_attempt('st:rule', 1, '1 hour')});
is(sql(q{SELECT string_agg(coalesce(lim::text, 'overflow') || ':' || calls, ' ' ORDER BY lim NULLS LAST)
           FROM rl_stats_rules}),
	'1:2 2:1 3:1 overflow:3', 'a rule in the overflow stays there; a rule with a row keeps it');
is(sql('SELECT sum(calls) FROM rl_stats_rules'), sql('SELECT calls FROM rl_stats'),
	'no call is lost: the rule rows add up to rl_stats');
sql('SELECT rl_stats_reset()');
sql(q{SELECT rl_attempt('st:rule', 5, '1 hour')});
is(sql(q{SELECT string_agg(coalesce(lim::text, 'overflow') || ':' || calls, ' ') FROM rl_stats_rules}),
	'5:1', 'after a reset the rows are free again');

# --- top keys past track_keys ----------------------------------------------
# Ten keys with lim 1: key kN is denied N units (kT ten times more), fed in
# turn so that keys replace each other.
sql('SELECT rl_stats_reset()');
my %truth;
$truth{"k$_"} = $_ for 1 .. 9;
$truth{kT} = 40;
my @rounds;
for my $k (sort keys %truth)
{
	sql(qq{SELECT rl_attempt('st:$k', 1, '1 hour')});    # the admitted one
}
my $max = 40;
for my $i (1 .. $max)
{
	my @due = grep { $truth{$_} >= $i } sort keys %truth;
	sql(join(';', map { qq{SELECT rl_attempt('st:$_', 1, '1 hour')} } @due));
}
my $total = 0;
$total += $_ for values %truth;
is(sql('SELECT denied FROM rl_stats'), $total, "$total denials in all");
my @rows = split /\n/, sql(q{SELECT key, denied, error FROM rl_top_keys});
is(scalar @rows, 4, 'track_keys = 4: four keys kept');
my $ok = 1;
my %listed;
for my $row (@rows)
{
	my ($key, $denied, $error) = split /\|/, $row;
	$key =~ s/^st://;
	$listed{$key} = 1;
	my $true = $truth{$key};
	$ok = 0, diag("bad bound: $row (true $true)")
	  unless defined $true && $denied - $error <= $true && $true <= $denied;
}
ok($ok, 'every kept count is within [denied - error, denied] of the truth');
ok($listed{kT}, "kT, denied 40 > $total / 4 units, is kept");
is((split /\|/, $rows[0])[0], 'st:kT', 'and it comes first');
is(sql(q{SELECT count(*) FROM rl_top_keys WHERE error > 0}) > 0 ? 1 : 0, 1,
	'some counts carry an error: keys were replaced');

# --- Redis faults and latency ------------------------------------------------
sql('SELECT rl_stats_reset()');
sql(q{SELECT rl_attempt('st:lat' || i, 10, '1 hour') FROM generate_series(1, 200) i});
my ($p50, $p99) = split /\|/,
  sql(q{SELECT extract(epoch FROM redis_rtt_p50) * 1e6, extract(epoch FROM redis_rtt_p99) * 1e6 FROM rl_stats});
cmp_ok($p50, '<', 20000, "a quick Redis: p50 round trip ${p50} us");
# Four answers in 204 held up by CLIENT PAUSE: p99 moves, p50 not. The
# calls come from a session that is already connected (to PostgreSQL and,
# through a first call, to Redis), so each sees nearly all of its 300 ms
# pause however slowly a new session would start on a loaded machine.
{
	my $held = $node->background_psql('postgres');
	$held->query_safe(q{SET slidewin.command_timeout = '2s'});
	$held->query_safe(q{SELECT rl_attempt('st:warm', 10, '1 hour')});
	sql('SELECT rl_stats_reset()');
	sql(q{SELECT rl_attempt('st:lat' || i, 10, '1 hour') FROM generate_series(1, 200) i});
	for (1 .. 4)
	{
		$redis->pause_ms(300);
		$held->query_safe(qq{SELECT rl_attempt('st:slow$_', 10, '1 hour')});
	}
	$held->quit;
}
($p50, $p99) = split /\|/,
  sql(q{SELECT extract(epoch FROM redis_rtt_p50) * 1e6, extract(epoch FROM redis_rtt_p99) * 1e6 FROM rl_stats});
cmp_ok($p99, '>=', 50000, "after four held-up answers, p99 is ${p99} us");
cmp_ok($p50, '<', 20000, "and p50 is still ${p50} us");

sql('SELECT rl_stats_reset()');
$redis->freeze;
my $out = sql(q{SET slidewin.command_timeout = 100;
	SELECT allowed, store FROM rl_attempt('st:frozen', 10, '1 hour', 1, 'allow')});
$redis->thaw;
is($out, 't|none', 'a frozen Redis: the allow policy answers');
is(sql('SELECT redis_errors, redis_timeouts, policy_answers, breaker_trips FROM rl_stats'),
	'1|1|1|1', 'one error, a timeout, one policy answer, the breaker tripped');

# --- a crash restart -------------------------------------------------------
sql(q{SELECT rl_attempt('st:pre', 1, '1 hour') FROM generate_series(1, 3)});
my $before = sql('SELECT stats_reset FROM rl_stats');
isnt(sql('SELECT calls FROM rl_stats'), '0', 'counts before the crash');
my $bg = $node->background_psql('postgres');
my $pid = $bg->query_safe('SELECT pg_backend_pid()');
SlidewinTest::allow_log_line($node,
	"(PID $pid) was terminated by signal 9: Killed");
my $offset = -s $node->logfile;
kill 'KILL', $pid;
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
$node->wait_for_log(qr/database system is ready to accept connections/, $offset);
eval { $bg->quit };
is(sql(qq{SELECT calls, admitted, denied, redis_calls, redis_errors, redis_rtt_p50 IS NULL,
            stats_reset > '$before' FROM rl_stats}),
	'0|0|0|0|0|t|t', 'after the crash: every counter is zero, and stats_reset is new');
is(sql('SELECT count(*) FROM rl_stats_rules'), '0', 'no rule rows');
is(sql('SELECT count(*) FROM rl_top_keys'), '0', 'no top keys');
sql(q{SELECT rl_attempt('st:post', 1, '1 hour') FROM generate_series(1, 3)});
is(sql('SELECT calls, admitted, denied FROM rl_stats'), '3|1|2', 'and they count again from there');
is(sql(q{SELECT key, denied FROM rl_top_keys}), 'st:post|2', 'top keys too');

# --- without preloading ----------------------------------------------------
my $plain = SlidewinTest::new_node('stats_plain', $redis);
for my $view (qw(rl_stats rl_stats_rules rl_top_keys))
{
	my ($ret, $o, $err) = $plain->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT * FROM $view");
	like($err, qr/55000: slidewin statistics need the library to be preloaded/,
		"$view without preloading: SQLSTATE 55000");
	like($err, qr/HINT:  Add slidewin to shared_preload_libraries/, "$view: the hint says what to do");
}
is($plain->safe_psql('postgres', q{SELECT allowed FROM rl_attempt('st:plain', 1, '1 hour')}),
	't', 'rl_attempt works without preloading');

done_testing();
