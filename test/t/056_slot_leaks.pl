# Concurrency slots that must not outlive their holders (issue 35, F3, F4,
# F7-F10):
#  - F3: an rl_acquire whose reply is lost (statement_timeout while Redis
#    sleeps, a frozen Redis that makes the call fall back, a caller's tiny
#    statement_timeout) leaves no holder once the transaction is over;
#  - F4: the release at ROLLBACK and at COMMIT reconnects when an earlier
#    timeout dropped the connection, and backend exit does too;
#  - F7: a holder re-acquiring its key with a smaller max than the other
#    holders' is renewed, not refused as an impossible reply; in the
#    fallback store a call's max bounds the key's holders, as in Redis;
#  - F8: pg_advisory_unlock_all() does not free fallback slots;
#  - F9: fallback slots are shared by the databases of one server;
#  - F10: rl_renew follows the failure policy when Redis stalls.
# A stall is Redis frozen (SIGSTOP) for one call that times out, then thawed.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
my $node = SlidewinTest::new_node('slot_leaks', $redis,
	[ "shared_preload_libraries = 'slidewin'" ]);
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION slidewin');

sub sql { return $node->safe_psql('postgres', $_[0]); }
sub holders { return sql(qq{SELECT rl_holders('$_[0]', 'error')}); }

sub session
{
	my ($db) = @_;
	my $s = $node->background_psql($db // 'postgres', on_error_stop => 0);
	$s->query_safe('SET client_min_messages = warning');
	return $s;
}

# Run a query that may fail: its output and its stderr (cleared after).
sub try_q
{
	my ($s, $q) = @_;
	$s->{stderr} = '';
	my $out = $s->query($q);
	my $err = $s->{stderr};
	$s->{stderr} = '';
	return ($out, $err);
}

# A session whose slots live in the fallback store (Redis unreachable).
sub fallback_session
{
	my $s = session(@_);
	$s->query_safe(q{SET slidewin.redis_url = 'redis://127.0.0.1:1'});
	$s->query_safe('SET slidewin.redis_retry_interval = 0');
	return $s;
}

# ---------------------------------------------------------------------
# F3: lost replies
# ---------------------------------------------------------------------

# statement_timeout fires while Redis sleeps on the acquisition; Redis then
# runs it. The transaction is over: once the session calls again, the slot
# is free.
{
	my $s = session();
	$s->query_safe(q{SET slidewin.command_timeout = '5s'});
	$s->query_safe(q{SELECT rl_acquire('sl:warm', 100)});	# connected, the script loaded
	my $sleep = $redis->debug_sleep_bg('1');
	usleep(100_000);
	$s->query_safe(q{SET statement_timeout = '300ms'});
	my (undef, $err) = try_q($s, q{SELECT acquired FROM rl_acquire('sl:f3a', 1, '1 day')});
	like($err, qr/statement timeout/, 'F3: statement_timeout ends the acquisition');
	$sleep->finish;
	$s->query_safe('RESET statement_timeout');
	$s->query_safe(q{SELECT rl_holders('sl:unrelated')});
	is(holders('sl:f3a'), '0', 'F3: the holder Redis added after the timeout is released');
	$s->quit;
}

# Redis frozen during rl_acquire: the call falls back and the transaction
# commits; Redis thaws and runs the acquisition. The session's next call
# releases it.
{
	my $s = session();
	$s->query_safe(q{SELECT rl_acquire('sl:warm', 100)});	# connected, the script loaded
	$s->query_safe('BEGIN');
	$redis->freeze;
	is((try_q($s, q{SELECT acquired || ',' || store FROM rl_acquire('sl:f3b', 1, '1 day')}))[0],
		'true,fallback', 'F3: a frozen Redis: the slot is taken in the fallback store');
	try_q($s, 'COMMIT');
	$redis->thaw;
	usleep(300_000);
	$s->query_safe(q{SET slidewin.redis_retry_interval = 0});
	$s->query_safe(q{SELECT rl_holders('sl:unrelated')});
	is(holders('sl:f3b'), '0', 'F3: the acquisition Redis ran after thawing is released');
	$s->quit;
}

# A caller's own tiny statement_timeout, many times over: no holder is left
# once the session has ended.
{
	my $file = PostgreSQL::Test::Utils::tempdir('slot_leaks') . '/loop.sql';
	open(my $fh, '>', $file) or die "cannot write $file: $!";
	print $fh "SET statement_timeout = '1ms';\n";
	print $fh "SELECT rl_acquire('sl:f3c', 1, '1 day');\n" for 1 .. 300;
	close $fh;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'psql', '-XAtq', '-h', $node->host, '-p', $node->port, '-d', 'postgres',
			'-f', $file ], '<', \undef, '>', \$out, '2>', \$err);
	my $timeouts = () = $err =~ /statement timeout/g;
	note("$timeouts of 300 calls hit the statement timeout");
	usleep(300_000);
	is(holders('sl:f3c'), '0', 'F3: no holder left by calls cut short by statement_timeout');
}

# ---------------------------------------------------------------------
# F4: the release at transaction end reconnects
# ---------------------------------------------------------------------

# Hold A; wait for B; statement_timeout drops the connection; ROLLBACK
# frees A at once, while the session stays connected.
{
	my $b = session();
	$b->query_safe('BEGIN');
	is($b->query_safe(q{SELECT acquired FROM rl_acquire('sl:b', 1)}), 't', 'F4: another session holds B');
	my $s = session();
	$s->query_safe('BEGIN');
	is($s->query_safe(q{SELECT acquired FROM rl_acquire('sl:a', 1)}), 't', 'F4: the session holds A');
	$s->query_safe(q{SET LOCAL statement_timeout = '300ms'});
	my (undef, $err) = try_q($s, q{SELECT acquired FROM rl_acquire('sl:b', 1, '10 minutes', '5 seconds')});
	like($err, qr/statement timeout/, 'F4: the wait for B is cut by statement_timeout');
	try_q($s, 'ROLLBACK');
	is(holders('sl:a'), '0', 'F4: ROLLBACK released A');
	$b->query_safe('COMMIT');
	is(holders('sl:b'), '0', 'F4: and B is released by its holder');
	$s->quit;
	$b->quit;
}

# One stall during the transaction: COMMIT releases the slot, even with the
# breaker open (the default retry interval, 1 s, has not passed).
{
	my $s = session();
	$s->query_safe('BEGIN');
	is($s->query_safe(q{SELECT acquired || ',' || store FROM rl_acquire('sl:c', 1)}), 'true,redis',
		'F4: the session holds C');
	$redis->freeze;		# a stall: the call times out, the connection is dropped
	try_q($s, q{SELECT rl_holders('sl:unrelated', 'fallback')});
	$redis->thaw;
	$s->query_safe('COMMIT');
	is(holders('sl:c'), '0', 'F4: COMMIT after a stall released C');
	$s->query_safe('SET slidewin.redis_retry_interval = 0');
	$s->query_safe('BEGIN');
	is($s->query_safe(q{SELECT acquired || ',' || store FROM rl_acquire('sl:c2', 1)}), 'true,redis',
		'F4: the session holds C2');
	$redis->freeze;		# a stall: the call times out, the connection is dropped
	try_q($s, q{SELECT rl_holders('sl:unrelated', 'fallback')});
	$redis->thaw;
	try_q($s, 'ROLLBACK');
	is(holders('sl:c2'), '0', 'F4: ROLLBACK after a stall released C2');
	$s->quit;
}

# A call that times out on a frozen Redis drops the connection, then COMMIT
# comes while Redis is still frozen and cannot release; the backend's exit,
# after Redis thawed, does.
{
	my $s = session();
	$s->query_safe('SET slidewin.redis_retry_interval = 0');
	$s->query_safe('BEGIN');
	is($s->query_safe(q{SELECT acquired || ',' || store FROM rl_acquire('sl:e', 1)}), 'true,redis',
		'F4: the session holds E');
	$redis->freeze;		# the call times out, the connection is dropped
	try_q($s, q{SELECT rl_holders('sl:unrelated', 'fallback')});
	my $t0 = time;
	try_q($s, 'COMMIT');
	cmp_ok(time - $t0, '<', 1.5, 'F4: COMMIT with Redis frozen is bounded');
	$redis->thaw;
	usleep(200_000);
	$s->quit;
	my $freed;
	for (1 .. 30)
	{
		last if ($freed = holders('sl:e') eq '0');
		usleep(100_000);
	}
	ok($freed, 'F4: the backend released E at exit, long before its lease');
}

# ---------------------------------------------------------------------
# F7: mixed max on one key
# ---------------------------------------------------------------------
{
	my $s1 = session();
	my $s2 = session();
	$s1->query_safe('BEGIN');
	$s2->query_safe('BEGIN');
	is($s1->query_safe(q{SELECT acquired FROM rl_acquire('sl:m', 5)}), 't', 'F7: one holder with max 5');
	is($s2->query_safe(q{SELECT acquired FROM rl_acquire('sl:m', 5)}), 't', 'F7: another with max 5');
	my ($out, $err) = try_q($s2, q{SELECT acquired || ',' || holders || ',' || store
			FROM rl_acquire('sl:m', 1, on_redis_error => 'error')});
	is($out, 'true,2,redis', 'F7: the second holder renews with max 1: holders 2 is a possible reply');
	is($err, '', 'F7: no error');
	my $s3 = session();
	is($s3->query_safe(q{SELECT acquired || ',' || holders || ',' || store
			FROM rl_acquire('sl:m', 1, on_redis_error => 'error')}),
		'false,2,redis', 'F7: a new holder with max 1 is denied while 2 hold the key');
	is($s3->query_safe(q{SELECT acquired || ',' || holders
			FROM rl_acquire('sl:m', 3, on_redis_error => 'error')}),
		'true,3', 'F7: a new holder with max 3 is admitted');
	$s1->query_safe('COMMIT');
	$s2->query_safe('COMMIT');
	$s3->quit;
	is(holders('sl:m'), '0', 'F7: every slot released');

	# The fallback store: a call's max bounds the key's holders there too.
	my $f1 = fallback_session();
	my $f2 = fallback_session();
	my $admitted = 0;
	for (1 .. 10)
	{
		$f1->query_safe('BEGIN');
		$f1->query_safe(q{SELECT acquired FROM rl_acquire('sl:fm', 5)});
		$admitted++ if $f2->query_safe(q{SELECT acquired FROM rl_acquire('sl:fm', 1)}) eq 't';
		$f1->query_safe('COMMIT');
	}
	is($admitted, 0, 'F7: fallback store: max 1 is denied while a max-5 holder holds the key');
	$f1->quit;
	$f2->quit;
}

# ---------------------------------------------------------------------
# F8: pg_advisory_unlock_all() leaves fallback slots alone
# ---------------------------------------------------------------------
{
	my $f1 = fallback_session();
	my $f2 = fallback_session();
	$f1->query_safe('BEGIN');
	is($f1->query_safe(q{SELECT acquired || ',' || store FROM rl_acquire('sl:u', 1)}),
		'true,fallback', 'F8: a fallback slot is held');
	$f1->query_safe('SELECT pg_advisory_unlock_all()');
	is($f2->query_safe(q{SELECT acquired FROM rl_acquire('sl:u', 1)}), 'f',
		'F8: after pg_advisory_unlock_all() the slot is still held');
	is($f2->query_safe(q{SELECT rl_holders('sl:u', 'fallback')}), '1', 'F8: one holder');
	my (undef, $err) = try_q($f1, 'COMMIT');
	is($err, '', 'F8: COMMIT releases it without a warning');
	is($f2->query_safe(q{SELECT acquired FROM rl_acquire('sl:u', 1)}), 't', 'F8: then it is free');
	$f1->quit;
	$f2->quit;
}

# ---------------------------------------------------------------------
# F9: fallback slots are shared by every database of the server
# ---------------------------------------------------------------------
{
	my $f1 = fallback_session('postgres');
	my $f2 = fallback_session('other');
	$f1->query_safe('BEGIN');
	is($f1->query_safe(q{SELECT acquired FROM rl_acquire('sl:d', 1)}), 't', 'F9: database postgres holds the slot');
	is($f2->query_safe(q{SELECT acquired || ',' || holders FROM rl_acquire('sl:d', 1)}), 'false,1',
		'F9: database other is denied');
	is($f2->query_safe(q{SELECT rl_holders('sl:d', 'fallback')}), '1', 'F9: and counts the holder');
	$f1->query_safe('COMMIT');
	is($f2->query_safe(q{SELECT acquired FROM rl_acquire('sl:d', 1)}), 't', 'F9: then it is free');
	$f1->quit;
	$f2->quit;
}

# ---------------------------------------------------------------------
# F10: rl_renew and a stall
# ---------------------------------------------------------------------
{
	my $s = session();
	$s->query_safe('SET slidewin.redis_retry_interval = 0');
	$s->query_safe('BEGIN');
	is($s->query_safe(q{SELECT acquired FROM rl_acquire('sl:r', 1, '1 minute')}), 't', 'F10: holds R');
	$redis->freeze;		# a stall
	my ($out, $err) = try_q($s, q{SELECT coalesce(rl_renew('sl:r')::text, 'null')});
	$redis->thaw;
	is($out, 'null', 'F10: under the fallback policy a stalled renewal answers NULL (not known)');
	like($err, qr/WARNING:.*could not renew/, 'F10: with a warning');
	unlike($err, qr/ERROR/, 'F10: and no error');
	is($s->query_safe(q{SELECT rl_renew('sl:r')}), 't', 'F10: the transaction goes on and renews later');
	$s->query_safe(q{SET LOCAL slidewin.on_redis_error = 'allow'});
	$redis->freeze;
	($out, $err) = try_q($s, q{SELECT rl_renew('sl:r')});
	$redis->thaw;
	is($out, 't', 'F10: under allow it answers true');
	like($err, qr/WARNING:.*could not renew/, 'F10: with a warning');
	$redis->freeze;
	($out, $err) = try_q($s, q{SELECT rl_renew('sl:r', on_redis_error => 'deny')});
	$redis->thaw;
	is($out, 'f', 'F10: the argument overrides the setting: deny answers false');
	like($err, qr/WARNING:.*could not renew/, 'F10: with a warning');
	(undef, $err) = try_q($s, q{SELECT rl_renew('sl:r', on_redis_error => 'sometimes')});
	like($err, qr/ERROR:.*on_redis_error/, 'F10: an unknown policy is refused, naming the argument');
	try_q($s, 'ROLLBACK');
	$s->query_safe('BEGIN');
	is($s->query_safe(q{SELECT acquired FROM rl_acquire('sl:r', 1, '1 minute')}), 't', 'F10: holds R again');
	$s->query_safe(q{SET LOCAL slidewin.on_redis_error = 'error'});
	$redis->freeze;
	(undef, $err) = try_q($s, q{SELECT rl_renew('sl:r')});
	$redis->thaw;
	like($err, qr/ERROR:.*could not reach Redis/, 'F10: under error it raises');
	try_q($s, 'ROLLBACK');
	is(holders('sl:r'), '0', 'F10: the slot is released at the end');
	$s->quit;
}

done_testing();
