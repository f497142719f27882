# MISCONF from a real Redis: with RDB snapshots configured and
# stop-writes-on-bgsave-error on, a failed BGSAVE makes Redis refuse every
# write until a save succeeds.  The calls that need a write follow their
# failure policy, like OOM; reads still work; once a save succeeds Redis
# answers again.
#
# The save fails because the Redis directory is made read-only to its owner,
# which only stops a process that is not root.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest qw(sqlstate);

if ($> == 0)
{
	plan skip_all => 'root writes to a read-only directory, so BGSAVE cannot be made to fail';
}

my $redis = SlidewinTest::start_redis(
	args => [ '--save', '3600 1', '--stop-writes-on-bgsave-error', 'yes' ]);
my $node = SlidewinTest::new_node('misconf', $redis, 'slidewin.redis_retry_interval = 0');
my $s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('\set VERBOSITY verbose');

sub run_sql { return SlidewinTest::session_sql($s, @_) }

sub attempt
{
	my ($key, $policy) = @_;
	return run_sql(
		qq{SELECT (r).allowed, (r).store, (r).remaining
		   FROM rl_attempt('$key', 100, '1 hour', 1, '$policy') r});
}

# Wait until Redis reports the outcome of the last BGSAVE as $want.
sub bgsave_status
{
	my ($want) = @_;
	my $deadline = time + 10;
	my $status = '';
	while (time < $deadline)
	{
		($status) = $redis->cli('info', 'persistence') =~ /^rdb_last_bgsave_status:(\w+)/m;
		my ($busy) = $redis->cli('info', 'persistence') =~ /^rdb_bgsave_in_progress:(\d)/m;
		return $status if defined $status && $status eq $want && !$busy;
		usleep(50_000);
	}
	return $status // '(none)';
}

my ($out, $err, $dt);
($out, $err) = attempt('m:a', 'error');
is($out, 't|redis|99', 'Redis answers before the failed save');

chmod(0500, $redis->dir) or die "chmod: $!";
like($redis->cli('bgsave'), qr/Background saving started/, 'BGSAVE started');
is(bgsave_status('err'), 'err', 'the BGSAVE failed: the directory is read-only');
my ($set_out, $set_err) = $redis->cli('set', 'probe', 'x');
like("$set_out $set_err", qr/^\s*MISCONF/, 'a plain write now gets MISCONF');

($out, $err, $dt) = attempt('m:a', 'fallback');
is($out, 't|fallback|99', 'MISCONF, policy fallback: the fallback store answers');
is($err, '', 'MISCONF, policy fallback: no error');
cmp_ok($dt, '<', 2, sprintf('MISCONF, policy fallback: %.3f s', $dt));

($out, $err) = attempt('m:a', 'deny');
is($out, 'f|none|', 'MISCONF, policy deny: denied, no store');
($out, $err) = attempt('m:a', 'allow');
is($out, 't|none|', 'MISCONF, policy allow: allowed, no store');

($out, $err) = attempt('m:a', 'error');
is(sqlstate($err), '08006', 'MISCONF, policy error: 08006');
like($err, qr/DETAIL:\s+MISCONF /, 'MISCONF, policy error: DETAIL carries the reply');

# A peek only reads, which Redis still allows.
($out, $err) = run_sql(
	q{SELECT (r).allowed, (r).store, (r).remaining FROM rl_peek('m:a', 100, '1 hour', 'error') r});
is($out, 't|redis|99', 'MISCONF: a peek (read only) is still answered by Redis');

($out, $err) = run_sql(q{SELECT rl_reset('m:a')});
like($err, qr/WARNING:\s+08006: the Redis entries of the key were not cleared/,
	'MISCONF: rl_reset warns that Redis was not cleared');
like($err, qr/DETAIL:\s+MISCONF /, 'MISCONF: the warning carries the reply');

chmod(0700, $redis->dir) or die "chmod: $!";
like($redis->cli('bgsave'), qr/Background saving started/, 'BGSAVE once more, directory writable');
is(bgsave_status('ok'), 'ok', 'the save succeeded');

($out, $err) = attempt('m:a', 'error');
is($out, 't|redis|98', 'after a good save, Redis answers again (its count kept)');
is($err, '', 'no error after a good save');

$s->quit;
done_testing();
