# Redis Cluster routing against a fake node (test/perl/fake_redis.pl) that
# claims every slot and then answers however the test likes:
#
#  - MOVED (or ASK) to itself forever: the call gives up after 5
#    redirections (6 sends; ASKING before each send on an ASK), and its
#    policy applies;
#  - a redirection that cannot be read, a slot map that cannot be read:
#    refused with a message that says so, never believed;
#  - CLUSTERDOWN: "not now", the policy applies;
#  - TRYAGAIN forever: waited out only until the call's deadline;
#  - rl_attempt_all of a counting algorithm over two slots: a confirm that
#    says not confirmed, of the wrong length or type, an error or MOVED
#    forever, and a reserve of the wrong length: never an admission, the
#    call follows its policy (an error reply raises whatever the policy, as
#    for rl_attempt), within its timeouts.
#
# It talks to the fake server only: the Valkey pass leaves it out.
# slidewin: starts no Redis server
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FakeRedis;
use SlidewinTest;

my $fake = FakeRedis->start;
my $port = $fake->port;
my $slots = "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n" . '$9' . "\r\n127.0.0.1\r\n:$port\r\n" . '$2' . "\r\nid\r\n";
$fake->reply('CLUSTER', $slots);

my $node = SlidewinTest::new_node('cluster_hostile', undef,
	[ "slidewin.redis_url = 'redis-cluster://127.0.0.1:$port'",
	  'slidewin.redis_retry_interval = 0',
	  'slidewin.command_timeout = 100', 'slidewin.connect_timeout = 200' ]);

sub run_sql { return SlidewinTest::node_sql($node, @_) }
sub sends { return $fake->count('EVALSHA') + $fake->count('EVAL') }

# Sanity: a good reply is believed.
$fake->script(FakeRedis::ints(1, 9, 0, 1_900_003_600_000_000, 1, 1_900_000_000_000_000, 0, 1_900_003_600_000_000));
my ($out, $err) = run_sql(q{SELECT (r).allowed, (r).store FROM rl_attempt('h:1', 10, '1 hour', 1, 'error') r});
is($out, 't|redis', 'the fake node serves every slot') or diag($err);

# MOVED to itself, forever.
$fake->script("-MOVED 1234 127.0.0.1:$port\r\n");
$fake->mark;
($out, $err) = run_sql(q{SELECT * FROM rl_attempt('h:1', 10, '1 hour', 1, 'error')});
like($err, qr/ERROR:\s+080\d\d: .*kept redirecting/s, 'endless MOVED: an error under the error policy');
is(sends(), 6, 'the command was sent 6 times: once, then after each of 5 redirections');
($out, $err) = run_sql(q{SELECT (r).store FROM rl_attempt('h:1', 10, '1 hour', 1, 'fallback') r});
is($out, 'fallback', 'endless MOVED: the fallback under the fallback policy');

# ASK to itself, forever: ASKING before each redirected send.
$fake->script("-ASK 1234 127.0.0.1:$port\r\n");
$fake->mark;
($out, $err) = run_sql(q{SELECT * FROM rl_attempt('h:1', 10, '1 hour', 1, 'error')});
like($err, qr/kept redirecting/, 'endless ASK: gives up');
is($fake->count('ASKING'), 5, 'ASKING before each of the 5 redirected sends');

# A redirection that cannot be read.
for my $bad ("-MOVED 99999 127.0.0.1:$port\r\n", "-MOVED 12 127.0.0.1:0\r\n", "-ASK x y\r\n")
{
	$fake->script($bad);
	($out, $err) = run_sql(q{SELECT * FROM rl_attempt('h:1', 10, '1 hour', 1, 'error')});
	(my $shown = $bad) =~ s/\r\n//;
	like($err, qr/redirection slidewin cannot read/, "refused: $shown");
}

# CLUSTERDOWN: not now.
$fake->script("-CLUSTERDOWN The cluster is down\r\n");
($out, $err) = run_sql(q{SELECT (r).store FROM rl_attempt('h:1', 10, '1 hour', 1, 'fallback') r});
is($out, 'fallback', 'CLUSTERDOWN: the policy applies');

# TRYAGAIN forever: no longer than the call's deadline.
$fake->script("-TRYAGAIN Multiple keys request during rehashing of slot\r\n");
$fake->mark;
my $t0 = time;
($out, $err) = run_sql(q{SELECT (r).store FROM rl_attempt('h:1', 10, '1 hour', 1, 'fallback') r});
my $took = time - $t0;
is($out, 'fallback', 'endless TRYAGAIN: the policy applies');
cmp_ok(sends(), '>', 1, 'TRYAGAIN was tried again (' . sends() . ' sends)');
cmp_ok($took, '<', 2, sprintf('and the call ended at its deadline (%.2f s)', $took));

# A slot map that cannot be read.
$fake->reply('CLUSTER', "*1\r\n*3\r\n:9\r\n:3\r\n*2\r\n" . '$9' . "\r\n127.0.0.1\r\n:$port\r\n");
$fake->script(FakeRedis::ints(1, 9, 0, 1_900_003_600_000_000, 1, 1_900_000_000_000_000, 0, 1_900_003_600_000_000));
($out, $err) = run_sql(q{SELECT * FROM rl_attempt('h:2', 10, '1 hour', 1, 'error')});
like($err, qr/ERROR:\s+080\d\d: .*no usable slot map/s, 'a slot map with start > end is refused');

# rl_attempt_all over two slots with a counting algorithm: two reserves
# (counter_all.lua, one a slot), then two confirms (counter_settle.lua),
# each answered by the fake node, which claims every slot. On the test clock
# (2030-01-01 00:10 UTC) a good reserve of fixed_window, lim 10, cost 1,
# one hour, is an admission that leaves 9, resetting at 01:00.
$fake->reply('CLUSTER', $slots);
my $hour = 1_893_459_600_000_000;
my $reserved = FakeRedis::ints(1, 9, 0, $hour, 1, -1, 0, $hour);
sub call_all
{
	my ($policy) = @_;
	my $t0 = time;
	my ($o, $e) = run_sql(qq{SET slidewin.test_now = '2030-01-01 00:10:00+00';
		SELECT allowed, store FROM rl_attempt_all(ARRAY['h:1','h:2'], ARRAY[10,10],
		  ARRAY['1 hour','1 hour']::interval[], algorithm => 'fixed_window',
		  on_redis_error => '$policy')});
	return ($o, $e, time - $t0);
}
$fake->script($reserved, $reserved, FakeRedis::ints(1));
$fake->mark;
($out, $err) = call_all('error');
is($out, 't|redis', 'counting keys over two slots: reserved and confirmed, admitted') or diag($err);
is(sends(), 4, 'two reserves and two confirms: the keys lie in two slots');
my @hostile = (
	[ 'a confirm that says not confirmed', FakeRedis::ints(0), qr/reservation of rl_attempt_all ended before it was confirmed/ ],
	[ 'a confirm of the wrong length', FakeRedis::ints(1, 1), qr/confirm reply of rl_attempt_all's reservations has 2 elements/ ],
	[ 'a confirm of the wrong type', "+OK\r\n", qr/confirm reply of rl_attempt_all's reservations is/ ],
	[ 'a confirm element not 0 or 1', FakeRedis::ints(7), qr/is not 0 or 1/ ],
	[ 'a confirm answered by an error', "-ERR boom\r\n", qr/boom/ ],
	[ 'a confirm redirected forever', "-MOVED 1234 127.0.0.1:$port\r\n", qr/kept redirecting/ ],
);
foreach my $h (@hostile)
{
	my ($what, $reply, $why) = @$h;
	$fake->script($reserved, $reserved, $reply);
	my ($o, $e, $took) = call_all('error');
	is($o, '', "$what: no admission under the error policy");
	like($e, $why, "$what: an ERROR that says why");
	cmp_ok($took, '<', 2, sprintf('%s: and no hang (%.2f s)', $what, $took));
	$fake->script($reserved, $reserved, $reply);
	($o, $e) = call_all('deny');
	if ($reply =~ /^-ERR/)
	{
		# an error reply is an ERROR whatever the policy, as for rl_attempt
		is($o, '', "$what: no admission under the deny policy either");
		like($e, qr/ERROR:  38000: Redis rejected a slidewin command/, "$what: an ERROR whatever the policy");
	}
	else
	{
		is($o, 'f|none', "$what: the deny policy denies it") or diag($e);
	}
}
# A reserve reply no script could give: refused before any confirm.
$fake->script($reserved, FakeRedis::ints(1, 9, 0, $hour, 1, -1, 0));
$fake->mark;
my ($o7, $e7) = call_all('error');
is($o7, '', 'a reserve of the wrong length: no admission');
like($e7, qr/rl_attempt_all reply has 7 elements/, 'a reserve of the wrong length: refused, saying why');
$fake->script($reserved, FakeRedis::ints(3, 9, 0, $hour, 1, -1, 0, $hour));
($o7, $e7) = call_all('error');
is($o7, '', 'a reserve that says "room, not charged" while no key denies: no admission');
like($e7, qr/admits no key, but no key denies/, 'and it is refused, saying why');

# Last, since the fallback store's admissions are then carried to the fake
# node before each later call: the fallback policy decides the call.
$fake->script($reserved, $reserved, FakeRedis::ints(0));
($o7, $e7) = call_all('fallback');
is($o7, 't|fallback', 'a confirm that says not confirmed: the fallback policy decides the call') or diag($e7);

unlike(slurp_file($node->logfile), qr/PANIC|terminated by signal/, 'no crash');
done_testing();
