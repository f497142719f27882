# Faults injected into a live Redis, and what each failure policy makes of
# them.  A lost connection and a flushed script cache are repaired within the
# call that meets them; a busy Redis (DEBUG SLEEP) and a full one (OOM under
# noeviction) are outages that the policy handles; a key of the wrong type is
# an error whatever the policy.  The backend stays up and no call hangs.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest qw(sqlstate);

my $redis = SlidewinTest::start_redis();
my $node  = SlidewinTest::new_node('faults', $redis);
my $s     = $node->background_psql('postgres', on_error_stop => 0);

# VERBOSITY verbose puts the SQLSTATE into every error line:
#   ERROR:  08006: slidewin could not reach Redis
$s->query_safe('\set VERBOSITY verbose');

my $pid0 = $s->query_safe('SELECT pg_backend_pid()');
like($pid0, qr/^\d+$/, "backend pid $pid0");

# Runs $sql in the session; returns stdout, stderr and the wall time in s.
sub run_sql { return SlidewinTest::session_sql($s, @_) }

# One rl_attempt with the policy as its fifth argument.  Output:
# allowed|store|remaining|remaining is null|reset_at is null
sub attempt
{
	my ($key, $policy, $lim) = @_;
	$lim //= 100;
	my $pol = defined $policy ? "'$policy'" : 'NULL';
	return run_sql(
		qq{SELECT (r).allowed, (r).store, (r).remaining, (r).remaining IS NULL, (r).reset_at IS NULL
		   FROM rl_attempt('$key', $lim, '1 hour', 1, $pol) r});
}

my ($out, $err, $dt);

# ---------------------------------------------------------------------
# (a) CLIENT KILL: the connection kept by the backend is gone.  Under the
# error policy a failure would surface, so a 'redis' answer proves that the
# stale connection was replaced inside the same call.
# ---------------------------------------------------------------------
($out, $err) = attempt('f:kill', 'error');
is($out, 't|redis|99|f|f', 'healthy Redis: first call answered by Redis');

my $killed = $redis->cli('client', 'kill', 'type', 'normal');
cmp_ok($killed, '>=', 1, "CLIENT KILL TYPE normal closed $killed connection(s)");
($out, $err, $dt) = attempt('f:kill', 'error');
is($out, 't|redis|98|f|f',
	'after CLIENT KILL the very next call (policy error) is answered by Redis');
is($err, '', 'no error after CLIENT KILL');
cmp_ok($dt, '<', 2, sprintf('call after CLIENT KILL took %.3f s', $dt));

$killed = $redis->cli('client', 'kill', 'type', 'normal');
cmp_ok($killed, '>=', 1, 'CLIENT KILL again');
($out, $err) = attempt('f:kill', 'fallback');
is($out, 't|redis|97|f|f',
	'after CLIENT KILL a call under policy fallback is answered by Redis, not the fallback');

# ---------------------------------------------------------------------
# (b) SCRIPT FLUSH: EVALSHA meets NOSCRIPT; the script is sent again.
# ---------------------------------------------------------------------
is($redis->cli('script', 'flush'), 'OK', 'SCRIPT FLUSH');
($out, $err, $dt) = attempt('f:kill', 'error');
is($out, 't|redis|96|f|f', 'after SCRIPT FLUSH the next call is answered by Redis, count kept');
is($err, '', 'no error after SCRIPT FLUSH');
cmp_ok($dt, '<', 2, sprintf('call after SCRIPT FLUSH took %.3f s', $dt));
is($redis->cli('script', 'flush'), 'OK', 'SCRIPT FLUSH again');
($out, $err) = attempt('f:kill', 'fallback');
is($out, 't|redis|95|f|f', 'after SCRIPT FLUSH, policy fallback still gets Redis');

# ---------------------------------------------------------------------
# (c) DEBUG SLEEP: Redis accepts connections but answers nothing for 2 s,
# far past command_timeout (100 ms).  With redis_retry_interval = 0 every
# call tries Redis, waits about command_timeout, then applies its policy.
# ---------------------------------------------------------------------
run_sql('SET slidewin.redis_retry_interval = 0');
($out) = run_sql('SHOW slidewin.command_timeout');
is($out, '100ms', 'command_timeout is the default 100 ms');

my $t_sleep = time;
my $bg = $redis->debug_sleep_bg(2);
usleep(200_000);

($out, $err, $dt) = attempt('f:sleep', 'fallback');
is($out, 't|fallback|99|f|f', 'busy Redis, policy fallback: admitted by the fallback store');
is($err, '', 'busy Redis, policy fallback: no error');
cmp_ok($dt, '>=', 0.09, sprintf('policy fallback: Redis was tried (%.3f s)', $dt));
cmp_ok($dt, '<', 1, sprintf('policy fallback: answered in under 1 s (%.3f s)', $dt));

($out, $err, $dt) = attempt('f:sleep', 'error');
is(sqlstate($err), '08006', 'busy Redis, policy error: SQLSTATE 08006');
like($err, qr/slidewin could not reach Redis/, 'busy Redis, policy error: message');
like($err, qr/DETAIL:.*timed out/, 'busy Redis, policy error: DETAIL tells of the timeout');
cmp_ok($dt, '<', 1, sprintf('policy error: answered in under 1 s (%.3f s)', $dt));

($out, $err, $dt) = attempt('f:sleep', 'allow');
is($out, 't|none||t|t', 'busy Redis, policy allow: allowed, store none, no counts');
is($err, '', 'policy allow: no error');
cmp_ok($dt, '<', 1, sprintf('policy allow: answered in under 1 s (%.3f s)', $dt));

($out, $err, $dt) = attempt('f:sleep', 'deny');
is($out, 'f|none||t|t', 'busy Redis, policy deny: denied, store none, no counts');
is($err, '', 'policy deny: no error');
cmp_ok($dt, '<', 1, sprintf('policy deny: answered in under 1 s (%.3f s)', $dt));

cmp_ok(time - $t_sleep, '<', 2,
	'all four calls ran while Redis was still asleep');
$bg->finish;

# The four calls above gave up on their EVALSHA, but the commands were
# already in Redis's input buffers and ran when it woke: a timed-out call
# may still have been counted in Redis (an over-count, never an under-count).
# The fallback admission itself is not in Redis.
($out, $err, $dt) = attempt('f:sleep', 'error');
like($out, qr/^t\|redis\|(\d+)\|f\|f$/, 'after the sleep Redis answers again');
my ($left) = $out =~ /^t\|redis\|(\d+)\|/;
cmp_ok($left // -1, '>=', 95,
	"at most the 4 timed-out calls were counted by Redis after it woke (remaining " . ($left // "?") . ")");
is($err, '', 'no error after the sleep');

# ---------------------------------------------------------------------
# (d) OOM: Redis over maxmemory with noeviction rejects writes with -OOM,
# which counts as "Redis cannot answer".
# ---------------------------------------------------------------------
# From here on each call waits for a reply that Redis does send (OOM, then
# WRONGTYPE), not for its silence: a command timeout of 1 s keeps a host
# busy with other suites from turning a late reply into an outage, which
# the default 100 ms did once (a WRONGTYPE call answered by its policy
# after 102 ms, with two matrix suites running at once).
run_sql("SET slidewin.command_timeout = '1s'");
is($redis->cli('debug', 'populate', '20000', 'fill', '100'), 'OK', 'DEBUG POPULATE 20000 keys');
is($redis->cli('config', 'set', 'maxmemory-policy', 'noeviction'), 'OK', 'noeviction');
is($redis->cli('config', 'set', 'maxmemory', '1mb'), 'OK', 'maxmemory 1mb');
my ($used) = $redis->cli('info', 'memory') =~ /^used_memory:(\d+)/m;
cmp_ok($used, '>', 1024 * 1024, "Redis uses more than maxmemory ($used bytes)");
my ($oom_out, $oom_err) = $redis->cli('set', 'probe', 'x');
like("$oom_out $oom_err", qr/OOM/, 'a plain write is refused with OOM');

($out, $err, $dt) = attempt('f:oom:new', 'fallback');
is($out, 't|fallback|99|f|f', 'OOM, policy fallback: a new key is admitted by the fallback store');
is($err, '', 'OOM, policy fallback: no error');
cmp_ok($dt, '<', 2, sprintf('OOM, policy fallback: %.3f s', $dt));

($out, $err, $dt) = attempt('f:oom:new2', 'error');
is(sqlstate($err), '08006', 'OOM, policy error: SQLSTATE 08006');
like($err, qr/slidewin could not reach Redis/, 'OOM, policy error: message');
like($err, qr/DETAIL:.*OOM/, 'OOM, policy error: DETAIL carries the OOM reply');
cmp_ok($dt, '<', 2, sprintf('OOM, policy error: %.3f s', $dt));

($out, $err) = attempt('f:oom:new3', 'allow');
is($out, 't|none||t|t', 'OOM, policy allow: allowed, store none');
($out, $err) = attempt('f:oom:new3', 'deny');
is($out, 'f|none||t|t', 'OOM, policy deny: denied, store none');

is($redis->cli('exists', 'slidewin:log:f:oom:new'), '0',
	'the call admitted during OOM left nothing in Redis');
is($redis->cli('config', 'set', 'maxmemory', '0'), 'OK', 'maxmemory 0 again');
($out, $err, $dt) = attempt('f:oom:new2', 'error');
is($out, 't|redis|99|f|f', 'memory back: the next call is answered by Redis');
is($err, '', 'memory back: no error');
# (1.8) and after its answer it carried the fallback store's admission of
# another key, the one admitted during OOM, into Redis
is($redis->cli('zcard', 'slidewin:log:f:oom:new'), '1',
	'the call admitted during OOM is in Redis once memory is back, carried by the next call');

# ---------------------------------------------------------------------
# WRONGTYPE is not an outage: an error even under policy fallback.
# ---------------------------------------------------------------------
is($redis->cli('set', 'slidewin:log:f:str', 'not a zset'), 'OK', 'a string where a log belongs');
foreach my $policy (qw(fallback allow deny))
{
	($out, $err, $dt) = attempt('f:str', $policy);
	is(sqlstate($err), '42809', "WRONGTYPE under policy $policy: SQLSTATE 42809");
	like($err, qr/holds a value of another type/, "WRONGTYPE under policy $policy: message");
	is($out, '', "WRONGTYPE under policy $policy: no row");
	cmp_ok($dt, '<', 2, sprintf('WRONGTYPE under policy %s: %.3f s', $policy, $dt));
}
($out, $err) = run_sql(q{SELECT count(*) FROM rl_fallback_log WHERE key = 'slidewin:f:str'});
is($out, '0', 'WRONGTYPE did not fall back: no fallback row');
run_sql('RESET slidewin.command_timeout');

# ---------------------------------------------------------------------
# The same backend served everything.
# ---------------------------------------------------------------------
($out, $err) = run_sql('SELECT pg_backend_pid()');
is($out, $pid0, 'the backend survived every fault');
($out, $err) = attempt('f:end', 'error');
is($out, 't|redis|99|f|f', 'and still talks to Redis');
($out) = $node->safe_psql('postgres', 'SELECT 1');
is($out, '1', 'the server accepts new sessions');

$s->quit;
done_testing();
