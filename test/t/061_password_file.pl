# slidewin.redis_password_file: the Redis password comes from a file only the
# server's OS user can read, in libpq's .pgpass format, read at every
# connect.  A file with group or world access is refused; a password in the
# URL wins over the file; ACL users are matched by the URL's user name.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

my $redis = SlidewinTest::start_redis(password => 'first:pw\\x');
my $port  = $redis->port;
my $dir   = PostgreSQL::Test::Utils::tempdir('passfile');
my $file  = "$dir/redis.pass";

sub write_file
{
	my ($text, $mode) = @_;
	open my $fh, '>', $file or die "cannot write $file: $!";
	print $fh $text;
	close $fh;
	chmod $mode, $file or die "chmod: $!";
}

# The password contains ':' and '\', escaped as the format says.
write_file("# slidewin\nother.host:$port:*:wrong\n127.0.0.1:$port:*:first\\:pw\\\\x\n", 0600);

my $node = SlidewinTest::new_node('passfile', undef,
	[ "slidewin.redis_url = 'redis://127.0.0.1:$port'",
	  "slidewin.redis_password_file = '$file'",
	  "slidewin.redis_retry_interval = 0" ]);

sub attempt
{
	my ($policy) = @_;
	my ($ret, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT (r).allowed, (r).store FROM rl_attempt('pf', 100, '1 hour', 1, '$policy') r",
		on_error_stop => 1);
	return ($out, $err);
}

sub kill_clients { $redis->cli('client', 'kill', 'type', 'normal') }

my ($out, $err) = attempt('error');
is($out, 't|redis', 'password from the file: Redis answers');
is($err, '', 'no error');

# Group or world access: refused, and the call follows its policy.
write_file("127.0.0.1:$port:*:first\\:pw\\\\x\n", 0640);
kill_clients();
($out, $err) = attempt('error');
like($err, qr/ERROR:\s+08001: slidewin could not reach Redis/, 'group-readable file: connection refused (08001)');
like($err, qr/refused slidewin.redis_password_file.*without group or world access/,
	'the cause names the file rule');
($out, $err) = attempt('fallback');
is($out, 't|fallback', 'and a fallback call site gets the fallback');

# No matching line: Redis refuses the unauthenticated command.
write_file("127.0.0.1:1:*:first\\:pw\\\\x\n", 0600);
($out, $err) = attempt('error');
like($err, qr/NOAUTH|Authentication required/i, 'no matching line: Redis asks for authentication');
unlike($err, qr/first/, 'no message carries the password');

# A new password takes effect at the next connection.
write_file("*:*:*:first\\:pw\\\\x\n", 0600);
($out, $err) = attempt('error');
is($out, 't|redis', 'wildcard line: Redis answers');
$redis->cli('config', 'set', 'requirepass', 'second');
$redis->set_password('second');
write_file("127.0.0.1:$port:default:second\n", 0600);
kill_clients();
($out, $err) = attempt('error');
is($out, 't|redis', 'rotated password read at the next connect');

# An ACL user: the URL names the user, the file holds its password.
$redis->cli('acl', 'setuser', 'alice', 'on', '>alicepw',
	'~*', '+@all');
write_file("127.0.0.1:$port:default:second\n127.0.0.1:$port:alice:alicepw\n", 0600);
$node->safe_psql('postgres', "ALTER SYSTEM SET slidewin.redis_url = 'redis://alice:\@127.0.0.1:$port'");
$node->reload;
my $bg = $node->background_psql('postgres');
$out = $bg->query_safe(q{SELECT (r).allowed, (r).store FROM rl_attempt('pf', 100, '1 hour', 1, 'error') r});
is($out, 't|redis', 'ACL user alice with its password from the file');
my $clients = $redis->cli('client', 'list');
like($clients, qr/\buser=alice\b/, 'the connection is logged in as alice');
$bg->quit;

# A password in the URL wins over the file.
$node->safe_psql('postgres', "ALTER SYSTEM SET slidewin.redis_url = 'redis://:second\@127.0.0.1:$port'");
write_file("127.0.0.1:$port:*:wrong\n", 0600);
$node->reload;
($out, $err) = attempt('error');
is($out, 't|redis', 'the URL password wins over the file');

# A missing file is a connection failure naming it, not a crash.
$node->safe_psql('postgres', "ALTER SYSTEM SET slidewin.redis_url = 'redis://127.0.0.1:$port'");
$node->safe_psql('postgres', "ALTER SYSTEM SET slidewin.redis_password_file = '$dir/missing'");
$node->reload;
($out, $err) = attempt('error');
like($err, qr/could not read slidewin.redis_password_file.*missing/, 'missing file: named in the error');

# The test's own ALTER SYSTEM statements are logged (log_statement = all),
# and so is a URL changed by a reload (PostgreSQL logs every changed
# setting: one more reason for the file); nothing slidewin writes may carry
# a password.
my $log = join "\n", grep { !/statement: |parameter "slidewin.redis_url" changed to/ }
  split /\n/, slurp_file($node->logfile);
unlike($log, qr/alicepw|second|first\\?:pw/, 'no password in the server log');
unlike($log, qr/PANIC|terminated by signal/, 'no crash');

done_testing();
