# slidewin in a single-user backend (postgres --single), as a DBA might run
# it during recovery work: there is no postmaster, so the Redis connection's
# wait must not watch for the postmaster's death. It used to fail every
# call with "epoll_ctl() failed: Bad file descriptor".
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
my $node  = SlidewinTest::new_node('single', $redis);
$node->stop;

# The server binary. In the sanitizer pass the installation's `postgres` is
# a script that runs single-user mode unwrapped (for initdb), so run the real
# binary under the wrapper here, as every other server of that pass runs.
my @postgres = ('postgres');
my $bindir = $node->config_data('--bindir');
if (($ENV{SLIDEWIN_SERVER_WRAPPER} // '') ne '' && -x "$bindir/postgres.real")
{
	@postgres = (split(' ', $ENV{SLIDEWIN_SERVER_WRAPPER}), "$bindir/postgres.real");
}

# Each line is one statement in single-user mode; values print as
#   1: store = "redis"	(typeid = 25, ...)
sub single
{
	my (@stmts) = @_;
	my $in = join("\n", @stmts) . "\n";
	my ($out, $err) = ('', '');
	IPC::Run::run([ @postgres, '--single', '-D', $node->data_dir, 'postgres' ],
		'<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
	return ($out, $err);
}

my ($out, $err) = single(
	"SELECT store FROM rl_attempt('tap:single', 2, '1 hour')",
	"SELECT allowed FROM rl_attempt('tap:single', 2, '1 hour')",
	"SELECT allowed FROM rl_attempt('tap:single', 2, '1 hour')");
my @stores = ($out =~ /store = "(\w+)"/g);
my @allowed = ($out =~ /allowed = "(\w+)"/g);
is_deeply(\@stores, ['redis'], 'a single-user backend reaches Redis')
  or diag("stdout:\n$out\nstderr:\n$err");
is_deeply(\@allowed, [ 't', 'f' ], 'and Redis counts its calls: the third of lim 2 is denied');
unlike($err, qr/ERROR/, 'no error in single-user mode') or diag($err);
is($redis->cli('zcard', 'slidewin:log:tap:single'), 2, 'two entries in Redis');

# Local batches need their worker to give a batch's unused rest back, and
# single-user mode starts none. With the library preloaded (so the batch
# table exists) and batches asked for, every call must still count once: a
# batch made there used to be given back at once and yet served from, so 30
# calls of a limit of 10 were all admitted.
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'slidewin'");
($out, $err) = single(
	"SET slidewin.local_batch = 1000",
	"SET slidewin.local_batch_time = '5s'",
	map { "SELECT allowed FROM rl_attempt('tap:single:batch', 10, '1 hour')" } 1 .. 30);
@allowed = ($out =~ /allowed = "(\w+)"/g);
is(scalar(@allowed), 30, 'single-user mode with batches asked for: 30 calls answered')
  or diag("stdout:\n$out\nstderr:\n$err");
is(scalar(grep { $_ eq 't' } @allowed), 10, 'and exactly the limit, 10, admitted');
unlike($err, qr/ERROR/, 'no error with batches asked for in single-user mode') or diag($err);
is($redis->cli('zcard', 'slidewin:log:tap:single:batch'), 10,
	'each admission has its own entry in Redis: no batch was made');

# With Redis gone, the call follows its policy there too.
$redis->stop;
($out, $err) = single(
	"SELECT store FROM rl_attempt('tap:single2', 2, '1 hour', on_redis_error => 'fallback')");
@stores = ($out =~ /store = "(\w+)"/g);
is_deeply(\@stores, ['fallback'], 'with Redis down, single-user mode falls back');
unlike($err, qr/ERROR/, 'no error with Redis down') or diag($err);

done_testing();
