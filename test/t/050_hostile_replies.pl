# Replies no Redis running slidewin's scripts could give, from a fake server on
# loopback (test/perl/fake_redis.pl): the wrong type, the wrong length,
# malformed or endless RESP, fields out of range or at odds with each other,
# silence.  Each must end, within slidewin.command_timeout, in the call's
# failure policy or an ERROR (08P01 for a reply refused, 08006 for a timeout),
# never in an admission; the connection that carried it is dropped, and the
# backend survives.  A well-formed reply from the same server is believed,
# so the cases below fail for the reason they name, not because nothing
# works.  MISCONF ("cannot persist") is a "not now" reply like OOM.
#
# It talks to the fake server only: the Valkey pass leaves it out.
# slidewin: starts no Redis server
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use SlidewinTest qw(sqlstate);
use FakeRedis;

my $fake = FakeRedis->start;
my $node = SlidewinTest::new_node(
	'hostile',
	$fake->port,
	[
		"slidewin.command_timeout = '1s'",
		'slidewin.redis_retry_interval = 0',
	]);
my $timeout = 1.0;    # slidewin.command_timeout, in seconds
my $s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('\set VERBOSITY verbose');
my $pid0 = $s->query_safe('SELECT pg_backend_pid()');

my $ints = \&FakeRedis::ints;

sub run_sql { return SlidewinTest::session_sql($s, @_) }

# rl_attempt('h', 100, '1 hour', 1, policy): allowed|store|remaining
sub attempt
{
	my ($policy, $extra) = @_;
	$extra //= '';
	return run_sql(
		qq{SELECT (r).allowed, (r).store, (r).remaining
		   FROM rl_attempt('h', 100, '1 hour', 1, '$policy'$extra) r});
}

sub peek
{
	my ($policy) = @_;
	return run_sql(
		qq{SELECT (r).allowed, (r).store, (r).remaining
		   FROM rl_peek('h', 100, '1 hour', '$policy') r});
}

# A recorded entry's time (2030-03-17) and the one-hour window of the calls.
my $ts  = 1_900_000_000_000_000;
my $win = 3_600_000_000;

# Well-formed replies for rl_attempt('h', 100, '1 hour', 1): an admission
# (1 unit now used, 99 left) and a denial (100 used, retry in 5 s).
# The last field (1.11), next_us, is when the window next frees a unit:
# for the admission, its own entry leaving; for the denial, the oldest.
my @admit = (1, 99, 0, $ts + $win, 1, $ts, 0, $ts + $win);
my @deny  = (0, 0, 5_000_000, $ts + $win, 100, -1, 4_000_000, $ts + 4_000_000);

sub with
{
	my ($base, %set) = @_;
	my @v = @$base;
	my %at = (allowed => 0, remaining => 1, retry_after => 2, reset_at => 3,
		used => 4, recorded => 5, stable_us => 6, next_us => 7);
	$v[ $at{$_} ] = $set{$_} foreach keys %set;
	return $ints->(@v);
}

# ---------------------------------------------------------------------
# The same server, telling the truth, is believed.
# ---------------------------------------------------------------------
my ($out, $err, $dt);

$fake->script($ints->(@admit));
($out, $err) = attempt('error');
is($out, 't|redis|99', 'a well-formed admission from the fake server is believed');
is($err, '', 'no error for a well-formed admission');

$fake->script($ints->(@deny));
($out, $err) = run_sql(
	q{SELECT (r).allowed, (r).store, (r).remaining, (r).retry_after
	  FROM rl_attempt('h', 100, '1 hour', 1, 'error') r});
is($out, 'f|redis|0|00:00:05', 'a well-formed denial is believed, retry_after included');

# The short form of an admission, {remaining, recorded, next_us}: the other
# fields follow from it (reset_at = recorded + window).
$fake->script($ints->(99, $ts, $ts + $win));
($out, $err) = run_sql(
	q{SELECT (r).allowed, (r).store, (r).remaining, (r).retry_after,
	         (extract(epoch FROM (r).reset_at) * 1000000)::bigint
	  FROM rl_attempt('h', 100, '1 hour', 1, 'error') r});
is($out, 't|redis|99|00:00:00|' . ($ts + $win), 'the short form of an admission is believed, reset_at = recorded + window');
is($err, '', 'no error for the short form');

# Calls recorded in shadow mode, or under a larger limit, can leave more units
# in the window than this call's limit: a denial may report them.
$fake->script(with(\@deny, used => 105));
($out, $err) = attempt('error');
is($out, 'f|redis|0', 'a denial reporting more units used than the limit is believed');

# Shadow mode: a call recorded over the limit reports used above lim and a
# recorded time; that is what the script returns when forced.
$fake->script(
	with(\@deny, used => 101, recorded => $ts, stable_us => 0));
($out, $err) = run_sql(
	q{SET slidewin.enforce = off;
	  SELECT (r).allowed, (r).store FROM rl_attempt('h', 100, '1 hour', 1, 'error') r;
	  RESET slidewin.enforce});
is($out, 't|redis', 'shadow mode: a forced record over the limit is believed');
is($err, '', 'shadow mode: no error');
($out, $err) = attempt('error');
is(sqlstate($err), '08P01', 'the same reply to a call that was not forced is refused');
like($err, qr/DETAIL:\s+Field "recorded" of the sliding_log attempt reply is $ts, but it must be -1/,
	'... because it claims to have recorded a denied call');

# A key blocked by rl_block: allowed = 2, nothing left, whatever the units
# used, and a retry_after that may outlast the window.
$fake->script(with(\@deny, allowed => 2, used => 1, retry_after => 2 * $win,
	stable_us => 2 * $win));
($out, $err) = run_sql(
	q{SELECT (r).allowed, (r).store, (r).remaining, (r).retry_after
	  FROM rl_attempt('h', 100, '1 hour', 1, 'error') r});
is($out, 'f|redis|0|02:00:00', 'a well-formed denial by a block is believed, longer than the window');
is($err, '', 'a denial by a block: no error');

# ---------------------------------------------------------------------
# Each hostile reply, under each policy.
# ---------------------------------------------------------------------

# [ name, reply, DETAIL pattern, SQLSTATE under the error policy ]
my $denied_by = 'the sliding_log attempt reply';
my @cases = (
	[ 'a status reply', "+OK\r\n",
		qr/The sliding_log attempt reply is a status reply, not an array of 8 integers\./ ],
	[ 'a bulk string', "\$2\r\nok\r\n", qr/reply is a bulk string, not an array/ ],
	[ 'a nil', "\$-1\r\n", qr/reply is a nil, not an array/ ],
	[ 'a nil array', "*-1\r\n", qr/reply is a nil, not an array/ ],
	[ 'an integer', ":1\r\n", qr/reply is an integer, not an array/ ],
	[ 'an empty array', "*0\r\n", qr/reply has 0 elements, not 8 \(or 3 for an admission\)\./ ],
	[ 'a short array', $ints->(@admit[0 .. 6]), qr/reply has 7 elements, not 8 \(or 3 for an admission\)\./ ],
	[ 'an array too long', $ints->(@admit, 0), qr/reply has 9 elements, not 8 \(or 3 for an admission\)\./ ],
	[ 'an absurd array length', "*999999999999\r\n",
		qr/malformed reply from Redis at 127\.0\.0\.1:\d+: Multi-bulk length out of range/ ],
	[ 'an array of 100 million', "*100000000\r\n",
		qr/oversized reply from Redis at .*: it announces more than 262144 array elements/ ],
	[ 'a negative bulk length', "*8\r\n\$-5\r\n", qr/malformed reply from Redis.*Bulk string length out of range/ ],
	# hiredis 0.14 refuses more than 7 levels itself; 1.x reads them, and the
	# reply's shape check refuses what it read.
	[ 'nesting too deep', ("*1\r\n" x 9) . ":1\r\n",
	  qr/malformed reply from Redis.*nested multi bulk replies with depth > 7|The sliding_log attempt reply has 1 elements, not 8 \(or 3 for an admission\)\./ ],
	[ 'nested arrays as fields', "*8\r\n" . ("*1\r\n:1\r\n" x 8), qr/Field "allowed" of the sliding_log attempt reply is an array, not an integer\./ ],
	[ 'an HTTP answer', "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
		qr/malformed reply from Redis.*Protocol error, got "H" as reply type byte/ ],
	[ 'binary garbage', "\x00\xff\xfe\x01garbage\r\n", qr/malformed reply from Redis.*Protocol error/ ],
	[ 'an integer too large', "*8\r\n:99999999999999999999999\r\n", qr/malformed reply from Redis.*Bad integer value/ ],
	[ 'strings where integers belong', "*8\r\n" . join('', map { "\$1\r\n$_\r\n" } 1, 9, 0, 1, 1, 1, 0, 1),
		qr/Field "allowed" of the sliding_log attempt reply is a bulk string, not an integer\./ ],
	[ 'a status where an integer belongs', "*8\r\n:1\r\n+99\r\n:0\r\n:1\r\n:1\r\n:1\r\n:0\r\n:1\r\n",
		qr/Field "remaining" of the sliding_log attempt reply is a status reply, not an integer\./ ],
	[ 'a nil where an integer belongs', "*8\r\n:1\r\n:99\r\n:0\r\n\$-1\r\n:1\r\n:1\r\n:0\r\n:1\r\n",
		qr/Field "reset_at" of the sliding_log attempt reply is a nil, not an integer\./ ],
	[ 'the example of the issue', $ints->(1, -5, -1, -9, -1, -1, -1, -1),
		qr/Field "remaining" of the sliding_log attempt reply is -5, but it must be between 0 and 100\./ ],
	[ 'allowed = 3', with(\@admit, allowed => 3), qr/Field "allowed" .* is 3, but it must be 0, 1 or 2\./ ],
	[ 'allowed = -1', with(\@admit, allowed => -1), qr/Field "allowed" .* is -1, but it must be 0, 1 or 2\./ ],
	[ 'blocked, units left', with(\@admit, allowed => 2, retry_after => 7, recorded => -1, stable_us => 7),
		qr/Field "remaining" .* is 99, but it must be 0 when the key is blocked\./ ],
	[ 'blocked, retry_after 0', with(\@deny, allowed => 2, retry_after => 0),
		qr/Field "retry_after" .* is 0, but it must be positive when the call is denied\./ ],
	[ 'blocked, recorded', with(\@deny, allowed => 2, recorded => $ts),
		qr/Field "recorded" .* is $ts, but it must be -1 when nothing was recorded\./ ],
	[ 'remaining above the limit', with(\@admit, remaining => 101), qr/Field "remaining" .* is 101, but it must be between 0 and 100\./ ],
	[ 'admitted, remaining at odds with used', with(\@admit, remaining => 50),
		qr/Field "remaining" .* is 50, but with 1 units used it must be 99\./ ],
	[ 'admitted with a retry_after', with(\@admit, retry_after => 7), qr/Field "retry_after" .* is 7, but it must be 0 when the call is admitted\./ ],
	[ 'admitted with a negative retry_after', with(\@admit, retry_after => -1), qr/Field "retry_after" .* is -1, but it must be 0/ ],
	[ 'admitted over the limit', with(\@admit, remaining => 0, used => 101),
		qr/Field "used" .* is 101, but it must be at most 100 when the call is admitted\./ ],
	[ 'admitted, used not counting the call', with(\@admit, remaining => 100, used => 0),
		qr/Field "used" .* is 0, but it must include the 1 units recorded\./ ],
	[ 'admitted with negative used', with(\@admit, used => -5), qr/Field "used" .* is -5, but it must not be negative\./ ],
	[ 'admitted, nothing recorded', with(\@admit, recorded => -1), qr/Field "recorded" .* is -1, but it must be the time of the entry recorded/ ],
	[ 'admitted, recorded negative', with(\@admit, recorded => -5), qr/Field "recorded" .* is -5, but it must be the time of the entry recorded/ ],
	[ 'admitted, reset_at not recorded + window', with(\@admit, reset_at => $ts),
		qr/Field "reset_at" .* is $ts, but it must be the recorded time plus the window/ ],
	[ 'reset_at negative', with(\@admit, reset_at => -5), qr/Field "reset_at" .* is -5, but it must be the recorded time plus the window/ ],
	[ 'denied, reset_at before any timestamp', with(\@deny, reset_at => '-9223372036854775807'),
		qr/Field "reset_at" .* is -9223372036854775807, but it is not a valid time\./ ],
	[ 'admitted with a stable_us', with(\@admit, stable_us => 5), qr/Field "stable_us" .* is 5, but it must be 0 when the call was recorded\./ ],
	[ 'admitted, stable_us negative', with(\@admit, stable_us => -1), qr/Field "stable_us" .* is -1, but it must be 0/ ],
	[ 'admitted, next_us not a time', with(\@admit, next_us => -5),
		qr/Field "next_us" .* is -5, but it must be a valid time after now\./ ],
	[ 'denied, next_us after the window empties', with(\@deny, next_us => $ts + $win + 1),
		qr/Field "next_us" .* is @{[ $ts + $win + 1 ]}, but it must be at most reset_at, @{[ $ts + $win ]}\./ ],
	[ 'the short admission, next_us 0', $ints->(99, $ts, 0),
		qr/Field "next_us" .* is 0, but it must be a valid time after now\./ ],
	[ 'the short admission, nothing used', $ints->(100, $ts, $ts + $win),
		qr/Field "used" .* is 0, but it must include the 1 units recorded\./ ],
	[ 'the short admission, remaining negative', $ints->(-1, $ts, $ts + $win),
		qr/Field "remaining" .* is -1, but it must be between 0 and 100\./ ],
	[ 'the short admission, nothing recorded', $ints->(99, -1, $ts + $win),
		qr/Field "recorded" .* is -1, but it must be the time of the entry recorded/ ],
	[ 'the short admission, recorded at the end of time', $ints->(99, '9223372036854775807', $ts + $win),
		qr/Field "recorded" .* is 9223372036854775807, but the window after it would end past the last valid time\./ ],
	[ 'the short admission, a string', "*3\r\n\$2\r\n99\r\n:$ts\r\n:$ts\r\n",
		qr/Field "remaining" of the sliding_log attempt reply is a bulk string, not an integer\./ ],
	[ 'denied, retry_after 0', with(\@deny, retry_after => 0), qr/Field "retry_after" .* is 0, but it must be positive when the call is denied\./ ],
	[ 'denied, retry_after negative', with(\@deny, retry_after => -5), qr/Field "retry_after" .* is -5, but it must be positive/ ],
	[ 'denied, remaining negative', with(\@deny, remaining => -5), qr/Field "remaining" .* is -5, but it must be between 0 and 100\./ ],
	[ 'denied, used negative', with(\@deny, used => -5), qr/Field "used" .* is -5, but it must not be negative\./ ],
	[ 'denied although the call fits', with(\@deny, remaining => 50, used => 50),
		qr/Field "used" .* is 50, but then a call of 1 units fits in the limit of 100 and is admitted\./ ],
	[ 'denied, stable_us negative', with(\@deny, stable_us => -5), qr/Field "stable_us" .* is -5, but it must be between 1 and retry_after/ ],
	[ 'denied, stable_us beyond retry_after', with(\@deny, stable_us => 5_000_001), qr/Field "stable_us" .* is 5000001, but it must be between 1 and retry_after, 5000000\./ ],
	[ 'denied, recorded negative', with(\@deny, recorded => -5), qr/Field "recorded" .* is -5, but it must be -1 when nothing was recorded\./ ],
	[ 'an absurd bulk length, then nothing', "\$99999999999\r\n", qr/timed out waiting for Redis/, '08006' ],
	[ 'an endless bulk string', { stream => "\$99999999999\r\n", chunk => 'x' x 4096 },
		qr/oversized reply from Redis at .*: \d+ bytes received and the reply is not complete/ ],
	[ 'an endless array', { stream => "*200000\r\n", chunk => "*1\r\n:1\r\n" },
		qr/oversized reply from Redis at .*: it announces more than 262144 array elements/ ],
	[ 'silence', { silence => 1 }, qr/timed out waiting for Redis/, '08006' ],
);

foreach my $case (@cases)
{
	my ($name, $reply, $detail, $state) = @$case;
	$state //= '08P01';
	my $slow = $state eq '08006';
	$fake->script($reply);
	$fake->mark;

	($out, $err, $dt) = attempt('error');
	is(sqlstate($err), $state, "$name, policy error: SQLSTATE $state");
	like($err,
		$slow ? qr/ERROR:.*slidewin could not reach Redis/
		: qr/ERROR:.*slidewin received an invalid reply from Redis/,
		"$name, policy error: message");
	like($err, qr/DETAIL:\s+.*$detail/, "$name, policy error: DETAIL names the cause");
	is($out, '', "$name, policy error: no row");
	if ($slow)
	{
		cmp_ok($dt, '>=', $timeout * 0.95, sprintf('%s: waited for command_timeout (%.3f s)', $name, $dt));
		cmp_ok($dt, '<', $timeout + 1, sprintf('%s: and no longer (%.3f s)', $name, $dt));
	}
	else
	{
		cmp_ok($dt, '<', $timeout, sprintf('%s: refused before command_timeout (%.3f s)', $name, $dt));
	}

	($out, $err, $dt) = attempt('fallback');
	is($out, 't|fallback|99', "$name, policy fallback: decided by the fallback store");
	is($err, '', "$name, policy fallback: no error");
	cmp_ok($dt, '<', $timeout + 1, sprintf('%s, policy fallback: %.3f s', $name, $dt));

	($out, $err) = attempt('deny');
	is($out, 'f|none|', "$name, policy deny: denied");

	# Every call reached the server, each on a connection of its own: the
	# connection that carried the reply was not used again.
	my @conns = $fake->script_connections;
	is(scalar(@conns), 3, "$name: each of the 3 calls sent its script");
	my %distinct = map { $_ => 1 } @conns;
	is(scalar(keys %distinct), 3, "$name: each call on a new connection (@conns)");

	run_sql(q{SELECT rl_reset('h')});    # empties the fallback store
}

# The allow policy admits, but says that no store was asked.
$fake->script($ints->(1, -5, -1, -9, -1, -1, -1, -1));
($out, $err) = attempt('allow');
is($out, 't|none|', 'the example of the issue, policy allow: admitted by the policy, store none');

# ---------------------------------------------------------------------
# Other scripts: rl_peek, the counting algorithms, rl_attempt_multi.
# ---------------------------------------------------------------------
$fake->script($ints->(1, 100, 0, $ts, 0, -1, $ts + $win));
($out, $err) = peek('error');
is($out, 't|redis|100', 'rl_peek: a well-formed reply is believed');

foreach my $case (
	[ 'eight fields', $ints->(1, 100, 0, $ts, 0, -1, 0, $ts), qr/The sliding_log peek reply has 8 elements, not 7\./ ],
	[ 'six fields, no next_us', $ints->(1, 100, 0, $ts, 0, -1), qr/The sliding_log peek reply has 6 elements, not 7\./ ],
	[ 'remaining negative', $ints->(1, -5, 0, $ts, 0, -1, $ts), qr/Field "remaining" of the sliding_log peek reply is -5/ ],
	[ 'a recorded entry', $ints->(1, 100, 0, $ts, 0, $ts, $ts), qr/Field "recorded" of the sliding_log peek reply is $ts, but it must be -1/ ],
	[ 'admitted with nothing left', $ints->(1, 0, 0, $ts, 100, -1, $ts), qr/Field "remaining" .* is 0, but it must be at least 1 when a call would be admitted\./ ],
	[ 'a status reply', "+QUEUED\r\n", qr/The sliding_log peek reply is a status reply/ ])
{
	my ($name, $reply, $detail) = @$case;
	$fake->script($reply);
	($out, $err, $dt) = peek('error');
	is(sqlstate($err), '08P01', "rl_peek, $name: 08P01");
	like($err, qr/DETAIL:\s+$detail/, "rl_peek, $name: DETAIL");
	cmp_ok($dt, '<', $timeout, sprintf('rl_peek, %s: %.3f s', $name, $dt));
	($out, $err) = peek('fallback');
	is($out, 't|fallback|100', "rl_peek, $name, policy fallback: the fallback store answers");
	($out, $err) = peek('deny');
	is($out, 'f|none|', "rl_peek, $name, policy deny: denied");
}

sub algo
{
	my ($algorithm, $policy) = @_;
	return run_sql(
		qq{SELECT (r).allowed, (r).store, (r).remaining
		   FROM rl_attempt('h', 100, '1 hour', 1, '$policy', NULL, '$algorithm') r});
}

$fake->script($ints->(1, 99, 0, $ts, 1, -1, $ts));
($out, $err) = algo('fixed_window', 'error');
is($out, 't|redis|99', 'fixed_window: a well-formed reply is believed');
foreach my $algorithm (qw(fixed_window sliding_counter token_bucket))
{
	$fake->script($ints->(99, $ts, 1, $ts));
	($out, $err) = algo($algorithm, 'error');
	is($out, 't|redis|99', "$algorithm: the short form of an admission is believed");
}
foreach my $case (
	[ 'fixed_window', 'the sliding_log shape', $ints->(@admit), qr/The fixed_window attempt reply has 8 elements, not 7 \(or 4 for an admission\)\./ ],
	[ 'token_bucket', 'the short admission of 1.10, without next_us', $ints->(99, $ts, 1),
		qr/The token_bucket attempt reply has 3 elements, not 7 \(or 4 for an admission\)\./ ],
	[ 'fixed_window', 'the short admission, remaining above what is left', $ints->(100, $ts, 1, $ts),
		qr/Field "remaining" of the fixed_window attempt reply is 100, but with 1 units used it must be 99\./ ],
	[ 'fixed_window', 'the short admission, a string', "*4\r\n:99\r\n\$2\r\n17\r\n:1\r\n:$ts\r\n",
		qr/Field "reset_at" of the fixed_window attempt reply is a bulk string, not an integer\./ ],
	[ 'sliding_counter', 'the short admission, nothing used', $ints->(99, $ts, 0, $ts),
		qr/Field "used" of the sliding_counter attempt reply is 0, but it must include the 1 units recorded\./ ],
	[ 'token_bucket', 'the short admission, reset_at invalid', $ints->(99, '-9223372036854775807', 1, $ts),
		qr/Field "reset_at" of the token_bucket attempt reply is -9223372036854775807, but it is not a valid time\./ ],
	[ 'fixed_window', 'retry_after beyond the window', $ints->(0, 0, $win + 1, $ts, 100, -1, $ts),
		qr/Field "retry_after" of the fixed_window attempt reply is 3600000001, but it must be at most the window/ ],
	[ 'fixed_window', 'a recorded entry', $ints->(1, 99, 0, $ts, 1, $ts, $ts), qr/Field "recorded" .* must be -1/ ],
	[ 'sliding_counter', 'retry_after beyond two windows', $ints->(0, 0, 2 * $win + 1, $ts, 100, -1, $ts),
		qr/Field "retry_after" of the sliding_counter attempt reply is 7200000001, but it must be at most two windows/ ],
	[ 'token_bucket', 'remaining above the limit', $ints->(1, 101, 0, $ts, 1, -1, $ts),
		qr/Field "remaining" of the token_bucket attempt reply is 101/ ])
{
	my ($algorithm, $name, $reply, $detail) = @$case;
	$fake->script($reply);
	($out, $err) = algo($algorithm, 'error');
	is(sqlstate($err), '08P01', "$algorithm, $name: 08P01");
	like($err, qr/DETAIL:\s+$detail/, "$algorithm, $name: DETAIL");
	($out, $err) = algo($algorithm, 'fallback');
	is($out, 't|fallback|99', "$algorithm, $name, policy fallback: the fallback store answers");
	run_sql(q{SELECT rl_reset('h')});
}

sub multi
{
	my ($policy) = @_;
	return run_sql(
		qq{SELECT (r).allowed, (r).store, (r).remaining, (r).lim
		   FROM rl_attempt_multi('h', '{10,100}', '{1 second,1 hour}', 1, '$policy') r});
}
# The seventh field names the deciding window (1.6): its limit is the row's.
# The eighth (1.11) is when the tightest window next frees a unit.
$fake->script($ints->(1, 9, 0, $ts + $win, 1, $ts, 1, $ts + 1_000_000));
($out, $err) = multi('error');
is($out, 't|redis|9|10', 'rl_attempt_multi: a well-formed reply is believed');
$fake->script($ints->(1, 9, 0, $ts + $win, 1, $ts, 2, $ts + 1_000_000));
($out, $err) = multi('error');
is($out, 't|redis|9|100', 'rl_attempt_multi: the deciding window the reply names');
$fake->script($ints->(1, 9, 0, $ts + $win, 1, $ts, 3, $ts + 1_000_000));
($out, $err) = multi('error');
like($err, qr/DETAIL:\s+Field "window" of the multi attempt reply is 3, but it must be between 1 and 2\./,
	'rl_attempt_multi: a window that was not asked about is refused');
$fake->script($ints->(1, 9, 0, $ts + $win, 1, $ts, $ts + 1_000_000));
($out, $err) = multi('error');
like($err, qr/DETAIL:\s+The multi attempt reply has 7 elements, not 8\./,
	'rl_attempt_multi: a reply without the deciding window is refused');
$fake->script($ints->(1, 11, 0, $ts + $win, 1, $ts, 1, $ts + 1_000_000));
($out, $err) = multi('error');
like($err, qr/DETAIL:\s+Field "remaining" of the multi attempt reply is 11, but it must be between 0 and 10\./,
	'rl_attempt_multi: remaining above the smallest limit is refused');
$fake->script($ints->(1, 9, 0, $ts + 1_000_000, 1, $ts, 1, $ts + 1_000_000));
($out, $err) = multi('error');
like($err, qr/DETAIL:\s+Field "reset_at" of the multi attempt reply .* plus the window, 1900003600000000\./,
	'rl_attempt_multi: reset_at must follow the longest window');
($out, $err) = multi('fallback');
is($out, 't|fallback|9|10', 'rl_attempt_multi, policy fallback: the fallback store answers');
run_sql(q{SELECT rl_reset('h')});

# ---------------------------------------------------------------------
# rl_reset checks the reply to DEL.
# ---------------------------------------------------------------------
$fake->del(":1\r\n");
($out, $err) = run_sql(q{SET slidewin.on_redis_error = 'error'; SELECT rl_reset('h')});
is($err, '', 'rl_reset: DEL answering 1 is fine');
# fifteen keys: one per algorithm, the refund ledgers of the two logs, the
# names of the carried fallback admissions of the four algorithms
# rl_attempt takes (the sliding log and the three counting ones), the
# reservations of the three counting algorithms (Cluster, over several
# slots), and the waiting mark of the sliding log's local batches
$fake->del(":15\r\n");
($out, $err) = run_sql(q{SET slidewin.on_redis_error = 'error'; SELECT rl_reset('h')});
is($err, '', 'rl_reset: DEL answering 15 is fine');
foreach my $case (
	[ "+OK\r\n", qr/The reply to DEL is a status reply, not an integer\./ ],
	[ ":-1\r\n", qr/The reply to DEL is -1, but it must be between 0 and 15\./ ],
	[ ":16\r\n", qr/The reply to DEL is 16, but it must be between 0 and 15\./ ],
	[ "*1\r\n:1\r\n", qr/The reply to DEL is an array, not an integer\./ ])
{
	my ($reply, $detail) = @$case;
	$fake->del($reply);
	$fake->mark;
	($out, $err) = run_sql(q{SELECT rl_reset('h')});
	is(sqlstate($err), '08P01', "rl_reset, DEL answering " . ($reply =~ s/\r\n/ /gr) . ": 08P01 under policy error");
	like($err, qr/DETAIL:\s+$detail/, 'rl_reset: DETAIL names the reply');
	($out, $err) = run_sql(
		q{SET slidewin.on_redis_error = 'fallback'; SELECT rl_reset('h');
		  SET slidewin.on_redis_error = 'error'});
	like($err, qr/WARNING:\s+08006: the Redis entries of the key were not cleared/,
		'rl_reset under policy fallback: a warning that Redis was not cleared');
	like($err, qr/DETAIL:\s+$detail/, 'rl_reset warning: DETAIL names the reply');
	is($fake->count('DEL'), 2, 'rl_reset: both calls sent DEL');
}
run_sql(q{RESET slidewin.on_redis_error});
$fake->del(":0\r\n");

# ---------------------------------------------------------------------
# A refund's reply is checked too; a refund never raises an ERROR.  Refunds
# are sent by the abort on the connection the attempt used, without waiting;
# their replies are read before the backend's next command
# (rl_backend_stats() settles them), where a refused one is a WARNING and
# counts as dropped.
# ---------------------------------------------------------------------
sub refund_round
{
	my ($refund_reply) = @_;
	$fake->script($ints->(@admit), $refund_reply);
	$fake->mark;
	my ($before) = run_sql(q{SELECT refunded, refunds_dropped FROM rl_backend_stats()});
	my ($o, $e) = run_sql(
		qq{BEGIN;
		   SELECT (r).allowed, (r).store FROM rl_attempt('h', 100, '1 hour', 1, 'error', true) r;
		   ROLLBACK});
	my ($after, $e2) = run_sql(q{SELECT refunded, refunds_dropped FROM rl_backend_stats()});
	my @b = split /\|/, $before;
	my @a = split /\|/, $after;
	unlike($e, qr/ERROR/, 'refund: no ERROR from the ROLLBACK');
	cmp_ok($fake->count('EVALSHA') + $fake->count('EVAL'), '>=', 2,
		'refund: the attempt and the refund reached the server');
	return ($o, $e . $e2, $a[0] - $b[0], $a[1] - $b[1]);
}
my ($refunded, $dropped);
($out, $err, $refunded, $dropped) = refund_round(":1\r\n");
is($out, 't|redis', 'refund: the admission was believed');
is($err, '', 'refund answered 1: no warning');
is("$refunded|$dropped", '1|0', 'refund answered 1: counted as given back');
foreach my $case (
	[ ":7\r\n", qr/The refund reply is 7, but it must be 0 or 1\./ ],
	[ "\$1\r\n1\r\n", qr/The refund reply is a bulk string, not an integer\./ ])
{
	my ($reply, $detail) = @$case;
	($out, $err, $refunded, $dropped) = refund_round($reply);
	like($err, qr/WARNING:.*could not give back 1 units of an aborted transaction/,
		'refund answered ' . ($reply =~ s/\r\n/ /gr) . ': a warning, not an error');
	like($err, qr/DETAIL:\s+$detail/, 'refund: the warning names the reply');
	unlike($err, qr/ERROR/, 'refund: no ERROR');
	is("$refunded|$dropped", '0|1', 'refund: counted as dropped, not given back');
}
# rl_refund sends its refund at once and waits for the reply, which is read
# by the same check: a reply no refund script gives is refused, and the
# call raises the protocol error with the reply named (08P01), rather than
# say the units went back.
{
	$fake->script($ints->(@admit), ":1\r\n");
	my ($o, $e) = run_sql(q{SELECT rl_refund('h', ticket) FROM rl_attempt('h', 100, '1 hour', 1, 'error') r});
	is("$o|$e", 't|', 'rl_refund answered 1: given back');
	foreach my $case (
		[ ":7\r\n", qr/The refund reply is 7, but it must be 0 or 1\./ ],
		[ "\$1\r\n1\r\n", qr/The refund reply is a bulk string, not an integer\./ ])
	{
		my ($reply, $detail) = @$case;
		$fake->script($ints->(@admit), $reply);
		($o, $e) = run_sql(q{SELECT rl_refund('h', ticket) FROM rl_attempt('h', 100, '1 hour', 1, 'error') r});
		my $name = 'rl_refund answered ' . ($reply =~ s/\r\n/ /gr);
		like($e, qr/ERROR:\s+08P01: slidewin received an invalid reply from Redis/, "$name: 08P01");
		like($e, qr/DETAIL:\s+$detail/, "$name: the error names the reply");
	}
}

# Garbage where the refund's reply belongs: the connection cannot be trusted
# and goes; the refund is neither given back nor dropped but kept, and sent
# again (refunds are idempotent) once a server answers properly.
($out, $err, $refunded, $dropped) = refund_round("garbage\r\n");
unlike($err, qr/ERROR/, 'refund answered garbage: no ERROR');
is("$refunded|$dropped", '0|0', 'refund answered garbage: kept, not counted either way');
my ($base) = run_sql(q{SELECT refunded FROM rl_backend_stats()});
$fake->script(":1\r\n", ":1\r\n");
run_sql(q{SELECT allowed FROM rl_peek('h', 100, '1 hour', 'fallback')});
my ($again) = run_sql(q{SELECT refunded FROM rl_backend_stats()});
my $r0 = $again - $base;
is($r0, 1, 'the kept refund is sent again on a new connection and given back once');

# ---------------------------------------------------------------------
# The circuit breaker counts a refused reply as a failure.  The breaker is
# per backend and remembers failures for the whole interval, so this runs in
# a new session, whose breaker has seen nothing yet.
# ---------------------------------------------------------------------
my $s_main = $s;
$s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('\set VERBOSITY verbose');
$fake->script($ints->(@admit));
run_sql(q{SET slidewin.redis_retry_interval = '1h'});
($out, $err) = attempt('error');
is($out, 't|redis|99', 'breaker: a new session asks Redis');
$fake->script($ints->(1, -5, -1, -9, -1, -1, -1, -1));
($out, $err) = attempt('error');
is(sqlstate($err), '08P01', 'breaker: the refused reply fails the call');
like($err, qr/DETAIL:\s+Field "remaining" of the sliding_log attempt reply is -5/,
	'breaker: the refused reply is named');
unlike($err, qr/not retried/, 'breaker: that call did ask Redis');
$fake->script($ints->(@admit));
$fake->mark;
($out, $err) = attempt('error');
is(sqlstate($err), '08P01', 'breaker: the next call fails the same way without asking');
like($err,
	qr/DETAIL:\s+Field "remaining" of the sliding_log attempt reply is -5.*\(not retried until slidewin\.redis_retry_interval has passed\)/,
	'breaker: DETAIL names the refused reply, and says it was not retried');
($out, $err) = attempt('fallback');
is($out, 't|fallback|99', 'breaker: policy fallback goes straight to the fallback store');
is(scalar($fake->script_connections), 0, 'breaker: the server was not asked');
run_sql(q{SET slidewin.redis_retry_interval = 0; SELECT rl_reset('h')});
($out, $err) = attempt('error');
is($out, 't|redis|99', 'breaker off: the next well-formed reply is believed again');
$s->quit;
$s = $s_main;

# ---------------------------------------------------------------------
# MISCONF: Redis cannot persist, so it refuses writes for now.
# ---------------------------------------------------------------------
my $misconf = "-MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.\r\n";
$fake->script($misconf);
$fake->del($misconf);
($out, $err) = attempt('fallback');
is($out, 't|fallback|99', 'MISCONF, policy fallback: the fallback store answers');
is($err, '', 'MISCONF, policy fallback: no error');
($out, $err) = attempt('deny');
is($out, 'f|none|', 'MISCONF, policy deny: denied');
($out, $err) = attempt('allow');
is($out, 't|none|', 'MISCONF, policy allow: allowed, no store');
($out, $err) = attempt('error');
is(sqlstate($err), '08006', 'MISCONF, policy error: 08006, like any "not now" reply');
like($err, qr/DETAIL:\s+MISCONF Redis is configured/, 'MISCONF, policy error: DETAIL carries the reply');
($out, $err) = peek('fallback');
is($out, 't|fallback|99', 'MISCONF, rl_peek under policy fallback: the fallback store answers');
($out, $err) = run_sql(q{SELECT rl_reset('h')});
like($err, qr/WARNING:\s+08006: the Redis entries of the key were not cleared/,
	'MISCONF, rl_reset: a warning, not an error');
# Other error replies stay errors whatever the policy.
$fake->script("-ERR something else\r\n");
($out, $err) = attempt('fallback');
is(sqlstate($err), '38000', 'an unknown error reply is 38000 even under policy fallback');

# ---------------------------------------------------------------------
# Nothing crashed.
# ---------------------------------------------------------------------
($out) = run_sql('SELECT pg_backend_pid()');
is($out, $pid0, 'the same backend served every call');
$s->quit;
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server accepts new sessions');
my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile);
unlike($log, qr/PANIC|terminated by signal|was terminated/, 'no crash in the server log');

done_testing();
