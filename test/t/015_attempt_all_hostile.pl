# rl_attempt_all's reply (log_all.lua and counter_all.lua: 8 integers per
# key) from a fake server (test/perl/fake_redis.pl): a well-formed
# admission and denial are believed; a reply that admits some keys and not
# others, that denies with no key denying, that has the wrong length, or
# whose key fields break the rules of an attempt of the call's algorithm is
# refused (08P01 under the error policy,
# the policy's own answer under allow and deny), never an admission.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest qw(sqlstate);
use FakeRedis;

my $fake = FakeRedis->start;
my $node = SlidewinTest::new_node('allhostile', $fake->port,
	[ "slidewin.command_timeout = '1s'", 'slidewin.redis_retry_interval = 0' ]);
my $s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('\set VERBOSITY verbose');
my $ints = \&FakeRedis::ints;

sub run_sql { return SlidewinTest::session_sql($s, @_) }

# rl_attempt_all over keys a and b, 100 per hour each, cost 1.
sub all
{
	my ($policy) = @_;
	return run_sql(qq{SELECT (r).allowed, (r).store, (r).remaining, (r).lim
		FROM rl_attempt_all(ARRAY['a', 'b'], ARRAY[100, 50], ARRAY['1 hour', '1 hour']::interval[],
		                    on_redis_error => '$policy') r});
}

my $ts  = 1_900_000_000_000_000;
my $win = 3_600_000_000;
# per key: an admission (1 unit used), a denial (all used), room not charged
my @admit_a = (1, 99, 0, $ts + $win, 1, $ts, 0, $ts + $win);
my @admit_b = (1, 40, 0, $ts + $win, 10, $ts, 0, $ts + $win);
my @deny_a  = (0, 0, 5_000_000, $ts + $win, 100, -1, 4_000_000, $ts + 4_000_000);
my @spare_b = (3, 40, 0, $ts + $win, 10, -1, 0, $ts + 1_000_000);

my ($out, $err);
$fake->script($ints->(@admit_a, @admit_b));
($out, $err) = all('error');
is($out, 't|redis|40|50', 'an admission of both keys is believed; b, with less room, decides');
is($err, '', 'no error for a well-formed admission');

$fake->script($ints->(@deny_a, @spare_b));
($out, $err) = all('error');
is($out, 'f|redis|0|100', 'a denial by a, b not charged, is believed; a decides');

# Every key admitted: the sliding log answers 3 integers a key,
# {remaining, recorded, next_us}, and the rest follows as for rl_attempt.
$fake->script($ints->(99, $ts, $ts + $win, 40, $ts + 1, $ts + $win));
($out, $err) = all('error');
is($out, 't|redis|40|50', 'a short admission of both keys is believed; b decides');
is($err, '', 'no error for a well-formed short admission');
# and each key's row is rebuilt from its three: reset_at is recorded + win
$fake->script($ints->(99, $ts, $ts + $win, 40, $ts + 1, $ts + $win));
($out, $err) = run_sql(qq{SELECT string_agg(format('%s:%s:%s:%s', key, allowed, remaining,
		(extract(epoch FROM reset_at) * 1000000)::bigint - $win), ',' ORDER BY key)
	FROM rl_attempt_all_rows(ARRAY['a', 'b'], ARRAY[100, 50], ARRAY['1 hour', '1 hour']::interval[])});
is($out, "a:t:99:$ts,b:t:40:" . ($ts + 1), 'a short admission: each key\'s row follows from its three integers');

my @hostile = (
	[ 'one key admitted, the other denied', [ @admit_a, @deny_a[0 .. 7] ],
		qr/admits 1 of 2 keys, but it must admit all of them or none/ ],
	[ 'no key admitted, none denying', [ (3, 99, 0, $ts + $win, 1, -1, 0, $ts + $win), @spare_b ],
		qr/admits no key, but no key denies/ ],
	[ 'the length of one key', [@admit_a], qr/has 8 elements, not 16/ ],
	[ 'a key with room, over its limit', [ @deny_a, (3, 0, 0, $ts + $win, 50, -1, 0, $ts + $win) ],
		qr/Field "used" of key 2 .* must have used at most the difference/ ],
	[ 'allowed 4', [ @admit_a, (4, 40, 0, $ts + $win, 10, $ts, 0, $ts + $win) ],
		qr/Field "allowed" of key 2 .* must be 0, 1 or 2, or 3/ ],
	[ 'an admission past its limit', [ @admit_a, (1, 0, 0, $ts + $win, 51, $ts, 0, $ts + $win) ],
		qr/Field "remaining"|Field "used"/ ],
	[ 'a string among the integers', [ @admit_a[0 .. 6], 'x', @admit_b ], undef ],
	[ 'a short admission past a limit', [ 99, $ts, $ts + $win, -1, $ts, $ts + $win ],
		qr/Field "remaining"|Field "used"/ ],
	[ 'a short admission freeing a unit after its window', [ 99, $ts, $ts + $win, 40, $ts, $ts + $win + 1 ],
		qr/Field "next_us" of the rl_attempt_all attempt reply .* must be at most reset_at/ ],
	[ 'a short reply of the wrong length', [ 99, $ts, $ts + $win, 40, $ts ],
		qr/has 5 elements, not 16 \(8 for each of 2 keys\) or 3 for each key when all are admitted/ ],
);
foreach my $case (@hostile)
{
	my ($name, $reply, $why) = @$case;
	my $raw = $case->[1][7] eq 'x'
	  ? "*16\r\n" . join('', map { ":$_\r\n" } @admit_a[0 .. 6]) . "\$1\r\nx\r\n"
		. join('', map { ":$_\r\n" } @admit_b)
	  : $ints->(@$reply);
	$fake->script($raw);
	($out, $err) = all('error');
	is(sqlstate($err), '08P01', "$name: refused under the error policy");
	like($err, $why, "$name: the reason is given") if $why;
	$fake->script($raw);
	($out, $err) = all('allow');
	is($out, 't|none||100', "$name: the allow policy answers, not the reply");
	$fake->script($raw);
	($out, $err) = all('deny');
	is($out, 'f|none||100', "$name: the deny policy answers, not the reply");
}

# The counting algorithms' reply (counter_all.lua): the same 8 integers per
# key, recorded -1 and stable_us 0, checked by the rules of that
# algorithm's attempt.
sub all_algo
{
	my ($algo, $policy) = @_;
	return run_sql(qq{SELECT (r).allowed, (r).store, (r).remaining, (r).lim
		FROM rl_attempt_all(ARRAY['a', 'b'], ARRAY[100, 50], ARRAY['1 hour', '1 hour']::interval[],
		                    on_redis_error => '$policy', algorithm => '$algo') r});
}

my @c_admit_a = (1, 99, 0, $ts + $win, 1, -1, 0, $ts + $win);
my @c_admit_b = (1, 40, 0, $ts + $win, 10, -1, 0, $ts + $win);
my @c_deny_a  = (0, 0, 5_000_000, $ts + $win, 100, -1, 0, $ts + 5_000_000);
my @c_spare_b = (3, 40, 0, $ts + $win, 10, -1, 0, $ts + $win);
foreach my $algo (qw(fixed_window sliding_counter token_bucket))
{
	$fake->script($ints->(@c_admit_a, @c_admit_b));
	($out, $err) = all_algo($algo, 'error');
	is($out, 't|redis|40|50', "$algo: an admission of both keys is believed");
	$fake->script($ints->(@c_deny_a, @c_spare_b));
	($out, $err) = all_algo($algo, 'error');
	is($out, 'f|redis|0|100', "$algo: a denial by a, b not charged, is believed");
}

my @c_hostile = (
	[ 'fixed_window', 'the sliding log\'s short admission', [ 99, $ts + $win, $ts + $win, 40, $ts + $win, $ts + $win ],
		qr/has 6 elements, not 16/ ],
	[ 'token_bucket', 'one key admitted, the other denied', [ @c_admit_a, @c_deny_a ],
		qr/admits 1 of 2 keys, but it must admit all of them or none/ ],
	[ 'fixed_window', 'a stable_us', [ @c_admit_a[0 .. 5], 7, $c_admit_a[7], @c_admit_b ],
		qr/Field "stable_us" of key 1 .* must be 0 for fixed_window/ ],
	[ 'sliding_counter', 'an entry recorded', [ @c_admit_a[0 .. 4], $ts, 0, $c_admit_a[7], @c_admit_b ],
		qr/Field "recorded" .* must be -1 when nothing was recorded/ ],
	[ 'fixed_window', 'a retry past the window', [ (0, 0, 2 * $win, $ts + $win, 100, -1, 0, $ts + $win), @c_spare_b ],
		qr/Field "retry_after" .* at most the window/ ],
	[ 'fixed_window', 'a key with room, over its limit', [ @c_deny_a, (3, 0, 0, $ts + $win, 50, -1, 0, $ts + $win) ],
		qr/Field "used" of key 2 .* must have used at most the difference/ ],
	[ 'sliding_counter', 'an admission denied by the used units', [ @c_admit_a, (1, 0, 0, $ts + $win, 51, -1, 0, $ts + $win) ],
		qr/Field "used" .* at most 50 when the call is admitted/ ],
);
foreach my $case (@c_hostile)
{
	my ($algo, $name, $reply, $why) = @$case;
	$fake->script($ints->(@$reply));
	($out, $err) = all_algo($algo, 'error');
	is(sqlstate($err), '08P01', "$algo, $name: refused under the error policy");
	like($err, $why, "$algo, $name: the reason is given");
	$fake->script($ints->(@$reply));
	($out, $err) = all_algo($algo, 'allow');
	is($out, 't|none||100', "$algo, $name: the allow policy answers, not the reply");
}

$s->quit;
done_testing();
