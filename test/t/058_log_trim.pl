# The sliding log's trim, seen in Redis (on the test clock):
#  - a busy key holds its live entries and one base, never the entries that
#    have left the window (a script that skips the trim fails here);
#  - one entry leaving, a few (removed by name), many (removed by score),
#    all leaving;
#  - a log written in the earlier layout (its base a member scored -inf) is
#    read right and loses that member at its next trim;
#  - a ledger (refunds) is trimmed with its log, and its units still count.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
my $node = SlidewinTest::new_node('trim', $redis, [ 'slidewin.redis_retry_interval = 0' ]);

# Calls at T0 + ms, on the test clock; remaining as Redis answered. The
# script gives a key an expiry of about its window in Redis, which counts
# real time, and on a busy machine a second passed between two calls, or
# between the calls and the look at the log (the key was gone). So every
# time of this file is stretched by $scale: the window is 100 s of the test
# clock, a call "100 ms" after another comes 10 s after it on that clock,
# and the key outlives the file. What is tested is the layout of the log,
# which the stretch leaves as it is; a run of calls on a key still goes in
# one session (a new psql for each took seconds apiece on a busy machine).
my $scale = 100;
my $t0 = '2030-01-01 00:00:00+00';
# calls_at($key, $lim, [$ms, $cost], ...): the calls in one session, in
# order; returns each one's "allowed|remaining|store".
sub calls_at
{
	my ($key, $lim, @calls) = @_;
	my $sql = '';
	for my $c (@calls)
	{
		my ($ms, $cost) = @$c;
		$cost //= 1;
		$sql .= qq{SELECT set_config('slidewin.test_now', ('$t0'::timestamptz + interval '1 millisecond' * $ms * $scale)::text, false) \\g /dev/null
SELECT (r).allowed, (r).remaining, (r).store FROM rl_attempt('$key', $lim, '$scale seconds', $cost) r;
};
	}
	return split /\n/, $node->safe_psql('postgres', $sql);
}
sub call_at
{
	my ($key, $ms, $lim, $cost) = @_;
	return (calls_at($key, $lim, [ $ms, $cost ]))[0];
}
sub log_of { return [ split /\n/, scalar $redis->cli('zrange', "slidewin:log:$_[0]", '0', '-1', 'withscores') ] }
sub zcard { return $redis->cli('zcard', $_[0]) }
# T0 in Redis microseconds
my $us0 = $node->safe_psql('postgres', qq{SELECT (extract(epoch FROM '$t0'::timestamptz) * 1000000)::bigint});
# A score in the log: T0 + us of the unstretched clock.
sub at_us { return $us0 + $_[0] * $scale }

# A busy key: 40 calls 100 ms apart, window 1 s.
my $last = (calls_at('trim:busy', 1000, map { [ $_ * 100 ] } 0 .. 39))[-1];
is($last, 't|990|redis', 'busy key: ten units in the last second (remaining 990 of 1,000)');
my $log = log_of('trim:busy');
is(scalar(@$log) / 2, 11, 'busy key: ten live entries and one base in Redis, no more');
is($log->[1], at_us(2_900_000), 'the base is the newest entry that has left the window, as it was');
is($log->[0], '30', 'its member: the 30 units admitted before the window');

# Several leave at once: a burst of 30 one millisecond apart, then a call
# 1.015 s after the burst's start: 16 have left.
is((calls_at('trim:burst', 1000, (map { [ 10_000 + $_ ] } 0 .. 29), [11_015]))[-1], 't|985|redis',
	'burst: 14 still in the window, plus this call');
$log = log_of('trim:burst');
is(scalar(@$log) / 2, 16, 'burst: 15 live entries and one base');
is($log->[1], at_us(10_015_000), 'the base is the newest of the 16 that left');

# A few leave at once (removed by name, as one does on a busy key): six
# calls 1 ms apart, then a call 1.004 s after the first: five have left.
is((calls_at('trim:few', 1000, (map { [ 50_000 + $_ ] } 0 .. 5), [51_004]))[-1], 't|998|redis',
	'a few left: one still in the window, plus this call');
$log = log_of('trim:few');
is_deeply($log, [ '5', at_us(50_004_000), '6', at_us(50_005_000), '7', at_us(51_004_000) ],
	'a few left: the newest of them is the base, the other four are gone');

# Everything leaves: the log starts again.
is(call_at('trim:burst', 20_000, 1000), 't|999|redis', 'all left: one unit in the window');
is(zcard('slidewin:log:trim:burst'), '1', 'all left: the log holds the new entry alone');

# A log in the earlier layout: its base scored -inf (60 units before the
# window), then entries at T0 + 30.0 s, 30.5 s and 30.9 s of cost 1, 2, 3.
my $k = 'slidewin:log:trim:old';
$redis->cli('zadd', $k, '-inf', '60', at_us(30_000_000), '61', at_us(30_500_000), '63',
	at_us(30_900_000), '66');
$redis->cli('pexpire', $k, '600000000');
# at 31.2 s the first has left: 5 units in the window, then this call's 1
is(call_at('trim:old', 31_200, 10), 't|4|redis', 'earlier layout: read right (5 + 1 of 10)');
$log = log_of('trim:old');
is_deeply($log, [ '61', at_us(30_000_000), '63', at_us(30_500_000), '66', at_us(30_900_000),
		'67', at_us(31_200_000) ],
	'earlier layout: the -inf member is gone, the entry that left is the base');
is(call_at('trim:old', 31_250, 10, 5), 'f|4|redis', 'and a call of 5 is then denied (6 of 10 used)');

# A ledger: a refund at ROLLBACK, then the entries leave; the ledger is
# trimmed with the log and its units still count.
$node->safe_psql('postgres', qq{
	SELECT set_config('slidewin.test_now', ('$t0'::timestamptz + interval '1 second' * 40 * $scale)::text, false) \\g /dev/null
	BEGIN;
	SET LOCAL slidewin.refund_on_abort = on;
	SELECT rl_attempt('trim:led', 10, '$scale seconds', 3);
	ROLLBACK;});
is((calls_at('trim:led', 10, (map { [ 40_100 + $_ * 100 ] } 0 .. 3), [ 40_600, 6 ]))[-1], 't|0|redis',
	'ledger: the refunded 3 units do not count (4 + 6 of 10)');
is(call_at('trim:led', 41_450, 10, 1), 't|3|redis',
	'ledger: once the refunded entry and the next four have left, 6 + 1 of 10');
is(zcard('slidewin:log:trim:led'), '3', 'ledger key: its log holds its two live entries and one base');
is_deeply([ split /\n/, scalar $redis->cli('zrange', 'slidewin:logr:trim:led', '0', '-1', 'withscores') ],
	[ '3', '-inf' ], 'and its ledger only its base: the 3 units given back before the window');

done_testing();
