# A configuration error is not an outage.  When Redis cannot be used
# because of its configuration (a wrong password or none, an ACL that
# refuses a command slidewin needs, a certificate that fails verification,
# a password file that cannot be used, a server older than 6.2), the server
# log gets a WARNING naming the cause, at most once per cause per
# slidewin.redis_retry_interval in each backend, and the call follows its
# failure policy as before.  An outage (nothing listening) warns nothing.
#
# rl_check() says, for each server slidewin.redis_url names, what works:
# reachable, authenticated, its version and role, TLS verification, the
# scripts, the last error; and whether the library was preloaded.  It never
# shows a password, and PUBLIC may not run it.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use FakeRedis;
use SlidewinTest;

my $d = PostgreSQL::Test::Utils::tempdir('misconf');
SlidewinTest::make_ca($d);
SlidewinTest::make_ca($d, 'other');
my ($srv_crt, $srv_key) = SlidewinTest::make_leaf($d, 'localhost', 'DNS:localhost', 2);

my $redis  = SlidewinTest::start_redis(password => 'right');
my $tls    = SlidewinTest::start_redis(password => 'right', tls => { cert => $srv_crt, key => $srv_key, ca => "$d/ca.crt" });
my $port   = $redis->port;
my $dead   = SlidewinTest::free_port();
my $old    = FakeRedis->start;
$old->reply('HELLO', "*4\r\n\$6\r\nserver\r\n\$5\r\nredis\r\n\$7\r\nversion\r\n\$5\r\n6.0.9\r\n");
# HELLO needs no permission (it may log in): SELECT is the command refused.
$redis->cli('acl', 'setuser', 'noselect', 'on', '>nspw', '~*', '+@all', '-select');

my $file = "$d/redis.pass";
sub write_file
{
	my ($text, $mode) = @_;
	open my $fh, '>', $file or die "cannot write $file: $!";
	print $fh $text;
	close $fh;
	chmod $mode, $file or die "chmod: $!";
}
write_file("*:*:default:right\n*:*:noselect:nspw\n", 0600);
my $group_file = "$d/group.pass";
open my $gfh, '>', $group_file or die "cannot write $group_file: $!";
print $gfh "*:*:default:right\n";
close $gfh;
chmod 0640, $group_file or die "chmod: $!";

my $node = SlidewinTest::new_node('misconf_warn', undef,
	[ "slidewin.redis_url = 'redis://127.0.0.1:$port'",
	  "slidewin.redis_password_file = '$file'",
	  "slidewin.redis_tls_ca_file = '$d/ca.crt'",
	  "shared_preload_libraries = 'slidewin'",
	  "slidewin.redis_retry_interval = '2s'",
	  # What is checked is each misconfiguration's verdict, not speed: the
	  # TLS cases look up localhost, and on a loaded machine that lookup ran
	  # past the default 200 ms once (in CI), so rl_check said "lookup timed
	  # out" instead of the certificate error. The checks of speed below set
	  # their own timeouts.
	  "slidewin.connect_timeout = '2s'" ]);

# psql with SQLSTATEs in stderr.
sub run_sql { return SlidewinTest::node_sql($node, @_) }

my $check_cols = q{target, reachable, authenticated, server_version, role, tls_verified,
	scripts_loaded, coalesce(last_error, '(null)'), preloaded};

sub check_at
{
	my ($url, $extra) = @_;
	$extra //= '';
	my ($out, $err) = run_sql("SET slidewin.redis_url = '$url'; $extra SELECT $check_cols FROM rl_check()");
	is($err, '', "rl_check at $url: no error");
	return $out;
}

# WARNING lines for slidewin's configuration errors since $offset.
sub warnings_since
{
	my ($offset, $re) = @_;
	my $log = substr(slurp_file($node->logfile), $offset);
	return scalar(() = $log =~ /WARNING:\s+(?:[0-9A-Z]{5}: )?$re/g);
}

# ---- rl_check with a good configuration -----------------------------------

# The version rl_check reports is the server's own, as HELLO gives it: Valkey's
# (valkey_version; its redis_version is a compatibility number) or Redis's.
my $info = $redis->cli('info', 'server');
my ($server_version) = $info =~ /^valkey_version:([\d.]+)/m;
($server_version) = $info =~ /^redis_version:([\d.]+)/m unless defined $server_version;
my $v = quotemeta($server_version);

my $out = check_at("redis://127.0.0.1:$port");
like($out, qr/^127\.0\.0\.1:$port\|t\|t\|$v\|master\|\|t\|\(null\)\|t$/,
	'good configuration: reachable, authenticated, version, master, no TLS, scripts loaded, no error, preloaded');
$redis->cli('script', 'flush');
$out = check_at("redis://127.0.0.1:$port");
like($out, qr/\|master\|\|t\|\(null\)\|t$/, 'after SCRIPT FLUSH, rl_check loads them again');

# For doc/installing.md and doc/api.md: rl_check as psql shows it.
sub show_check
{
	my ($extra) = @_;
	my ($ret, $o, $e) = $node->psql('postgres',
		"$extra\n\\x on\nSELECT * FROM rl_check();", on_error_stop => 1);
	note "rl_check $extra:\n$o";
}
show_check('');
show_check("SET slidewin.redis_password_file = '$group_file';");

# ---- each configuration error: rl_check, the call's policy, one WARNING ---

my @cases = (
	[ 'wrong password', "redis://:wrong\@127.0.0.1:$port", '',
	  qr/^127\.0\.0\.1:$port\|t\|f\|\|\|\|\|could not authenticate .*WRONGPASS.*\|t$/,
	  qr/Redis refused slidewin's credentials/ ],
	[ 'no password where one is needed', "redis://127.0.0.1:$port", "SET slidewin.redis_password_file = '';",
	  qr/^127\.0\.0\.1:$port\|t\|f\|\|\|\|\|.*NOAUTH.*\|t$/,
	  qr/Redis refused slidewin's credentials/ ],
	[ 'password file readable by its group', "redis://127.0.0.1:$port", "SET slidewin.redis_password_file = '$group_file';",
	  qr/^127\.0\.0\.1:$port\|t\|f\|\|\|\|\|refused slidewin\.redis_password_file.*\|t$/,
	  qr/slidewin cannot use slidewin\.redis_password_file/ ],
	[ 'ACL without SELECT', "redis://noselect:\@127.0.0.1:$port/1", '',
	  qr/^127\.0\.0\.1:$port\|t\|t\|\|\|\|\|.*NOPERM.*\|t$/,
	  qr/the Redis user may not run a command slidewin needs/ ],
	[ 'TLS verification failure', 'rediss://localhost:' . $tls->port,
	  "SET slidewin.redis_tls_ca_file = '$d/other.crt';",
	  qr/^localhost:\d+\|t\|\|\|\|f\|\|.*certificate verify failed.*\|t$/,
	  qr/slidewin could not verify the Redis server's certificate/ ],
	[ 'server too old', 'redis://127.0.0.1:' . $old->port, '',
	  qr/^127\.0\.0\.1:\d+\|t\|t\|6\.0\.9\|\|\|\|.*too old.*\|t$/,
	  qr/the Redis server is too old for slidewin/ ],
);

for my $case (@cases)
{
	my ($name, $url, $extra, $row, $warning) = @$case;
	$out = check_at($url, $extra);
	like($out, $row, "$name: rl_check says what is wrong");

	# One session, 12 calls within the retry interval.  Changing the URL
	# back and forth resets the circuit breaker, so that every call tries
	# Redis and fails; the warning still comes once.
	my $alt = $url =~ m{/1$} ? $url =~ s{/1$}{/2}r : "$url/1";
	my $old_server = $name eq 'server too old';
	my $offset = -s $node->logfile;
	my $sql = "SET client_min_messages = error; $extra\n";
	for my $i (1 .. 12)
	{
		my $u = $i % 2 ? $url : $alt;
		$sql .= "SET slidewin.redis_url = '$u';\n";
		$sql .= $old_server
		  ? "DO \$\$ BEGIN PERFORM rl_attempt('m', 100, '1 hour', 1, 'fallback');\n"
		  . "  EXCEPTION WHEN feature_not_supported THEN RAISE NOTICE 'refused'; END \$\$;\n"
		  : "SELECT (r).allowed, (r).store FROM rl_attempt('m', 100, '1 hour', 1, 'fallback') r;\n";
	}
	my ($o, $e) = run_sql($sql);
	if ($old_server)
	{
		is($e, '', "$name: 12 calls refused with 0A000, as before");
	}
	else
	{
		is($o, join("\n", ('t|fallback') x 12), "$name: 12 calls answered by the fallback store");
	}
	my $n = warnings_since($offset, $warning);
	is($n, 1, "$name: one WARNING for 12 calls within the retry interval");
	like(substr(slurp_file($node->logfile), $offset), qr/WARNING:.*$warning.*\n.*DETAIL:  \S/,
		"$name: the warning has a DETAIL") if $n;

	# Past the interval, a new warning; and each policy is followed.
	sleep 2;
	$offset = -s $node->logfile;
	unless ($old_server)
	{
		my @p = (
			[ fallback => 't|fallback' ], [ allow => 't|none' ], [ deny => 'f|none' ]);
		for my $p (@p)
		{
			($o, $e) = run_sql("$extra SET slidewin.redis_url = '$url';"
				  . "SELECT (r).allowed, (r).store FROM rl_attempt('m', 100, '1 hour', 1, '$p->[0]') r");
			is($o, $p->[1], "$name: policy $p->[0] followed");
		}
		($o, $e) = run_sql("$extra SET slidewin.redis_url = '$url';"
			  . "SELECT (r).allowed FROM rl_attempt('m', 100, '1 hour', 1, 'error') r");
		like($e, qr/ERROR:\s+08\d\d\d: slidewin could not reach Redis/, "$name: policy error raises 08");
		like($e, qr/WARNING:\s+[0-9A-Z]{5}: $warning/, "$name: the client sees the warning too");
	}
	else
	{
		($o, $e) = run_sql("SET slidewin.redis_url = '$url';"
			  . "SELECT rl_attempt('m', 100, '1 hour', 1, 'fallback')");
		like($e, qr/ERROR:\s+0A000: slidewin cannot use this Redis server/,
			"$name: the call still raises 0A000 whatever its policy");
	}
	cmp_ok(warnings_since($offset, $warning), '>=', 1, "$name: warned again in new sessions");
}

# ---- an outage is not a configuration error -------------------------------

$out = check_at("redis://127.0.0.1:$dead");
like($out, qr/^127\.0\.0\.1:$dead\|f\|\|\|\|\|\|could not connect.*\|t$/, 'nothing listening: unreachable');
my $offset = -s $node->logfile;
my ($o, $e) = run_sql("SET slidewin.redis_url = 'redis://127.0.0.1:$dead';"
	  . "SELECT (r).allowed, (r).store FROM rl_attempt('m', 100, '1 hour', 1, 'fallback') r");
is($o, 't|fallback', 'nothing listening: the fallback store answers');
unlike(substr(slurp_file($node->logfile), $offset), qr/WARNING/, 'and nothing is logged: an outage, not a misconfiguration');

# ---- TLS that works --------------------------------------------------------

$out = check_at('rediss://localhost:' . $tls->port);
like($out, qr/^localhost:\d+\|t\|t\|$v\|master\|t\|[tf]\|\(null\)\|t$/, 'TLS verified');
$out = check_at('rediss://127.0.0.1:' . $tls->port, "SET slidewin.redis_tls_verify = 'none';");
like($out, qr/^127\.0\.0\.1:\d+\|t\|t\|$v\|master\|f\|/, 'TLS without verification: tls_verified false');

# ---- every wait is bounded and interruptible --------------------------------

my $frozen = SlidewinTest::start_redis();
$frozen->freeze;
my $url_frozen = 'redis://127.0.0.1:' . $frozen->port;
my $t0 = time;
($o, $e) = run_sql("SET slidewin.redis_url = '$url_frozen'; SET slidewin.connect_timeout = 200;"
	  . "SET slidewin.command_timeout = 300; SELECT reachable, last_error FROM rl_check()");
my $dt = time - $t0;
like($o, qr/^t\|.*timed out/, 'a frozen server: reachable, and the command timed out');
cmp_ok($dt, '<', 2, sprintf('bounded by the timeouts: %.2f s', $dt));
$t0 = time;
($o, $e) = run_sql("SET slidewin.redis_url = '$url_frozen'; SET slidewin.connect_timeout = 30000;"
	  . "SET slidewin.command_timeout = 30000; SET statement_timeout = 300; SELECT * FROM rl_check()");
$dt = time - $t0;
like($e, qr/ERROR:\s+57014: canceling statement due to statement timeout/, 'statement_timeout ends rl_check');
cmp_ok($dt, '<', 3, sprintf('at once: %.2f s', $dt));
$frozen->thaw;
$out = check_at("redis://127.0.0.1:$port");
like($out, qr/\|master\|\|t\|\(null\)\|t$/, 'and the next rl_check works');

# ---- secrets and privileges ------------------------------------------------

$out = check_at("redis://someone:right\@127.0.0.1:$port/2");
unlike($out, qr/right|someone/, 'rl_check shows no password and no user');
$node->safe_psql('postgres', 'CREATE ROLE regress_check_user LOGIN');
($o, $e) = run_sql('SET ROLE regress_check_user; SELECT * FROM rl_check()');
like($e, qr/permission denied for function rl_check/, 'an ordinary role may not run rl_check');

my $log = join "\n", grep { !/statement: |parameter "slidewin/ } split /\n/, slurp_file($node->logfile);
unlike($log, qr/\bright\b|nspw/, 'no password in the server log');
unlike($log, qr/PANIC|terminated by signal/, 'no crash');

done_testing();
