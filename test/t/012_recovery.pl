# The very next call succeeds after SCRIPT FLUSH, CLIENT KILL and a Redis
# restart; WRONGTYPE is an error with Redis's text; 100k calls and 2,000
# reconnects leak neither sockets nor memory.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
# Under AddressSanitizer (the sanitize pass) a freed block waits in a
# quarantine of up to 256 MB before it is reused, so the memory check below
# would see the quarantine fill up.  Without one, freed memory is reused at
# once and growth means a leak again.  Elsewhere this changes nothing.
SlidewinTest::asan_options('quarantine_size_mb=0');
# These tests are about the Redis path itself: failures must surface as
# errors (not go to the fallback store), and every call must try Redis.
my $node = SlidewinTest::new_node('recovery', $redis,
	[ "slidewin.on_redis_error = 'error'", 'slidewin.redis_retry_interval = 0' ]);
my $s     = $node->background_psql('postgres', on_error_stop => 0);

sub call
{
	my ($sql) = @_;
	$s->{stderr} = '';
	my $out = $s->query($sql);
	return ($out, $s->{stderr});
}

my $attempt = "SELECT (r).store || ' ' || (r).allowed || ' ' || (r).remaining FROM rl_attempt('tap:r', 100, '1 hour') r";

my ($out, $err) = call($attempt);
is($out, 'redis true 99', 'first call');

is($redis->cli('script', 'flush'), 'OK', 'SCRIPT FLUSH');
($out, $err) = call($attempt);
is($out, 'redis true 98', 'the call right after SCRIPT FLUSH succeeds and keeps the count');
is($err, '', 'no error after SCRIPT FLUSH');

my $killed = $redis->cli('client', 'kill', 'type', 'normal');
cmp_ok($killed, '>=', 1, "CLIENT KILL closed our connection ($killed)");
($out, $err) = call($attempt);
is($out, 'redis true 97', 'the call right after CLIENT KILL succeeds');
is($err, '', 'no error after CLIENT KILL');

$redis->kill9;
$redis->restart;
($out, $err) = call($attempt);
is($out, 'redis true 99', 'the call right after a Redis restart succeeds (data gone with the restart)');
is($err, '', 'no error after the restart');

$redis->stop;
($out, $err) = call($attempt);
like($err, qr/slidewin could not reach Redis/, 'Redis down: an error');
$s->{stderr} = '';
($out, $err) = call(q{SELECT 1 FROM rl_attempt('tap:r', 100, '1 hour'); \echo :LAST_ERROR_SQLSTATE});
like($out, qr/0800[16]/, 'Redis down: SQLSTATE 08001/08006');
$redis->restart;
($out, $err) = call($attempt);
is($out, 'redis true 99', 'the first call after Redis is back succeeds');

# A key of the wrong type is an error with Redis's own text.
$redis->cli('set', 'slidewin:log:tap:str', 'not a zset');
($out, $err) = call("SELECT rl_attempt('tap:str', 5, '1 minute')");
like($err, qr/holds a value of another type/, 'WRONGTYPE: clear error');
like($err, qr/DETAIL:.*WRONGTYPE/, 'WRONGTYPE: Redis text in DETAIL');
($out, $err) = call($attempt);
is($out, 'redis true 98', 'the connection is still good after WRONGTYPE');

# Leaks: file descriptors and memory of the backend, Redis client count.
# What is measured is what stays behind, not speed: generous command and
# connect timeouts, so that a machine busy elsewhere cannot fail one of the
# 110k calls (a 100 ms stall once did, in a CI run) or one of the 2,000
# connections (a lookup of localhost once ran past the 200 ms connect
# timeout, in a CI run sharing the machine with a benchmark).
call(q{SET slidewin.command_timeout = '10s'});
call(q{SET slidewin.connect_timeout = '10s'});
my ($pid) = call('SELECT pg_backend_pid()');
like($pid, qr/^\d+$/, 'backend pid known');
# Sockets and epoll sets: what a leaked Redis connection would leave behind
# (relation files that PostgreSQL opens for new queries are not counted).
sub fd_count
{
	opendir(my $d, "/proc/$pid/fd") or return -1;
	my @f = grep { (readlink("/proc/$pid/fd/$_") // '') =~ /^(socket:|anon_inode:\[eventpoll\])/ }
	  grep { !/^\./ } readdir($d);
	return scalar @f;
}
sub rss_kb
{
	open(my $f, '<', "/proc/$pid/status") or return -1;
	# private memory only: RSS would also count shared buffers the backend touches
	while (<$f>) { return $1 if /^RssAnon:\s+(\d+)/ }
	return -1;
}
sub redis_clients { my ($n) = $redis->cli('info', 'clients') =~ /connected_clients:(\d+)/; return $n }

call(q{SELECT count(*) FROM generate_series(1, 10000) g WHERE rl_allow('tap:leak' || (g % 100), 1000000, '1 minute')});
my ($fd0, $rss0, $cl0) = (fd_count(), rss_kb(), redis_clients());
cmp_ok($fd0, '>=', 3, "the backend's sockets and epoll sets can be counted ($fd0)");
cmp_ok($rss0, '>', 500, "the backend's RSS can be read ($rss0 kB)");
cmp_ok($cl0, '>=', 1, "Redis counts our connection ($cl0)");
($out, $err) = call(q{SELECT count(*) FROM generate_series(1, 100000) g WHERE rl_allow('tap:leak' || (g % 100), 1000000, '1 minute')});
is($out, '100000', '100k calls admitted');
my ($fd1, $rss1, $cl1) = (fd_count(), rss_kb(), redis_clients());
is($fd1, $fd0, "no file descriptor leaked over 100k calls ($fd0 -> $fd1)");
cmp_ok($rss1 - $rss0, '<', 2048, "backend memory grew less than 2 MB over 100k calls ($rss0 kB -> $rss1 kB)");

# 2,000 reconnects: each change of URL drops the connection and opens another.
my $port = $redis->port;
($out, $err) = call(qq{
	SELECT count(*) FROM generate_series(1, 2000) g,
	LATERAL (SELECT set_config('slidewin.redis_url',
		CASE WHEN g % 2 = 0 THEN 'redis://127.0.0.1:$port' ELSE 'redis://localhost:$port' END, false)) s
	WHERE rl_allow('tap:reconnect' || g, 10, '1 minute')});
is($out, '2000', '2,000 calls, each on a new connection');
# the last URL change dropped the connection; open it again to compare like with like
call("RESET slidewin.redis_url; SELECT rl_allow('tap:reconnect', 10, '1 minute')");
my ($fd2, $cl2) = (fd_count(), redis_clients());
is($fd2, $fd0, "no file descriptor leaked over 2,000 reconnects ($fd0 -> $fd2)");
is($cl2, $cl0, "Redis sees no more clients than before ($cl0 -> $cl2)");

$s->quit;
done_testing();
