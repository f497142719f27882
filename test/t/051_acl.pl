# The Redis ACL that doc/installing.md prints is enough for everything slidewin does
# in Redis, and no more than it needs for keys.
#
# The rules are read from doc/installing.md at run time, between the markers
#   <!-- redis-acl:begin --> and <!-- redis-acl:end -->
# so the README and this test cannot drift apart.  A Redis user is created
# from exactly those rules, and a node connects as that user under the error
# policy, so that a refused command fails the call instead of falling back.
# It then runs every feature that reaches Redis: the four algorithms (attempt,
# denial, peek), rl_attempt_multi, expiry of old entries, rl_reset,
# rl_enforce, rl_wait, shadow mode, a refund on ROLLBACK, and a database
# other than 0 (SELECT).  Redis's ACL LOG must stay empty throughout.
# Finally, with another key prefix, the same user is refused (NOPERM).
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest;

# ---------------------------------------------------------------------
# The rules, as the README prints them
# ---------------------------------------------------------------------
my $readme = slurp_file(SlidewinTest::src_dir() . '/doc/installing.md');
my ($section) =
  $readme =~ /<!-- redis-acl:begin -->\n(.*?)<!-- redis-acl:end -->/s;
ok(defined $section, 'doc/installing.md has the redis-acl markers')
  or BAIL_OUT('no ACL section in doc/installing.md');
my ($command) = $section =~ /^```[a-z]*\n(.*?)^```/ms;
ok(defined $command, 'the ACL section holds one code block')
  or BAIL_OUT('no code block between the ACL markers');
my @words = split ' ', $command;
my ($acl, $setuser, $user) = splice(@words, 0, 3);
is(uc("$acl $setuser"), 'ACL SETUSER', 'the block is an ACL SETUSER command');
my @rules = @words;
my ($password) = map { /^>(.+)$/ ? $1 : () } @rules;
ok(defined $password, "the rules set a password for user $user");
note("rules: @rules");

my $redis = SlidewinTest::start_redis();
my ($out, $err, $status) = $redis->cli('acl', 'setuser', $user, @rules);
is($out, 'OK', 'Redis accepts the rules as printed') or diag($err);

# The user is limited: no command outside the list, no key outside the prefix.
sub as_user
{
	return $redis->cli('--user', $user, '--pass', $password,
		'--no-auth-warning', @_);
}
like(scalar as_user('flushall'), qr/NOPERM/, 'the user may not FLUSHALL');
like(scalar as_user('get', 'elsewhere:x'),
	qr/NOPERM/, 'the user may not read a key outside the prefix');
$redis->cli('acl', 'log', 'reset');

my $port = $redis->port;
my $url  = "redis://$user:$password\@127.0.0.1:$port";
my $node = SlidewinTest::new_node('acl', undef,
	[ "slidewin.redis_url = '$url'", "slidewin.on_redis_error = error" ]);

# run($sql): stdout and stderr of $sql in a new session, SQLSTATEs shown.
sub run
{
	my ($sql) = @_;
	my ($o, $e) = ('', '');
	$node->psql(
		'postgres', "\\set VERBOSITY verbose\n$sql",
		stdout        => \$o,
		stderr        => \$e,
		on_error_stop => 0);
	return ($o, $e);
}

# Checks that $sql ran without any error or warning and printed $expect.
sub clean
{
	my ($sql, $expect, $name) = @_;
	my ($o, $e) = run($sql);
	is($o, $expect, $name);
	is($e, '', "$name: no error or warning") or diag($e);
	return;
}

# Redis starts with no script cached: the first call of every script goes
# through EVALSHA, gets NOSCRIPT and sends EVAL.  Flush once more in between
# so that both commands are used whatever the order below.
$redis->cli('script', 'flush');

# ---------------------------------------------------------------------
# The four algorithms: three admitted, a denial of cost 1 and one of cost 2
# (the sliding log then searches its entries), then a peek.
# ---------------------------------------------------------------------
foreach my $algo (qw(sliding_log sliding_counter fixed_window token_bucket))
{
	clean(
		qq{SELECT string_agg(format('%s/%s/%s', (r).allowed, (r).remaining, (r).store), ' ' ORDER BY n)
		   FROM (SELECT n, rl_attempt('acl:$algo', 3, '1 hour', CASE WHEN n = 5 THEN 2 ELSE 1 END,
		                              on_redis_error => 'error', algorithm => '$algo') AS r
		         FROM generate_series(1, 5) AS n) AS calls},
		't/2/redis t/1/redis t/0/redis f/0/redis f/0/redis',
		"$algo: three admitted, then denied");
	clean(
		qq{SELECT allowed, remaining, store
		   FROM rl_peek('acl:$algo', 3, '1 hour', on_redis_error => 'error', algorithm => '$algo')},
		'f|0|redis',
		"$algo: rl_peek of the exhausted key");
}

clean(
	q{SELECT string_agg(format('%s/%s', (r).allowed, (r).remaining), ' ' ORDER BY n)
	  FROM (SELECT n, rl_attempt_multi('acl:multi', ARRAY[2, 5], ARRAY['1 hour', '2 hours']::interval[],
	                                   on_redis_error => 'error') AS r
	        FROM generate_series(1, 3) AS n) AS calls},
	't/1 t/0 f/0',
	'rl_attempt_multi: two admitted, then denied');

# Entries that leave the window are trimmed; when all have left, the log
# is deleted and started again.
clean(
	q{SELECT count(*) FILTER (WHERE rl_allow('acl:expiry', 2, '200 milliseconds', on_redis_error => 'error'))
	  FROM generate_series(1, 2)},
	'2', 'short window: two admitted');
usleep(300_000);
clean(
	q{SELECT allowed, remaining FROM rl_attempt('acl:expiry', 2, '200 milliseconds', on_redis_error => 'error')},
	't|1', 'after the window has passed the old entries are gone');

clean(
	q{SELECT rl_reset('acl:sliding_log');
	  SELECT remaining FROM rl_peek('acl:sliding_log', 3, '1 hour', on_redis_error => 'error')},
	"\n3", 'rl_reset empties the key');

# rl_block and rl_unblock: the block script and the block key every
# script reads need no command beyond the block above.
clean(
	q{SELECT rl_block('acl:block', '1 hour') > now();
	  SELECT string_agg(format('%s/%s', a, (r).allowed), ' ' ORDER BY a)
	    FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a,
	         rl_attempt('acl:block', 3, '1 hour', on_redis_error => 'error', algorithm => a) r;
	  SELECT rl_unblock('acl:block');
	  SELECT allowed FROM rl_attempt('acl:block', 3, '1 hour', on_redis_error => 'error')},
	"t\nfixed_window/f sliding_counter/f sliding_log/f token_bucket/f\nt\nt",
	'rl_block denies every algorithm, rl_unblock lifts it');

# ---------------------------------------------------------------------
# rl_enforce, rl_wait, shadow mode
# ---------------------------------------------------------------------
clean(
	q{SELECT allowed FROM rl_enforce('acl:enforce', 1, '1 hour', on_redis_error => 'error')},
	't', 'rl_enforce admits the first call');
my ($o, $e) = run(
	q{SELECT allowed FROM rl_enforce('acl:enforce', 1, '1 hour', on_redis_error => 'error')});
like($e, qr/ERROR:\s+RL429: rate limit exceeded$/m,
	'rl_enforce denies the second call with RL429');

my ($o1, $e1) = run(
	q{SELECT allowed, reset_at FROM rl_attempt('acl:wait', 1, '300 milliseconds', on_redis_error => 'error')});
my ($first_reset) = $o1 =~ /^t\|(.+)$/;
ok(defined $first_reset && $e1 eq '', 'rl_wait key: first unit taken') or diag("$o1 $e1");
my ($o2, $e2) = run(
	q{SELECT allowed, store, reset_at FROM rl_wait('acl:wait', 1, '300 milliseconds',
	    timeout => '5 seconds', on_redis_error => 'error')});
my ($wait_reset) = $o2 =~ /^t\|redis\|(.+)$/;
ok(defined $wait_reset && $e2 eq '', 'rl_wait admits once the unit is free') or diag("$o2 $e2");
# Each reset_at is its entry's time plus the window, on Redis's clock: the
# second entry is at least a window after the first, so rl_wait waited for
# the unit to leave the window, however slow this machine was between calls.
($o, $e) = run(
	"SELECT '$wait_reset'::timestamptz - '$first_reset'::timestamptz >= interval '300 milliseconds'");
is($o, 't', 'rl_wait waited for the window');

foreach my $algo (qw(sliding_log sliding_counter fixed_window token_bucket))
{
	clean(
		qq{SET slidewin.enforce = off;
		   SELECT string_agg((rl_attempt('acl:shadow:$algo', 1, '1 hour', on_redis_error => 'error',
		                                 algorithm => '$algo')).allowed::text, ' ')
		   FROM generate_series(1, 2);
		   SET slidewin.enforce = on;
		   SELECT allowed, store FROM rl_peek('acl:shadow:$algo', 1, '1 hour', on_redis_error => 'error',
		                                      algorithm => '$algo')},
		"true true\nf|redis",
		"$algo: shadow mode admits and records the call over the limit");
}

# ---------------------------------------------------------------------
# A refund on ROLLBACK: the entry is found, removed, and the later ones
# renumbered, all by the refund script.
# ---------------------------------------------------------------------
clean(
	q{SELECT remaining FROM rl_attempt('acl:refund', 5, '1 hour', 1, on_redis_error => 'error');
	  BEGIN;
	  SELECT remaining FROM rl_attempt('acl:refund', 5, '1 hour', 2, on_redis_error => 'error',
	                                   refund_on_abort => true);
	  ROLLBACK;
	  SELECT remaining FROM rl_peek('acl:refund', 5, '1 hour', on_redis_error => 'error');
	  SELECT refunded, refunds_dropped FROM rl_backend_stats()},
	"4\n2\n4\n1|0",
	'refund on ROLLBACK: the 2 units come back, none dropped');

# ---------------------------------------------------------------------
# A database other than 0: SELECT after AUTH
# ---------------------------------------------------------------------
clean(
	qq{SET slidewin.redis_url = '$url/1';
	   SELECT allowed, store FROM rl_attempt('acl:db1', 1, '1 hour', on_redis_error => 'error')},
	't|redis', 'database 1: the call is answered by Redis');
is($redis->cli('-n', '1', 'exists', 'slidewin:log:acl:db1'),
	'1', 'the key was written in database 1');

($out) = $redis->cli('acl', 'log');
is($out, '', 'Redis logged no ACL denial for any of the calls above');

# ---------------------------------------------------------------------
# Keys outside the pattern are refused, under every failure policy
# ---------------------------------------------------------------------
foreach my $policy (qw(error fallback))
{
	($o, $e) = run(
		qq{SET slidewin.key_prefix = 'elsewhere:';
		   SELECT allowed FROM rl_attempt('acl:outside', 3, '1 hour', on_redis_error => '$policy')});
	like($e, qr/ERROR:.*Redis rejected a slidewin command.*NOPERM/s,
		"another key prefix: NOPERM is an error under policy $policy");
}
($o, $e) = run(
	q{SET slidewin.key_prefix = 'elsewhere:';
	  SELECT rl_reset('acl:outside')});
like($e, qr/NOPERM/, 'another key prefix: rl_reset is refused too');
($out) = $redis->cli('acl', 'log');
like($out, qr/elsewhere:/, 'Redis logged the refused key');
like($out, qr/\Q$user\E/, "as user $user");

done_testing();
