# rediss://: TLS to one Redis, with a throwaway CA made by openssl here.
#
#  - full verification (chain and host name), ca (chain only), none;
#  - every handshake failure is a connection failure (class 08) naming
#    OpenSSL's reason, and goes to the call's policy: unknown CA, name
#    mismatch (a localhost certificate through 127.0.0.1), expired
#    certificate, a client certificate demanded and missing, TLS spoken to a
#    plain port (ends at connect_timeout, never hangs);
#  - mutual TLS with slidewin.redis_tls_cert_file/key_file;
#  - 8 clients on one key admit exactly lim over TLS;
#  - a CLIENT PAUSEd TLS server yields to statement_timeout at once;
#  - thousands of pipelined refund replies are read although OpenSSL holds
#    most of them decrypted (the SSL_pending path);
#  - no memory growth over 100k calls, once warmed up.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest;

my $d = PostgreSQL::Test::Utils::tempdir('tls');

# A CA, and leaf certificates it signs: name, SAN, days (negative: expired).
SlidewinTest::make_ca($d);
SlidewinTest::make_ca($d, 'other');
sub leaf { return SlidewinTest::make_leaf($d, @_) }
my ($srv_crt, $srv_key)     = leaf('localhost', 'DNS:localhost', 2);
my ($wrong_crt, $wrong_key) = leaf('wrong',     'DNS:wrong.example', 2);
my ($old_crt, $old_key)     = leaf('expired',   'DNS:localhost', -1);
my ($cli_crt, $cli_key)     = leaf('client',    'DNS:slidewin-client', 2);

my %tls = (cert => $srv_crt, key => $srv_key, ca => "$d/ca.crt");
my $redis  = SlidewinTest::start_redis(tls => {%tls});
my $wrong  = SlidewinTest::start_redis(tls => { %tls, cert => $wrong_crt, key => $wrong_key });
my $old    = SlidewinTest::start_redis(tls => { %tls, cert => $old_crt, key => $old_key });
my $mutual = SlidewinTest::start_redis(
	tls => { %tls, auth_clients => 'yes', client_cert => $cli_crt, client_key => $cli_key });
my $plain  = SlidewinTest::start_redis();
my $port   = $redis->port;

# Under the sanitize pass, ASan's quarantine would hide freed memory from the
# growth check below; without the sanitizer this changes nothing.
SlidewinTest::asan_options('quarantine_size_mb=0');
my $node = SlidewinTest::new_node('tls', undef,
	[ "slidewin.redis_url = 'rediss://localhost:$port'",
	  "slidewin.redis_tls_ca_file = '$d/ca.crt'",
	  "shared_preload_libraries = 'slidewin'",
	  'slidewin.redis_retry_interval = 0',
	  # What this file checks is each handshake's verdict, not its speed: on
	  # a loaded machine a handshake (a name lookup, TCP, TLS with a client
	  # certificate) took longer than the default 200 ms, and mutual TLS
	  # failed as a timeout. The checks of speed set their own timeouts.
	  "slidewin.connect_timeout = '2s'",
	  'max_connections = 40' ]);

# psql with SQLSTATEs in stderr; returns stdout, stderr, seconds taken.
sub run_sql { return SlidewinTest::node_sql($node, @_) }

sub call_at
{
	my ($url, $policy, $extra) = @_;
	$extra //= '';
	return run_sql(qq{SET slidewin.redis_url = '$url'; $extra
		SELECT (r).allowed, (r).store FROM rl_attempt('t', 100, '1 hour', 1, '$policy') r});
}

my ($out, $err, $dt) = call_at("rediss://localhost:$port", 'error');
is($out, 't|redis', 'rediss://localhost, full verification: answered by Redis');
is($err, '', 'no error');
like($redis->cli('client', 'list'), qr/cmd=client\|list/, 'redis-cli reaches the TLS server too');

# A certificate for localhost, used through 127.0.0.1.
($out, $err) = call_at("rediss://127.0.0.1:$port", 'error');
like($err, qr/ERROR:\s+08\d\d\d: .*certificate verify failed: IP address mismatch/s,
	'full: a localhost certificate through 127.0.0.1 is refused (08)');
($out, $err) = call_at("rediss://127.0.0.1:$port", 'fallback');
is($out, 't|fallback', 'and the call follows its policy');
($out, $err) = call_at("rediss://127.0.0.1:$port", 'error', "SET slidewin.redis_tls_verify = 'ca';");
is($out, 't|redis', 'ca: the chain alone passes');

# The wrong name, an unknown CA, an expired certificate.
($out, $err) = call_at('rediss://localhost:' . $wrong->port, 'error');
like($err, qr/ERROR:\s+08\d\d\d: .*certificate verify failed: hostname mismatch/s,
	'a certificate for another name is refused');
($out, $err) = call_at('rediss://localhost:' . $wrong->port, 'error', "SET slidewin.redis_tls_verify = 'ca';");
is($out, 't|redis', 'ca: the name is not checked');
($out, $err) = call_at("rediss://localhost:$port", 'error',
	"SET slidewin.redis_tls_ca_file = '$d/other.crt';");
like($err, qr/ERROR:\s+08\d\d\d: .*certificate verify failed: (unable to get local issuer certificate|self-signed certificate in certificate chain)/s,
	'a CA bundle that does not hold the issuer: refused');
# The system's trust store is a few hundred certificates, read and parsed
# within the handshake: on a busy machine (a sanitize pass, the CI's chroot
# preparation installing packages beside it) that took longer than the
# default connect_timeout of 200 ms, and the call ended in "The TLS
# handshake timed out" before any verification. What is checked is the
# verification's verdict, not its speed: give it 2 s.
($out, $err) = call_at("rediss://localhost:$port", 'error',
	"SET slidewin.redis_tls_ca_file = ''; SET slidewin.connect_timeout = '2s';");
like($err, qr/certificate verify failed/, "the system's trust store does not know the test CA");
($out, $err) = call_at("rediss://localhost:$port", 'error',
	"SET slidewin.redis_tls_ca_file = ''; SET slidewin.redis_tls_verify = 'none';");
is($out, 't|redis', 'none: no verification at all');
($out, $err) = call_at('rediss://localhost:' . $old->port, 'error');
like($err, qr/ERROR:\s+08\d\d\d: .*certificate verify failed: certificate has expired/s,
	'an expired certificate is refused');
($out, $err) = call_at("rediss://localhost:$port", 'error',
	"SET slidewin.redis_tls_ca_file = '$d/missing.crt';");
like($err, qr/ERROR:\s+08\d\d\d: .*could not load the CA bundle/s, 'a missing CA file: 08, named');

# Mutual TLS.
($out, $err) = call_at('rediss://localhost:' . $mutual->port, 'error');
like($err, qr/ERROR:\s+08\d\d\d: /, 'a server that demands a client certificate: refused without one');
like($err, qr/certificate required|handshake failure|alert/i, "OpenSSL's reason is in DETAIL");
($out, $err) = call_at('rediss://localhost:' . $mutual->port, 'fallback');
is($out, 't|fallback', 'and the call follows its policy');
my $pair = "SET slidewin.redis_tls_cert_file = '$cli_crt'; SET slidewin.redis_tls_key_file = '$cli_key';";
($out, $err) = call_at('rediss://localhost:' . $mutual->port, 'error', $pair);
is($out, 't|redis', 'with slidewin.redis_tls_cert_file and key_file: mutual TLS works')
  or diag($err);
chmod 0644, $cli_key;
($out, $err) = call_at('rediss://localhost:' . $mutual->port, 'error', $pair);
like($err, qr/redis_tls_key_file .* must be a regular file owned by the server's user with mode 0600/,
	'a private key readable by others is refused');
chmod 0600, $cli_key;
($out, $err) = call_at('rediss://localhost:' . $mutual->port, 'error',
	"SET slidewin.redis_tls_cert_file = '$cli_crt';");
like($err, qr/must be set together/, 'a certificate without its key is refused');

# TLS spoken to a plain-text port: refused, within connect_timeout.
($out, $err, $dt) = call_at('rediss://localhost:' . $plain->port, 'error',
	"SET slidewin.connect_timeout = '500ms';");
like($err, qr/ERROR:\s+08\d\d\d: /, 'TLS to a plain port: a connection failure');
cmp_ok($dt, '<', 2.5, sprintf('ended in %.2f s (connect_timeout 500 ms), never hangs', $dt));
($out, $err) = call_at('redis://localhost:' . $port, 'error', "SET slidewin.connect_timeout = '500ms';");
like($err, qr/ERROR:\s+08\d\d\d: /, 'plain text to the TLS port: a connection failure');

# ---------------------------------------------------------------------
# Exactness: 8 clients, one key, over TLS.
# ---------------------------------------------------------------------
$node->safe_psql('postgres', 'CREATE TABLE adm (ok bool)');
my $script = "$d/bench.sql";
open my $fh, '>', $script or die $!;
print $fh "INSERT INTO adm SELECT true WHERE rl_allow('tls:exact', 100, '1 hour');\n";
close $fh;
my ($bout, $berr) = ('', '');
IPC::Run::run(
	[ 'pgbench', '-n', '-c', '8', '-j', '2', '-t', '40', '-f', $script,
	  '-h', $node->host, '-p', $node->port, 'postgres' ],
	'<', \undef, '>', \$bout, '2>', \$berr);
like($bout, qr/number of transactions actually processed: 320/, 'pgbench: 320 calls, none failed');
is($node->safe_psql('postgres', 'SELECT count(*) FROM adm'), '100',
	'8 clients over TLS: exactly lim = 100 admitted');

# ---------------------------------------------------------------------
# A paused TLS server yields to statement_timeout at once.
# ---------------------------------------------------------------------
$redis->pause_ms(4000);
($out, $err, $dt) = run_sql(q{SET slidewin.command_timeout = '30s'; SET statement_timeout = '300ms';
	SELECT * FROM rl_attempt('tls:pause', 10, '1 hour', 1, 'error')});
like($err, qr/canceling statement due to statement timeout/, 'CLIENT PAUSE: statement_timeout ends the wait');
cmp_ok($dt, '<', 1.5, sprintf('at once (%.2f s)', $dt));
$redis->cli('client', 'unpause');

# ---------------------------------------------------------------------
# Thousands of refund replies, pipelined, arrive in TLS records larger than
# one read: OpenSSL holds the rest decrypted, and the socket does not say so.
# ---------------------------------------------------------------------
($out, $err, $dt) = run_sql(q{
	SET slidewin.command_timeout = '2s';
	BEGIN;
	SELECT count(*) FILTER (WHERE (r).allowed) FROM generate_series(1, 4000) g,
	       LATERAL rl_attempt('tls:refund', 100000, '1 hour', 1 + 0 * g, 'error', true) r;
	ROLLBACK;
	SELECT (r).remaining, (r).store FROM rl_peek('tls:refund', 100000, '1 hour', 'error') r;
	SELECT refunded, refunds_dropped FROM rl_backend_stats()});
is($out, "4000\n100000|redis\n4000|0",
	'4,000 refunds over TLS: all given back, none dropped');
is($err, '', 'no error or warning');
cmp_ok($dt, '<', 10, sprintf('in %.2f s', $dt));

# ---------------------------------------------------------------------
# No growth over 100k calls on one TLS connection: after a first 100k, the
# second 100k add no more private memory than the same calls over plain TCP.
# ---------------------------------------------------------------------
sub growth
{
	my ($url) = @_;
	my $bg = $node->background_psql('postgres');
	my $pid = $bg->query_safe('SELECT pg_backend_pid()');
	my $rss = sub {
		open my $st, '<', "/proc/$pid/status" or die $!;
		while (<$st>) { return $1 if /^RssAnon:\s+(\d+) kB/; }
		die 'no RssAnon';
	};
	$bg->query_safe("SET slidewin.redis_url = '$url'");
	# What is measured is memory, not speed: a generous command timeout, so
	# that a machine busy elsewhere cannot fail one of the 300k calls.
	$bg->query_safe("SET slidewin.command_timeout = '10s'");
	# rl_allow in WHERE: per-row memory is freed row by row, so what grows
	# is what slidewin keeps
	my $sql = q{SELECT count(*) FROM generate_series(1, 100000) g
		WHERE rl_allow('leak' || g % 50, 1000000, '1 hour', 1, 'error')};
	# the first two batches warm up (the allocator settles after about
	# 200k calls, over plain TCP as over TLS); the third must not grow
	my $n = $bg->query_safe($sql);
	$n .= '|' . $bg->query_safe($sql);
	my $before = $rss->();
	$n .= '|' . $bg->query_safe($sql);
	my $after = $rss->();
	$bg->quit;
	return ($n, $after - $before);
}
my ($tls_n, $tls_kb) = growth("rediss://localhost:$port");
my ($plain_n, $plain_kb) = growth('redis://127.0.0.1:' . $plain->port);
is($tls_n, '100000|100000|100000', '3 x 100k calls answered by Redis over TLS');
is($plain_n, '100000|100000|100000', 'and over plain TCP');
cmp_ok($tls_kb, '<', 128,
	"the third 100k calls over TLS grew private memory by $tls_kb kB (< 128 kB)");
# A backend's private memory can also shrink between the readings (the
# allocator, or the sanitizer build's quarantine, hands pages back: -312 kB
# over plain TCP in one sanitize run); a shrinking baseline says nothing
# about TLS, so it counts as no growth.
my $plain_grew = $plain_kb > 0 ? $plain_kb : 0;
cmp_ok($tls_kb, '<=', $plain_grew + 64,
	"the third 100k calls grew private memory by $tls_kb kB over TLS, $plain_kb kB over plain TCP");

# ---------------------------------------------------------------------
# Decrypted bytes OpenSSL already holds are read before waiting on the
# socket. A TLS server (a small fake here) answers HELLO with one reply of
# about 10 kB (extra fields, which HELLO may carry) in a single TLS record:
# the backend reads it in 4 kB pieces, so after the first piece the rest is
# inside OpenSSL and the socket has nothing more to announce. A backend that
# waited on the socket there would time out on HELLO.
# ---------------------------------------------------------------------
require IO::Socket::SSL;
no warnings 'once';    # IO::Socket::SSL's error variable is named only here
my $fake = IO::Socket::SSL->new(
	LocalAddr     => '127.0.0.1', LocalPort => 0, Listen => 4, ReuseAddr => 1,
	SSL_server    => 1, SSL_cert_file => $srv_crt, SSL_key_file => $srv_key)
  or die 'fake TLS server: ' . ($IO::Socket::SSL::SSL_ERROR // $!);
my $fake_port = $fake->sockport;
my $now_us = 1893456000000000;    # the test clock below
my $fake_pid = fork // die "fork: $!";
if ($fake_pid == 0)
{
	my $pad = 'x' x 10000;
	my $hello = "*16\r\n" . join('', map { '$' . length($_) . "\r\n$_\r\n" }
		  qw(server redis version 7.0.15 proto), ) . ":2\r\n"
	  . join('', map { '$' . length($_) . "\r\n$_\r\n" } qw(id 7 mode standalone role master pad), $pad)
	  . "\$7\r\nmodules\r\n*0\r\n";
	my $attempt = sprintf("*8\r\n:1\r\n:99\r\n:0\r\n:%d\r\n:1\r\n:%d\r\n:0\r\n:%d\r\n",
		$now_us + 3600_000_000, $now_us, $now_us + 3600_000_000);
	while (my $c = $fake->accept)
	{
		my $buf = '';
		while (1)
		{
			my $n = sysread($c, $buf, 65536, length $buf);
			last unless $n;
			while ($buf =~ /\A\*(\d+)\r\n/)
			{
				my ($argc, $pos, @argv) = ($1, length($&));
				my $complete = 1;
				for (1 .. $argc)
				{
					if (substr($buf, $pos) =~ /\A\$(\d+)\r\n/ && length($buf) >= $pos + length($&) + $1 + 2)
					{
						push @argv, substr($buf, $pos + length($&), $1);
						$pos += length($&) + $1 + 2;
					}
					else { $complete = 0; last }
				}
				last unless $complete;
				$buf = substr($buf, $pos);
				my $cmd = uc $argv[0];
				syswrite($c, $cmd eq 'HELLO' ? $hello : $cmd eq 'EVALSHA' ? $attempt
					: $cmd eq 'FCALL' ? "-ERR unknown command 'FCALL'\r\n" : "+OK\r\n");
			}
		}
		close $c;
	}
	exit 0;
}
close $fake;
($out, $err, $dt) = run_sql(qq{SET slidewin.redis_url = 'rediss://localhost:$fake_port';
	SET slidewin.test_now = '2030-01-01 00:00:00+00';
	SET slidewin.command_timeout = '5s';
	SELECT (r).allowed, (r).remaining, (r).store,
	       round(extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000)
	FROM rl_attempt('pending', 100, '1 hour', 1, 'error') r});
# The time is the call's own (the TLS handshake and HELLO included), not
# psql's start and its connection to PostgreSQL, which took 1.14 s in a
# sanitizer build once. A read that waited on the socket for the rest of
# the record would wait out command_timeout (5 s), and time out.
my ($hello_ms) = $out =~ s/\|(\d+)$// ? ($1) : (undef);
is($out, 't|99|redis', 'a 10 kB HELLO reply in one TLS record is read whole, without waiting on the socket');
is($err, '', 'no timeout on HELLO');
cmp_ok($hello_ms // 99999, '<', 1000, sprintf('at once (%s ms)', $hello_ms // 'unknown'));
kill 'KILL', $fake_pid;
waitpid($fake_pid, 0);

unlike(slurp_file($node->logfile), qr/PANIC|terminated by signal/, 'no crash');
done_testing();
