# Host-name lookups never hold a backend: a lookup that hangs ends at
# slidewin.connect_timeout and can be cancelled at once, and a name is
# resolved again on every connect.
#
# A DNS server that never answers is needed, on this machine only.  So the
# script runs itself inside unprivileged namespaces: a network namespace
# with only its own loopback (nothing here can reach another host), a mount
# namespace in which /etc/resolv.conf names a silent server on 127.0.0.1:53
# and /etc/hosts gives names to loopback, and, nested, a user namespace in
# which the test runs as the same non-root user as the other TAP scripts.
use strict;
use warnings;

# Stage 1 runs before any test module loads (they redirect the output).
BEGIN
{
	return if ($ENV{SLIDEWIN_DNS_STAGE} // '') eq 'inner';
	# Stage 1, as root of a new user namespace: loopback up, the files
	# mounted over, a silent DNS server, then stage 2 as our own user.
	require File::Temp;
	my $dir = File::Temp::tempdir('dns_XXXX', DIR => $ENV{TESTDIR} // '/tmp', CLEANUP => 0);
	my $uid = $<;
	my $gid = (split ' ', $()[0];
	open my $fh, '>', "$dir/resolv.conf" or die $!;
	print $fh "nameserver 127.0.0.1\noptions timeout:20 attempts:1\n";
	close $fh;
	open $fh, '>', "$dir/hosts" or die $!;
	print $fh "127.0.0.1 localhost\n127.0.0.1 redis-a.test\n127.0.0.2 redis-b.test\n";
	close $fh;
	my $dns = q{
		use IO::Socket::INET;
		my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 53,
			Proto => 'udp') or die "dns: $!";
		print STDERR "silent dns on 127.0.0.1:53\n";
		my $buf;
		while (1) { $s->recv($buf, 2048); open my $l, '>>', $ARGV[0]; print $l length($buf), "\n"; }
	};
	$ENV{SLIDEWIN_DNS_STAGE} = 'inner';
	$ENV{SLIDEWIN_DNS_DIR}   = $dir;
	$dns =~ s/'/'\\''/g;
	my $script = join '; ',
	  'set -e',
	  'ip link set lo up',
	  qq{mount --bind '$dir/resolv.conf' /etc/resolv.conf},
	  qq{mount --bind '$dir/hosts' /etc/hosts},
	  qq{perl -e '$dns' '$dir/queries' & echo \$! > '$dir/dns.pid'},
	  'sleep 0.3',
	  qq{exec unshare --user --map-user=$uid --map-group=$gid "\$@"};
	exec('unshare', '--user', '--map-root-user', '--mount', '--net',
		'sh', '-c', $script, 'sh', $^X, (map { "-I$_" } @INC), $0);
	die "cannot run unshare (unprivileged user namespaces are needed): $!";
}

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest;

# The silent DNS server lives as long as the test, not longer.
END
{
	if (open my $p, '<', "$ENV{SLIDEWIN_DNS_DIR}/dns.pid")
	{
		my $pid = <$p>;
		kill 'KILL', $pid if $pid && $pid =~ /^\d+$/;
	}
}

my $redis = SlidewinTest::start_redis();
my $port  = $redis->port;
my $node  = SlidewinTest::new_node('dns', undef,
	[ "slidewin.redis_url = 'redis://redis-a.test:$port'",
	  'slidewin.redis_retry_interval = 0' ]);

sub timed
{
	my ($sql) = @_;
	my $t0 = time;
	my ($ret, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		on_error_stop => 1);
	return ($out, $err, time - $t0);
}

my ($out, $err, $dt) = timed(
	q{SELECT (r).allowed, (r).store FROM rl_attempt('d', 10, '1 minute', 1, 'error') r});
is($out, 't|redis', 'a host name from /etc/hosts: connected through the resolver');

# A name only the silent DNS server could know: the lookup hangs.
($out, $err, $dt) = timed(
	q{SET slidewin.connect_timeout = '300ms';
	  SET slidewin.redis_url = 'redis://hangs.test:6379';
	  SELECT (r).allowed, (r).store FROM rl_attempt('d', 10, '1 minute', 1, 'fallback') r});
is($out, 't|fallback', 'a hanging lookup: the call follows its policy');
cmp_ok($dt, '<', 2.5, sprintf('and returns within connect_timeout (%.2f s; DNS waits 20 s)', $dt));
ok(-s "$ENV{SLIDEWIN_DNS_DIR}/queries", 'the silent DNS server was asked');

($out, $err, $dt) = timed(
	q{SET slidewin.connect_timeout = '300ms';
	  SET slidewin.redis_url = 'redis://hangs.test:6379';
	  SELECT * FROM rl_attempt('d', 10, '1 minute', 1, 'error')});
like($err, qr/ERROR:\s+08001: .*could not resolve the Redis host name.*timed out/s,
	'under the error policy: 08001 naming the lookup');

# A long connect_timeout, and a cancel while the lookup hangs.
my $bg = $node->background_psql('postgres', on_error_stop => 0);
my $pid = $bg->query_safe('SELECT pg_backend_pid()');
$bg->query_safe(q{SET slidewin.connect_timeout = '60s'});
$bg->query_safe(q{SET slidewin.redis_url = 'redis://hangs.test:6379'});
$bg->{stdin} .= q{SELECT * FROM rl_attempt('d', 10, '1 minute', 1, 'error');} . "\n";
$bg->{run}->pump_nb;
usleep(500_000);
my $t0 = time;
$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
my $waited = 0;
until ($bg->{stderr} =~ /canceling statement/ || $waited > 10)
{
	$bg->{run}->pump_nb;
	usleep(20_000);
	$waited = time - $t0;
}
like($bg->{stderr}, qr/canceling statement due to user request/, 'a hanging lookup is cancelled');
cmp_ok($waited, '<', 1, sprintf('within %.2f s of pg_cancel_backend', $waited));
$bg->{stderr} = '';
is($bg->query_safe('SELECT 1'), '1', 'the session goes on');
$bg->quit;

# statement_timeout ends it too.
($out, $err, $dt) = timed(
	q{SET slidewin.connect_timeout = '60s';
	  SET slidewin.redis_url = 'redis://hangs.test:6379';
	  SET statement_timeout = '400ms';
	  SELECT * FROM rl_attempt('d', 10, '1 minute', 1, 'error')});
like($err, qr/canceling statement due to statement timeout/, 'statement_timeout ends a hanging lookup');
cmp_ok($dt, '<', 2, sprintf('in %.2f s', $dt));

# A numeric address is never looked up. A backend keeps at most 8 lookups
# that it gave up on while they still hang; past that it refuses to start
# another one, but an address such as 127.0.0.1 needs none, so it still
# connects.
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe(q{SET slidewin.connect_timeout = '50ms'});
	$s->query_safe(q{SET slidewin.redis_url = 'redis://hangs.test:6379'});
	my $stores = join ',', map {
		$s->query_safe(q{SELECT (r).store FROM rl_attempt('d', 10, '1 minute', 1, 'fallback') r})
	} 1 .. 9;
	is($stores, join(',', ('fallback') x 9), '9 lookups of a name that hangs: each call falls back');
	$s->query_safe('\\set VERBOSITY verbose');
	my (undef, $err) = SlidewinTest::session_sql($s, q{SELECT * FROM rl_attempt('d', 10, '1 minute', 1, 'error')});
	like($err, qr/ERROR:\s+08001: .*could not resolve the Redis host name.*Earlier lookups of this backend have not finished/s,
		'with 8 of them still hanging, another lookup is refused');
	# The connect itself (TCP, HELLO) gets a timeout a loaded machine
	# cannot miss (50 ms once did, in CI): a lookup is refused before any
	# wait, so the check still tells the two paths apart.
	$s->query_safe(q{SET slidewin.connect_timeout = '2s'});
	$s->query_safe("SET slidewin.redis_url = 'redis://127.0.0.1:$port'");
	my ($out, $err2) = SlidewinTest::session_sql($s,
		q{SELECT (r).allowed, (r).store FROM rl_attempt('numeric', 10, '1 minute', 1, 'error') r});
	is($out, 't|redis', 'but 127.0.0.1 connects: a numeric address needs no lookup')
	  or diag($err2);
	$s->quit;
}

# The name is resolved on every connect: moving it to another address (as a
# failover of a managed endpoint does) is seen at the next connection.
($out) = timed(qq{SET slidewin.redis_url = 'redis://redis-b.test:$port';
	SELECT (r).store FROM rl_attempt('d', 10, '1 minute', 1, 'fallback') r});
is($out, 'fallback', 'redis-b.test is 127.0.0.2, where no Redis listens');
open my $hosts, '+<', "$ENV{SLIDEWIN_DNS_DIR}/hosts" or die $!;
truncate $hosts, 0;
print $hosts "127.0.0.1 localhost\n127.0.0.1 redis-a.test\n127.0.0.1 redis-b.test\n";
close $hosts;
($out) = timed(qq{SET slidewin.redis_url = 'redis://redis-b.test:$port';
	SELECT (r).store FROM rl_attempt('d', 10, '1 minute', 1, 'fallback') r});
is($out, 'redis', 'once redis-b.test moves to 127.0.0.1, the next connect finds Redis');

unlike(slurp_file($node->logfile), qr/PANIC|terminated by signal/, 'no crash');
done_testing();
