# Denials Redis gave are honoured when it goes away, and a hot standby gives
# a documented answer when the fallback store cannot be used.
#
#  - Known denials: a key denied by Redis in one session stays denied in
#    every other session of the server once Redis is gone, until the retry
#    time Redis gave; then the fallback store decides alone.  A reset voids
#    the known denial.
#  - Standby: the Redis path works on a streaming replica; with Redis gone,
#    a fallback call there follows slidewin.standby_fallback (error with
#    SQLSTATE 25006, allow or deny), after any known denial; rl_peek and
#    rl_reset work too.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
my $primary = SlidewinTest::new_node('primary', $redis,
	[ "shared_preload_libraries = 'slidewin'", 'slidewin.redis_retry_interval = 0' ],
	{ allows_streaming => 1 });

sub q1
{
	my ($node, $sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

# psql with the error's SQLSTATE in stderr
sub try_sql
{
	my ($node, $sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\n$sql", on_error_stop => 1);
	return ($ret, $out, $err);
}

# ---------------------------------------------------------------------
# Known denials on the primary
# ---------------------------------------------------------------------
my $out = q1($primary,
	q{SELECT string_agg((r).allowed::text || ':' || (r).store, ',' ORDER BY g)
	  FROM generate_series(1, 5) g, LATERAL rl_attempt('kd', 3, '4 seconds', 1 + 0 * g) r});
is($out, 'true:redis,true:redis,true:redis,false:redis,false:redis',
	'Redis admits 3 of 5 on lim 3');

$redis->stop;
my $t0 = time;

# Another session (a new psql) with the fallback policy: denied, not admitted
# by an empty fallback log.
$out = q1($primary,
	q{SELECT allowed, store, retry_after > '0'::interval AND retry_after <= '4 seconds'::interval
	  FROM rl_attempt('kd', 3, '4 seconds')});
is($out, 'f|fallback|t', 'Redis gone: another session is denied by the known denial');
$out = q1($primary, q{SELECT allowed, store FROM rl_peek('kd', 3, '4 seconds')});
is($out, 'f|fallback', 'rl_peek in another session sees the known denial');
$out = q1($primary,
	q{SELECT allowed, store FROM rl_attempt('kd', 3, '4 seconds', algorithm => 'fixed_window')});
is($out, 't|fallback', 'the denial is of its rule only: another algorithm decides alone');
$out = q1($primary, q{SELECT allowed, store FROM rl_attempt('other', 3, '4 seconds')});
is($out, 't|fallback', 'another key is admitted by the fallback');

# Once the retry time Redis gave has passed, the fallback decides alone.
my $wait = 4.3 - (time - $t0);
usleep(int($wait * 1e6)) if $wait > 0;
$out = q1($primary, q{SELECT allowed, store FROM rl_attempt('kd', 3, '4 seconds')});
is($out, 't|fallback', 'after the retry time the fallback store decides');

# A reset voids a known denial.
$redis->restart;
$out = q1($primary,
	q{SELECT count(*) FILTER (WHERE allowed) FROM generate_series(1, 5) g,
	         LATERAL rl_attempt('kd2', 2, '1 hour', 1 + 0 * g) r});
is($out, '2', 'Redis admits 2 of 5 on lim 2');
$out = q1($primary, q{SELECT rl_reset('kd2')});
$redis->stop;
$out = q1($primary, q{SELECT allowed, store FROM rl_attempt('kd2', 2, '1 hour')});
is($out, 't|fallback', 'after rl_reset the known denial is void');

# ---------------------------------------------------------------------
# A streaming standby
# ---------------------------------------------------------------------
$redis->restart;
$primary->backup('bk');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'bk', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);
is(q1($standby, 'SELECT pg_is_in_recovery()'), 't', 'standby is in recovery');

$out = q1($standby,
	q{SELECT count(*) FILTER (WHERE allowed), min(store) FROM generate_series(1, 5) g,
	         LATERAL rl_attempt('sb', 3, '1 hour', 1 + 0 * g) r});
is($out, '3|redis', 'standby: the Redis path admits 3 of 5');
$out = q1($standby, q{SELECT allowed, remaining, store FROM rl_peek('sb', 3, '1 hour')});
is($out, 'f|0|redis', 'standby: rl_peek through Redis');

$redis->stop;

# Default: a clear error, SQLSTATE 25006, not an internal one.
my ($ret, $o, $err) = try_sql($standby, q{SELECT * FROM rl_attempt('sb2', 3, '1 hour')});
like($err, qr/ERROR:\s+25006: slidewin cannot use its fallback store on a standby/,
	'standby, Redis gone: fallback is an error with SQLSTATE 25006');
unlike($err, qr/58P01|could not open file/, 'no internal error about a missing file');
($ret, $o, $err) = try_sql($standby, q{SELECT * FROM rl_peek('sb2', 3, '1 hour')});
like($err, qr/25006/, 'rl_peek on a standby: 25006 as well');

# The known denial from Redis comes first, whatever standby_fallback says.
$out = q1($standby,
	q{SET slidewin.standby_fallback = 'allow';
	  SELECT allowed, store FROM rl_attempt('sb', 3, '1 hour')});
is($out, 'f|fallback', 'standby: a key Redis denied stays denied');

$out = q1($standby,
	q{SET slidewin.standby_fallback = 'allow';
	  SELECT allowed, store, remaining IS NULL FROM rl_attempt('sb3', 3, '1 hour')});
is($out, 't|none|t', "standby_fallback = allow: admitted without a store");
$out = q1($standby,
	q{SET slidewin.standby_fallback = 'deny';
	  SELECT allowed, store FROM rl_attempt('sb3', 3, '1 hour')});
is($out, 'f|none', "standby_fallback = deny: denied without a store");
$out = q1($standby,
	q{SELECT allowed, store FROM rl_attempt('sb3', 3, '1 hour', 1, 'allow')});
is($out, 't|none', 'an explicit allow policy is unchanged on a standby');

# rl_reset on a standby: nothing to clear locally; the Redis part warns.
($ret, $o, $err) = try_sql($standby, q{SELECT rl_reset('sb3')});
is($ret, 0, 'rl_reset on a standby with Redis gone does not fail');
like($err, qr/WARNING:.*were not cleared/, 'and warns that Redis was not cleared');
$redis->restart;
($ret, $o, $err) = try_sql($standby, q{SELECT rl_reset('sb')});
is($ret, 0, 'rl_reset on a standby with Redis back');
is($err, '', 'without a warning');

# A superuser-only setting: an ordinary role cannot turn a standby fail-open.
q1($primary, 'CREATE ROLE plain LOGIN');
$primary->wait_for_catchup($standby);
($ret, $o, $err) = $standby->psql('postgres',
	"SET slidewin.standby_fallback = 'allow'", extra_params => [ '-U', 'plain' ]);
like($err, qr/permission denied to set parameter "slidewin.standby_fallback"/,
	'standby_fallback is superuser-only');

for my $n ($primary, $standby)
{
	my $log = slurp_file($n->logfile);
	unlike($log, qr/PANIC|terminated by signal/, $n->name . ': no PANIC or crash in the log');
}

done_testing();
