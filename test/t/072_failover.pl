# Failing over, for a single Redis address (no Sentinel): the server behind
# slidewin.redis_url turns into a replica, then is promoted again.
#
#  - While it is a replica, a call that must write gets READONLY, a "not
#    now" reply: the call follows its failure policy (fallback, allow, deny,
#    or 08006 under error, with the reply in DETAIL).  No call hangs or
#    fails for another reason.
#  - Once promoted, Redis answers again at the next call; the keys are what
#    the promoted server holds (here: its primary's empty data set, so the
#    counts start from empty, as the README says of a failover to a replica
#    that was behind).
#  - FLUSHALL (Redis loses its data): the next call of a new session counts
#    from empty; a backend that had cached a denial of the key keeps it until
#    that cached answer runs out, as for a reset made elsewhere.
#  - LOADING (a server still reading its data set at start-up) is played by
#    the fake server, since a real one loads too fast to be caught: it is a
#    "not now" reply too.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest qw(sqlstate);
use FakeRedis;

my $redis = SlidewinTest::start_redis();
my $other = SlidewinTest::start_redis();
my $node = SlidewinTest::new_node('failover', $redis,
	[ "shared_preload_libraries = 'slidewin'", 'slidewin.redis_retry_interval = 0' ]);

my $s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('\set VERBOSITY verbose');

sub run_sql { return SlidewinTest::session_sql($s, @_) }

# allowed|store|remaining of one rl_attempt under $policy
sub attempt
{
	my ($key, $policy) = @_;
	return run_sql(qq{SELECT allowed, store, remaining
	                  FROM rl_attempt('$key', 10, '1 hour', 1, '$policy')});
}

my ($out, $err) = attempt('fo', 'error');
is($out, 't|redis|9', 'Redis admits while it is a primary');
is($err, '', 'without an error');

# Demote: the server at slidewin's address becomes a replica of another.
is($redis->cli('replicaof', '127.0.0.1', $other->port), 'OK', 'REPLICAOF');
my $synced = 0;
for (1 .. 100)
{
	if ($redis->cli('info', 'replication') =~ /master_link_status:up/)
	{
		$synced = 1;
		last;
	}
	select(undef, undef, undef, 0.1);
}
ok($synced, 'the replica is in sync with its primary');
my ($set_out, $set_err) = $redis->cli('set', 'probe', 'x');
like("$set_out $set_err", qr/READONLY/, 'a plain write now gets READONLY');

# The fallback store starts from the unit Redis counted (1.8, exact across
# an outage): 8 remain, not 9.
($out, $err) = attempt('fo', 'fallback');
is($out, 't|fallback|8', 'READONLY, policy fallback: the fallback store answers, from what Redis counted');
is($err, '', 'READONLY, policy fallback: no error');
($out, $err) = attempt('fo', 'allow');
is($out, 't|none|', 'READONLY, policy allow: allowed, no store');
($out, $err) = attempt('fo', 'deny');
is($out, 'f|none|', 'READONLY, policy deny: denied, no store');
($out, $err) = attempt('fo', 'error');
is(sqlstate($err), '08006', 'READONLY, policy error: 08006');
like($err, qr/DETAIL:\s+READONLY/, 'READONLY, policy error: DETAIL carries the reply');

# Promote it again.
is($redis->cli('replicaof', 'no', 'one'), 'OK', 'REPLICAOF NO ONE');
# The promoted server holds nothing of the key; the fallback store's
# admission is carried into it before it decides: 2 used, 8 remain.
($out, $err) = attempt('fo', 'error');
is($out, 't|redis|8', 'promoted: Redis answers at the next call, from what it holds (empty) and the fallback admission carried back');
is($err, '', 'promoted: no error');
($out, $err) = attempt('fo', 'error');
is($out, 't|redis|7', 'and counts on');

# FLUSHALL.  s fills a key and caches its denial.
($out, $err) = run_sql(q{SELECT string_agg((rl_attempt('fl', 2, '1 hour')).allowed::text, ',')
                         FROM generate_series(1, 3)});
is($out, 'true,true,false', 'lim 2: 2 admitted, then denied');
is($redis->cli('flushall'), 'OK', 'FLUSHALL');
is($redis->cli('dbsize'), '0', 'Redis is empty');
my $scripts = sub {
	my $n = 0;
	for my $line (split /\n/, $redis->cli('INFO', 'commandstats'))
	{
		$n += $1 - $2
		  if $line =~ /^cmdstat_(?:eval(?:sha)?|fcall):calls=(\d+),.*failed_calls=(\d+)/;
	}
	return $n;
};
my $before = $scripts->();
($out, $err) = run_sql(q{SELECT allowed, store FROM rl_attempt('fl', 2, '1 hour')});
is($out, 'f|redis', 'the session that cached a denial before FLUSHALL is still denied');
is($scripts->() - $before, 0, 'from its cache: Redis was not asked');
is($node->safe_psql('postgres', q{SELECT allowed, remaining, store FROM rl_attempt('fl', 2, '1 hour')}),
	't|1|redis', 'after FLUSHALL a new session counts from empty');
# That admission was made on this server, so it voids the cached denial.
($out, $err) = run_sql(q{SELECT allowed, remaining FROM rl_attempt('fl', 2, '1 hour')});
is($out, 't|0', "an admission in another backend of this server ends the cached denial");
$s->quit;

# LOADING, from the fake server.
my $fake = FakeRedis->start;
my $fnode = SlidewinTest::new_node('loading', $fake->port, 'slidewin.redis_retry_interval = 0');
$s = $fnode->background_psql('postgres', on_error_stop => 0);
$s->query_safe('\set VERBOSITY verbose');
my $loading = "-LOADING Redis is loading the dataset in memory\r\n";
$fake->script($loading);
($out, $err) = attempt('ld', 'fallback');
is($out, 't|fallback|9', 'LOADING, policy fallback: the fallback store answers');
is($err, '', 'LOADING, policy fallback: no error');
($out, $err) = attempt('ld', 'deny');
is($out, 'f|none|', 'LOADING, policy deny: denied, no store');
($out, $err) = attempt('ld', 'error');
is(sqlstate($err), '08006', 'LOADING, policy error: 08006');
like($err, qr/DETAIL:\s+LOADING/, 'LOADING, policy error: DETAIL carries the reply');
$s->quit;

for my $n ($node, $fnode)
{
	unlike(slurp_file($n->logfile), qr/PANIC|terminated by signal/, $n->name . ': no crash in the log');
}
done_testing();
