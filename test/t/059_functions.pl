# The scripts that decide a call run as Redis Functions: the first call
# loads slidewin's library (FUNCTION LOAD) and every call is an FCALL; a
# server that lost the library (FUNCTION FLUSH, a restart without
# persistence) gets it again at the next call, which succeeds; a user not
# allowed FCALL or FUNCTION LOAD, slidewin.redis_functions = off, and a
# Redis out of memory get the same answers through EVALSHA.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
my $node = SlidewinTest::new_node('functions', $redis,
	[ "slidewin.on_redis_error = 'error'", 'slidewin.redis_retry_interval = 0' ]);

# run($sql, @settings): stdout and stderr of $sql in a new session
sub run
{
	my ($sql) = @_;
	my ($o, $e) = ('', '');
	$node->psql('postgres', $sql, stdout => \$o, stderr => \$e, on_error_stop => 0);
	return ($o, $e);
}

# calls($command): the calls Redis counted of it since the last RESETSTAT
sub calls
{
	my ($cmd) = @_;
	my $info = $redis->cli('info', 'commandstats');
	return $info =~ /^cmdstat_\Q$cmd\E:calls=(\d+)/m ? $1 : 0;
}

sub libraries
{
	my $list = $redis->cli('function', 'list');
	my %names = map { $_ => 1 } ($list =~ /\b(slidewin_[0-9a-f]{16})\b/g);
	return scalar keys %names;
}

my $attempt = q{SELECT (r).store || ' ' || (r).allowed || ' ' || (r).remaining
	FROM rl_attempt('tap:f', 10, '1 hour') r};
my ($out, $err);

# ---------------------------------------------------------------------
# FCALL, the library loaded at the first call
# ---------------------------------------------------------------------
is(libraries(), 0, 'no slidewin library in a new Redis');
$redis->cli('config', 'resetstat');
($out, $err) = run($attempt);
is($out, 'redis true 9', 'the first call is answered');
is($err, '', 'no error');
is(libraries(), 1, 'the first call loaded the library');
is(calls('function|load'), 1, 'once');
is(calls('fcall'), 2, 'the call ran as FCALL (the first, not found; then after the load)');
is(calls('evalsha') + calls('eval'), 0, 'no script ran');

# every call that decides: the four algorithms, attempt and peek, and multi
$redis->cli('config', 'resetstat');
($out, $err) = run(q{
	SELECT (rl_attempt('tap:a', 5, '1 hour', 1, algorithm => a)).allowed
	  FROM unnest(ARRAY['sliding_log', 'fixed_window', 'sliding_counter', 'token_bucket']) a;
	SELECT (rl_peek('tap:a', 5, '1 hour', algorithm => a)).remaining
	  FROM unnest(ARRAY['sliding_log', 'fixed_window', 'sliding_counter', 'token_bucket']) a;
	SELECT (rl_attempt_multi('tap:m', ARRAY[5, 50], ARRAY['1 minute', '1 hour']::interval[])).allowed;
});
is($out, "t\nt\nt\nt\n4\n4\n4\n4\nt", 'every algorithm answers through FCALL');
is($err, '', 'no error');
is(calls('fcall'), 9, 'nine calls, nine FCALLs');
is(calls('evalsha') + calls('eval') + calls('function|load'), 0, 'no script, no load');

# denials, with exact retry_after, come back the same way
($out, $err) = run(q{
	SELECT (r).allowed, (r).remaining, (r).retry_after > '0'::interval
	  FROM (SELECT rl_attempt('tap:d', 5, '1 hour') r FROM generate_series(1, 6)) c});
is($out, "t|4|f\nt|3|f\nt|2|f\nt|1|f\nt|0|f\nf|0|t", 'five admitted, the sixth denied with a retry_after');

# ---------------------------------------------------------------------
# The library lost: the next call loads it again and succeeds
# ---------------------------------------------------------------------
is($redis->cli('function', 'flush'), 'OK', 'FUNCTION FLUSH');
$redis->cli('config', 'resetstat');
($out, $err) = run($attempt);
is($out, 'redis true 8', 'the call right after FUNCTION FLUSH succeeds and keeps the count');
is($err, '', 'no error after FUNCTION FLUSH');
is(calls('function|load'), 1, 'the library was loaded again');
is(libraries(), 1, 'one library');

# ---------------------------------------------------------------------
# slidewin.redis_functions = off: EVALSHA
# ---------------------------------------------------------------------
$redis->cli('config', 'resetstat');
($out, $err) = run("SET slidewin.redis_functions = off; $attempt");
is($out, 'redis true 7', 'redis_functions = off: answered');
is(calls('fcall'), 0, 'redis_functions = off: no FCALL');
cmp_ok(calls('evalsha'), '>=', 1, 'redis_functions = off: EVALSHA');
$node->safe_psql('postgres', 'CREATE ROLE tap_user LOGIN');
$node->psql('postgres', q{SELECT 1 FROM rl_peek('tap:x', 1, '1 hour');
	SET slidewin.redis_functions = off}, stderr => \$err,
	extra_params => [ '-U', 'tap_user' ]);
like($err, qr/permission denied to set parameter "slidewin.redis_functions"/,
	'only a superuser sets slidewin.redis_functions');

# ---------------------------------------------------------------------
# Users not allowed functions: the same answers through EVALSHA
# ---------------------------------------------------------------------
my @base = qw(on >pw ~tap:* ~slidewin:* +evalsha +eval +del +auth +hello +ping +select
  +time +zadd +zrange +zrangebyscore +zrevrangebyscore +zremrangebyscore
  +zrem +zcard +zcount +exists +pexpire +pttl +hmget +hset +get +set);
is($redis->cli('acl', 'setuser', 'nofcall', 'reset', @base), 'OK', 'a user without FCALL');
is($redis->cli('acl', 'setuser', 'noload', 'reset', @base, '+fcall'), 'OK',
	'a user with FCALL but not FUNCTION LOAD');
my $port = $redis->port;
foreach my $user ('nofcall', 'noload')
{
	is($redis->cli('function', 'flush'), 'OK', "$user: FUNCTION FLUSH");
	$redis->cli('acl', 'log', 'reset');
	$redis->cli('config', 'resetstat');
	($out, $err) = run(qq{SET slidewin.redis_url = 'redis://$user:pw\@127.0.0.1:$port';
		SELECT (rl_attempt('tap:u:$user', 3, '1 hour')).remaining FROM generate_series(1, 4);
		SELECT (rl_attempt('tap:u:$user', 3, '1 hour', 1, algorithm => 'fixed_window')).remaining});
	is($out, "2\n1\n0\n0\n2", "$user: the calls are answered (the fourth denied)");
	is($err, '', "$user: no error");
	is(libraries(), 0, "$user: nothing loaded");
	cmp_ok(calls('evalsha') + calls('eval'), '>=', 5, "$user: every call ran as a script");
	my $refusals = () = $redis->cli('acl', 'log') =~ /^(?:fcall|function\|load)$/mg;
	is($refusals, 1, "$user: refused once, then not asked again in the session");
}

# ---------------------------------------------------------------------
# Redis out of memory: a function that may write is refused before it runs;
# as a script, a denial (which writes nothing) is still answered
# ---------------------------------------------------------------------
($out, $err) = run(q{SELECT count(rl_attempt('tap:oom', 3, '1 hour')) FROM generate_series(1, 3)});
is($out, '3', 'tap:oom is full');
$redis->cli('config', 'set', 'maxmemory-policy', 'noeviction');
$redis->cli('config', 'set', 'maxmemory', '1');
$redis->cli('config', 'resetstat');
($out, $err) = run(q{SELECT (r).store, (r).allowed, (r).retry_after > '0'::interval
	FROM rl_attempt('tap:oom', 3, '1 hour') r});
is($out, 'redis|f|t', 'out of memory: the denial is answered by Redis');
is($err, '', 'out of memory: no error for the denial');
cmp_ok(calls('evalsha') + calls('eval'), '>=', 1, 'out of memory: through a script');
($out, $err) = run(q{SELECT (rl_attempt('tap:oom:new', 3, '1 hour')).allowed});
like($err, qr/OOM/, 'out of memory: an admission, which writes, is refused as before');
$redis->cli('config', 'set', 'maxmemory', '0');
($out, $err) = run($attempt);
is($out, 'redis true 6', 'memory back: FCALL again');

# ---------------------------------------------------------------------
# The sliding log's answers on a clock the test sets (ARGV now), called
# directly: a denial, a blocked key with room, a peek. The entry that
# leaves the window first is read once per call (its time makes
# retry_after, stable_us and next_us), so a denial makes three ZRANGEs:
# the trim, the newest entry, the first live one.
# ---------------------------------------------------------------------
my ($lib) = $redis->cli('function', 'list') =~ /\b(slidewin_[0-9a-f]{16})\b/;
# a log of 2 units at 9.0 s and 3 at 9.5 s (running totals 2 and 5); the
# window is 2 s, the clock 10 s
my @k = ('tap:d:log', 'tap:d:ledger', 'tap:d:block');
$redis->cli('del', @k);
$redis->cli('zadd', $k[0], '9000000', '2', '9500000', '5');
my $fcall = sub {
	my ($fn, @argv) = @_;
	return join(' ', split /\n/, scalar $redis->cli('fcall', "${lib}_$fn", 3, @k, @argv));
};
$redis->cli('config', 'resetstat');
# {allowed, remaining, retry_after, reset_at, used, recorded, stable, next}
is($fcall->('log_attempt', 5, 2000000, 1, '', 10000000),
	'0 0 1000000 11500000 5 -1 1000000 11000000',
	'a denial of 1 unit: free when the first entry leaves');
is(calls('zrange'), 3, 'a denial reads the first live entry once');
is($fcall->('log_attempt', 5, 2000000, 3, '', 10000000),
	'0 0 1500000 11500000 5 -1 1000000 11000000',
	'a denial of 3 units: free when the second leaves; stable until the first does');
is($fcall->('log_peek', 5, 2000000, 10000000),
	'0 0 1000000 11500000 5 -1 11000000', 'a peek on the full key');
$redis->cli('set', $k[2], '12000000');
is($fcall->('log_attempt', 10, 2000000, 1, '', 10000000),
	'2 0 2000000 11500000 5 -1 1000000 12000000',
	'blocked with room: stable until the first entry leaves, before the block ends');
is($redis->cli('zcard', $k[0]), 2, 'nothing was recorded');
$redis->cli('del', @k);

$node->stop;
$redis->stop;
done_testing();
