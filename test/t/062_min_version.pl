# slidewin needs Redis 6.2 or later (ZRANGE ... REV).  At connect it asks
# the server its version with HELLO and refuses an older one with one clear
# error naming the version, whatever the call site's failure policy: a
# server that is too old stays too old, so falling back would hide it.
# Fake servers on loopback play the old versions; the real Redis passes.
use strict;
use warnings;

use IO::Socket::INET;
use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

# A server that answers HELLO with $hello (raw RESP) and anything else with
# +OK; it lives in a child process killed at the end.
my @children;

sub fake_server
{
	my ($hello) = @_;
	my $listen = IO::Socket::INET->new(
		LocalAddr => '127.0.0.1',
		LocalPort => 0,
		Listen    => 8,
		ReuseAddr => 1) or die "listen: $!";
	my $port = $listen->sockport;
	my $pid  = fork // die "fork: $!";
	if ($pid == 0)
	{
		while (my $c = $listen->accept)
		{
			my $buf = '';
			while (sysread($c, $buf, 4096, length $buf))
			{
				# one RESP command at a time: *N, then N bulk strings
				while ($buf =~ /\A\*(\d+)\r\n/)
				{
					my ($n, $pos, @args) = ($1, length($&));
					my $ok = 1;
					for (1 .. $n)
					{
						if (substr($buf, $pos) =~ /\A\$(\d+)\r\n/
							&& length($buf) >= $pos + length($&) + $1 + 2)
						{
							push @args, substr($buf, $pos + length($&), $1);
							$pos += length($&) + $1 + 2;
						}
						else { $ok = 0; last; }
					}
					last unless $ok;
					$buf = substr($buf, $pos);
					syswrite($c, uc($args[0]) eq 'HELLO' ? $hello : "+OK\r\n");
				}
			}
			close $c;
		}
		exit 0;
	}
	push @children, $pid;
	close $listen;
	return $port;
}

END { kill 'KILL', @children if @children; }

my $redis = SlidewinTest::start_redis();
my $node  = SlidewinTest::new_node('minver', $redis, [ 'slidewin.redis_retry_interval = 0' ]);

sub attempt_at
{
	my ($port, $policy) = @_;
	my ($ret, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\nSET slidewin.redis_url = 'redis://127.0.0.1:$port';\n"
		  . "SELECT (r).allowed, (r).store FROM rl_attempt('v', 10, '1 minute', 1, '$policy') r",
		on_error_stop => 1);
	return ($out, $err);
}

sub hello_reply
{
	my ($server, $version) = @_;
	my @kv = (server => $server, version => $version, proto => undef, id => undef,
		mode => 'standalone', role => 'master');
	my $s = '*14' . "\r\n";
	while (my ($k, $v) = splice(@kv, 0, 2))
	{
		$s .= '$' . length($k) . "\r\n$k\r\n";
		$s .= defined $v ? '$' . length($v) . "\r\n$v\r\n" : ":2\r\n";
	}
	return $s . "\$7\r\nmodules\r\n*0\r\n";
}

my ($out, $err) = attempt_at($redis->port, 'error');
is($out, 't|redis', 'Redis 7: accepted');

for my $case (
	[ 'Redis 6.0.9', hello_reply('redis', '6.0.9'), qr/It is version 6\.0\.9; slidewin needs Redis 6\.2 or later/ ],
	[ 'Redis 5 (no HELLO)', "-ERR unknown command 'HELLO', with args beginning with: '2' \r\n",
	  qr/older than Redis 6\.0; slidewin needs Redis 6\.2 or later/ ],
	[ 'no version field', "*2\r\n\$6\r\nserver\r\n\$5\r\nredis\r\n", qr/did not say which version/ ],
	[ 'garbage version', hello_reply('redis', 'x.y'), qr/did not say which version/ ])
{
	my ($name, $reply, $detail) = @$case;
	my $port = fake_server($reply);
	for my $policy (qw(fallback allow error))
	{
		($out, $err) = attempt_at($port, $policy);
		like($err, qr/ERROR:\s+0A000: slidewin cannot use this Redis server/,
			"$name, policy $policy: error 0A000");
		like($err, $detail, "$name, policy $policy: the detail says why");
		is($out, '', "$name, policy $policy: no answer");
	}
}

# The oldest supported release and Valkey's numbering pass.
for my $case ([ 'redis', '6.2.0' ], [ 'valkey', '8.0.1' ])
{
	my $port = fake_server(hello_reply(@$case));
	($out, $err) = attempt_at($port, 'error');
	unlike($err, qr/0A000/, "$case->[0] $case->[1]: accepted at connect");
}

unlike(slurp_file($node->logfile), qr/PANIC|terminated by signal/, 'no crash');
done_testing();
