# rl_block through one PostgreSQL server, seen by another sharing the Redis.
#
# Two clusters, both preloading slidewin (so the deny cache is on), point at
# the same Redis.
#  - A block set on server A denies server B's calls on the key, in every
#    algorithm, in rl_attempt_multi and rl_peek, with a retry_after that
#    runs to the block's end; B records nothing meanwhile.
#  - B keeps a denial by a block in its deny cache (the next call does not
#    ask Redis), but for at most a second: an rl_unblock on A reaches B's
#    cached answer within that, not at the block's end an hour away.
#  - Redis gone: A's fallback store holds the blocks set through A; B's
#    holds none, but B still denies a key Redis had denied it for the block
#    (its known denials), for the rule it was denied under.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
my @conf  = ("shared_preload_libraries = 'slidewin'", 'slidewin.redis_retry_interval = 0');
my $a_node = SlidewinTest::new_node('block_a', $redis, \@conf);
my $b_node = SlidewinTest::new_node('block_b', $redis, \@conf);

# ---------------------------------------------------------------------
# A block set through A denies B's calls
# ---------------------------------------------------------------------
like($a_node->safe_psql('postgres', q{SELECT rl_block('ms:blk', '1 hour') - now()}),
	qr/^0?1:00:00|^00:59:59/, 'A: blocked for an hour');

my $algos = q{unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket'])};
is($b_node->safe_psql('postgres', qq{
	SELECT string_agg(format('%s:%s:%s:%s:%s', a, r.allowed, r.remaining, r.store,
	                         r.retry_after > '59 minutes'), ' ' ORDER BY a)
	  FROM $algos a, LATERAL rl_attempt('ms:blk', 5, '1 minute', 1, algorithm => a) r}),
	'fixed_window:f:0:redis:t sliding_counter:f:0:redis:t sliding_log:f:0:redis:t token_bucket:f:0:redis:t',
	'B: every algorithm denied by the block set on A, retry_after to its end');
is($b_node->safe_psql('postgres', q{
	SELECT allowed, remaining, store, retry_after > '59 minutes'
	  FROM rl_attempt_multi('ms:blk', ARRAY[5, 50], ARRAY['1 minute', '1 hour']::interval[])}),
	'f|0|redis|t', 'B: rl_attempt_multi denied by the block');
is($b_node->safe_psql('postgres', q{
	SELECT allowed, remaining, retry_after > '59 minutes' FROM rl_peek('ms:blk', 5, '1 minute')}),
	'f|0|t', 'B: rl_peek says the key is blocked');
is($redis->cli('EXISTS', 'slidewin:log:ms:blk', 'slidewin:fw:ms:blk', 'slidewin:sc:ms:blk',
		'slidewin:tb:ms:blk', 'slidewin:mlog:ms:blk'),
	'0', 'B recorded nothing in Redis while the key was blocked');

# ---------------------------------------------------------------------
# B's deny cache keeps a denial by a block for a second at most
# ---------------------------------------------------------------------
my $sb = $b_node->background_psql('postgres');
is($sb->query_safe(q{SELECT allowed FROM rl_attempt('ms:blk', 5, '1 minute')}), 'f',
	'B: denied by Redis');
my $n0 = $redis->scripts_run;
is($sb->query_safe(q{SELECT allowed FROM rl_attempt('ms:blk', 5, '1 minute')}), 'f',
	'B: denied again');
is($redis->scripts_run - $n0, 0, 'B: the second denial came from the deny cache, not Redis');

is($a_node->safe_psql('postgres', q{SELECT rl_unblock('ms:blk')}), 't', 'A: the block is lifted');
my $t0 = time;
my $admitted;
while (time - $t0 < 10)
{
	$admitted = $sb->query_safe(q{SELECT allowed FROM rl_attempt('ms:blk', 5, '1 minute')});
	last if $admitted eq 't';
	usleep(50_000);
}
my $took = time - $t0;
is($admitted, 't', 'B: admitted once A lifted the block');
cmp_ok($took, '<', 3, sprintf('B saw the rl_unblock of A within the deny cache bound (%.2f s)', $took));

# ---------------------------------------------------------------------
# Redis gone: each server's fallback store holds the blocks set through it
# ---------------------------------------------------------------------
$a_node->safe_psql('postgres', q{SELECT rl_block('ms:fb', '1 hour')});
is($sb->query_safe(q{SELECT allowed FROM rl_attempt('ms:fb', 5, '1 minute')}), 'f',
	'B: denied by Redis for the block');
$redis->stop;
is($a_node->safe_psql('postgres', q{
	SELECT allowed, store, retry_after > '59 minutes' FROM rl_attempt('ms:fb', 5, '1 minute', on_redis_error => 'fallback')}),
	'f|fallback|t', 'A, Redis gone: its fallback store holds the block');
is($a_node->safe_psql('postgres', q{
	SELECT allowed, store FROM rl_attempt('ms:fb', 5, '1 minute', algorithm => 'token_bucket', on_redis_error => 'fallback')}),
	'f|fallback', 'A, Redis gone: whatever the algorithm');
# (another backend of B: the first one would answer from its own cache)
is($b_node->safe_psql('postgres', q{
	SELECT allowed, store, retry_after > '59 minutes' FROM rl_attempt('ms:fb', 5, '1 minute', on_redis_error => 'fallback')}),
	'f|fallback|t', 'B, Redis gone: the denial Redis gave it for the block still holds');
is($b_node->safe_psql('postgres', q{
	SELECT allowed, store FROM rl_attempt('ms:fb', 7, '1 minute', on_redis_error => 'fallback')}),
	't|fallback', 'B, Redis gone: another rule is not denied (B\'s fallback store has no block)');
$sb->quit;

done_testing();
