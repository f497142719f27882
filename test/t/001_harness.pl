# The harness itself: SlidewinTest starts a Redis we can kill and bring back,
# and a node that has the extension and points at that Redis.  If this fails,
# the other TAP results say nothing.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
is($redis->cli('ping'), 'PONG', 'our redis answers PING');
is($redis->cli('set', 'harness:k', 'v'), 'OK', 'SET works');
is($redis->cli('get', 'harness:k'), 'v', 'GET reads it back');
like($redis->cli('debug', 'sleep', '0'), qr/^OK$/, 'DEBUG is enabled');

# The server is the one asked for: redis-server, or valkey-server when
# SLIDEWIN_REDIS_SERVER says so (make test runs the suites against both).
my $info = $redis->cli('info', 'server');
if ($SlidewinTest::server_bin =~ /valkey/)
{
	like($info, qr/^valkey_version:([8-9]|[1-9][0-9])\./m, 'the server under test is Valkey 8 or later');
}
else
{
	unlike($info, qr/^valkey_version:/m, 'the server under test is not Valkey');
	like($info, qr/^redis_version:(6\.2|[7-9]|[1-9][0-9])\./m, 'the server under test is Redis 6.2 or later');
}

my $node = SlidewinTest::new_node('main', $redis);
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'node answers SELECT 1');
is( $node->safe_psql(
		'postgres',
		"SELECT extname FROM pg_extension WHERE extname = 'slidewin'"),
	'slidewin',
	'extension is created');
is($node->safe_psql('postgres', "SHOW slidewin.redis_url"),
	$redis->url, 'slidewin.redis_url points at our redis');

# kill9 and restart keep the port but, with no persistence, not the data.
my $old_pid = $redis->pid;
$redis->kill9;
my ($out, $err, $status) = $redis->cli('ping');
isnt($status, 0, 'PING fails after kill9');
like($err, qr/Could not connect/, 'redis-cli cannot connect after kill9');
$redis->restart;
isnt($redis->pid, $old_pid, 'restart gives a new process');
is($redis->cli('ping'), 'PONG', 'PING answers again on the same port');
is($redis->cli('exists', 'harness:k'), '0', 'data did not survive the kill');

$redis->stop;
(undef, undef, $status) = $redis->cli('ping');
isnt($status, 0, 'PING fails after stop');

done_testing();
