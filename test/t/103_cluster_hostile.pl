# Redis Cluster routing against a fake node (test/perl/fake_redis.pl) that
# claims every slot and then answers however the test likes:
#
#  - MOVED (or ASK) to itself forever: the call gives up after 5
#    redirections (6 sends; ASKING before each send on an ASK), and its
#    policy applies;
#  - a redirection that cannot be read, a slot map that cannot be read:
#    refused with a message that says so, never believed;
#  - CLUSTERDOWN: "not now", the policy applies;
#  - TRYAGAIN forever: waited out only until the call's deadline.
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

unlike(slurp_file($node->logfile), qr/PANIC|terminated by signal/, 'no crash');
done_testing();
