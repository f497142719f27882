# rl_wait and shadow mode against a real Redis:
#  - rl_wait admits a waiter when the sliding window frees a unit (not
#    before), gives up at its timeout, and is ended at once by
#    pg_cancel_backend or statement_timeout;
#  - while it waits the backend sleeps on its latch (almost no CPU);
#  - ALTER ROLE ... SET slidewin.enforce = off puts one role in shadow mode:
#    its over-limit calls are admitted and recorded, other roles are still
#    denied, and the role cannot switch the setting itself;
#  - slidewin.log_denials reports denials and would-be denials, and is
#    silent by default.
use strict;
use warnings;

use POSIX ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
my $node  = SlidewinTest::new_node('wait_shadow', $redis);

sub superuser_sql { return $node->safe_psql('postgres', $_[0]) }

# A connected psql session running in the background, with the library
# loaded (so the first timed call does not pay for loading it or for the
# Redis connection) and SQLSTATEs in its error messages.
sub bg_session
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe('\set VERBOSITY verbose');
	$s->query_safe(q{SELECT rl_peek('ws:warmup', 1, '1 second')});
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	return ($s, $pid);
}

# send_async($s, $sql) hands $sql to a background session and returns at
# once; collect($s, $tag) waits for it to finish and returns its stdout and
# stderr.  Both streams end with a marker, so nothing of the answer is left
# behind for the next one.
my $tag_no = 0;

sub send_async
{
	my ($s, $sql) = @_;
	my $tag = 'ws_async_done_' . ++$tag_no;
	$s->{stdin} .= "$sql\n\\echo $tag\n\\warn $tag\n";
	$s->{run}->pump_nb;
	return $tag;
}

sub is_done
{
	my ($s, $tag) = @_;
	$s->{run}->pump_nb;
	return $s->{stdout} =~ /^\Q$tag\E\r?$/m && $s->{stderr} =~ /^\Q$tag\E\r?$/m;
}

sub collect
{
	my ($s, $tag) = @_;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	until (is_done($s, $tag))
	{
		die "background session: no answer for $tag" if time > $deadline;
		usleep(2_000);
	}
	my ($out, $err) = ($s->{stdout}, $s->{stderr});
	$s->{stdout} = $s->{stderr} = '';
	s/^\Q$tag\E\r?\n?.*\z//ms for $out, $err;
	chomp $out;
	return ($out, $err);
}

sub cpu_seconds
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or die "cannot read /proc/$pid/stat: $!";
	my $stat = <$fh>;
	close $fh;
	# Fields after "pid (comm) ": state is the first, utime the 12th, stime the 13th.
	my @f = split ' ', ($stat =~ /\)\s+(.*)\z/s)[0];
	return ($f[11] + $f[12]) / POSIX::sysconf(POSIX::_SC_CLK_TCK);
}

sub wait_until_sleeping
{
	my ($pid) = @_;
	$node->poll_query_until('postgres', qq{
		SELECT state = 'active' AND wait_event_type = 'Extension'
		FROM pg_stat_activity WHERE pid = $pid})
	  or die "backend $pid never started waiting";
	return;
}

# --------------------------------------------------------------------------
# 1. Three waiters for 2 units per second, started together.
# --------------------------------------------------------------------------

my @trio = map { [ bg_session() ] } 1 .. 3;
my ($s4) = bg_session();

# Each session reports: its start time; allowed | remaining | retry_after |
# reset_at (all epoch seconds) | store; its end time.
my $trio_sql = q{
SELECT extract(epoch FROM clock_timestamp());
SELECT r.allowed, r.remaining, extract(epoch FROM r.retry_after),
       extract(epoch FROM r.reset_at), r.store
  FROM rl_wait('ws:trio', 2, '1 second', 1, '5 seconds') r;
SELECT extract(epoch FROM clock_timestamp());};

my @tags = map { send_async($_->[0], $trio_sql) } @trio;

# Once two of them are back, the key is full: a fourth caller with a
# 100 ms timeout must come back denied.
my $deadline = time + 30;
until (2 <= grep { is_done($trio[$_][0], $tags[$_]) } 0 .. 2)
{
	die 'the first two waiters never came back' if time > $deadline;
	usleep(2_000);
}
my ($out4, $err4) = collect($s4, send_async($s4, q{
SELECT extract(epoch FROM clock_timestamp());
SELECT r.allowed, r.remaining, extract(epoch FROM r.retry_after),
       extract(epoch FROM r.reset_at), r.store
  FROM rl_wait('ws:trio', 2, '1 second', 1, '100 ms') r;
SELECT extract(epoch FROM clock_timestamp());}));
# The two entries admitted, nothing for the denied call.  (Read now: the
# Redis key of a 1 s window expires about 1 s after its last admission.)
my $zcard4 = $redis->cli('zcard', 'slidewin:log:ws:trio');
my $zcard4_at = time;

my @calls;
foreach my $i (0 .. 2)
{
	my ($out, $err) = collect($trio[$i][0], $tags[$i]);
	is($err, '', "waiter $i: no error");
	my ($t0, $row, $t1) = split /\n/, $out;
	my ($allowed, $remaining, $retry, $reset, $store) = split /\|/, $row // '';
	push @calls, {
		t0 => $t0, t1 => $t1, allowed => $allowed, remaining => $remaining,
		retry => $retry, store => $store,
		# Admission time as Redis TIME recorded it: reset_at - win.
		admitted => $reset - 1,
	};
}
@calls = sort { $a->{admitted} <=> $b->{admitted} } @calls;
my ($first, $second, $third) = @calls;
my $start = (sort { $a <=> $b } map { $_->{t0} } @calls)[0];
my $last_start = (sort { $b <=> $a } map { $_->{t0} } @calls)[0];

cmp_ok($last_start - $start, '<', 0.3,
	sprintf('the three waiters started together (within %.3f s)', $last_start - $start));
is(join(',', map { "$_->{allowed}/$_->{store}" } @calls), 't/redis,t/redis,t/redis',
	'all three waiters were admitted, by Redis');
# The third is admitted when the first admission leaves the window; if the
# second has left it too by then, the window holds only the third.
my $third_rem = $third->{admitted} < $second->{admitted} + 1 ? 0 : 1;
is(join(',', map { $_->{remaining} } @calls), "1,0,$third_rem",
	"remaining after each admission: 1, 0, $third_rem");
is(join(',', map { $_->{retry} + 0 } @calls), '0,0,0', 'admitted calls have no retry_after');
foreach my $c ([ first => $first ], [ second => $second ])
{
	my $d = $c->[1]{t1} - $c->[1]{t0};
	cmp_ok($d, '<', 0.3, sprintf('the %s waiter was admitted at once (%.3f s)', $c->[0], $d));
}
my $gap = $third->{admitted} - $first->{admitted};
cmp_ok($gap, '>=', 1.0,
	sprintf('third admitted no earlier than 1 s after the first (Redis clock: %.6f s)', $gap));
cmp_ok($gap, '<', 1.5, sprintf('third admitted about 1 s after the first (%.3f s)', $gap));
cmp_ok($third->{t1} - $first->{admitted}, '>=', 1.0,
	sprintf('third returned no earlier than 1 s after the first admission (wall clock: %.3f s)',
		$third->{t1} - $first->{admitted}));
cmp_ok($third->{t1} - $start, '<=', 1.5,
	sprintf('third returned within 1.5 s of the start (%.3f s)', $third->{t1} - $start));
cmp_ok($third->{t1} - $third->{t0}, '>=', 0.5,
	sprintf('third really waited (%.3f s in its call)', $third->{t1} - $third->{t0}));

# The fourth caller: timeout 100 ms on the full key.
is($err4, '', 'fourth caller: no error');
my ($t0_4, $row4, $t1_4) = split /\n/, $out4;
my ($allowed4, $remaining4, $retry4, undef, $store4) = split /\|/, $row4 // '';
cmp_ok($t0_4, '>=', $second->{admitted},
	'fourth caller started after the key was full');
cmp_ok($t1_4, '<', $first->{admitted} + 1.0,
	'fourth caller ended before any unit was freed');
is("$allowed4/$remaining4/$store4", 'f/0/redis', 'fourth caller: denied after its timeout');
cmp_ok($t1_4 - $t0_4, '>=', 0.1,
	sprintf('fourth caller waited its 100 ms timeout (%.3f s)', $t1_4 - $t0_4));
cmp_ok($t1_4 - $t0_4, '<', 0.5,
	sprintf('fourth caller gave up near 100 ms, well under 1 s (%.3f s)', $t1_4 - $t0_4));
ok($retry4 > 0 && $retry4 <= 1, "fourth caller: retry_after within the window ($retry4 s)");
cmp_ok($zcard4_at, '<', $first->{admitted} + 1.0,
	'Redis was read before any unit was freed');
is($zcard4, '2', 'Redis holds the two admissions and nothing for the denied call');

$_->[0]->quit for @trio;
$s4->quit;

# --------------------------------------------------------------------------
# 2. pg_cancel_backend and statement_timeout end a long wait.
# --------------------------------------------------------------------------

is(superuser_sql(q{SELECT allowed FROM rl_attempt('ws:cancel', 1, '1 hour')}),
	't', 'ws:cancel: its single unit is taken');
my ($s, $pid) = bg_session();
my $tag = send_async($s, q{SELECT allowed FROM rl_wait('ws:cancel', 1, '1 hour', 1, '60 s');});
wait_until_sleeping($pid);
my $t = time;
is(superuser_sql("SELECT pg_cancel_backend($pid)"), 't', 'pg_cancel_backend sent');
my ($out, $err) = collect($s, $tag);
my $elapsed = time - $t;
like($err, qr/ERROR:\s+57014: canceling statement due to user request/,
	'the waiting rl_wait is cancelled (57014)');
is($out, '', 'the cancelled rl_wait returned no row');
cmp_ok($elapsed, '<', 1, sprintf('cancel took effect within 1 s (%.3f s)', $elapsed));
is($s->query_safe('SELECT 1'), '1', 'the session is usable after the cancel');

$t   = time;
$tag = send_async($s, q{SET statement_timeout = '300ms';
SELECT allowed FROM rl_wait('ws:cancel', 1, '1 hour', 1, '60 s');
RESET statement_timeout;});
($out, $err) = collect($s, $tag);
$elapsed = time - $t;
like($err, qr/ERROR:\s+57014: canceling statement due to statement timeout/,
	'statement_timeout ends the rl_wait (57014)');
is($out, '', 'the timed-out rl_wait returned no row');
cmp_ok($elapsed, '>=', 0.3, sprintf('not before the 300 ms statement_timeout (%.3f s)', $elapsed));
cmp_ok($elapsed, '<', 1.5, sprintf('soon after 300 ms, not after 60 s (%.3f s)', $elapsed));
is($redis->cli('zcard', 'slidewin:log:ws:cancel'), '1',
	'the interrupted waits recorded nothing');
$s->quit;

# --------------------------------------------------------------------------
# 3. A waiting backend sleeps: little CPU over a 2 s wait.
# --------------------------------------------------------------------------

is(superuser_sql(q{SELECT allowed FROM rl_attempt('ws:cpu', 1, '1 hour')}),
	't', 'ws:cpu: its single unit is taken');
($s, $pid) = bg_session();
my $cpu0 = cpu_seconds($pid);
$t   = time;
$tag = send_async($s, q{SELECT allowed FROM rl_wait('ws:cpu', 1, '1 hour', 1, '2 s');});
wait_until_sleeping($pid);
($out, $err) = collect($s, $tag);
$elapsed = time - $t;
my $cpu = cpu_seconds($pid) - $cpu0;
is("$out|$err", 'f|', 'the 2 s wait ended denied, without error');
cmp_ok($elapsed, '>=', 2, sprintf('it lasted its 2 s timeout (%.3f s)', $elapsed));
cmp_ok($cpu, '<', 0.2, sprintf('its backend used %.2f s of CPU over the wait', $cpu));
$s->quit;

# --------------------------------------------------------------------------
# 4. Shadow mode for one role.
# --------------------------------------------------------------------------

superuser_sql(q{
	CREATE ROLE canary LOGIN;
	CREATE ROLE normal LOGIN;
	ALTER ROLE canary SET slidewin.enforce = off;
});

# A new session as $user; errors do not stop it and carry their SQLSTATE.
sub session_as
{
	my ($user, $sql) = @_;
	my ($ret, $stdout, $stderr) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		extra_params => [ '-U', $user ], on_error_stop => 0);
	return ($stdout, $stderr);
}

sub sqlstates
{
	my ($stderr) = @_;
	return join(',', $stderr =~ /ERROR:\s+([0-9A-Z]{5}):/g);
}

my $no_denial_msg = qr/slidewin (?:would deny|denied) key/;

# allowed/remaining/(retry_after in (59 min, 1 hour])/store
sub row_sql
{
	my ($call) = @_;
	return qq{SELECT r.allowed || '/' || r.remaining || '/' ||
	  (r.retry_after > interval '59 minutes' AND r.retry_after <= interval '1 hour')
	  || '/' || r.store FROM $call r;\n};
}
my $attempt = row_sql(q{rl_attempt('ws:shadow', 2, '1 hour')});

my ($c_out, $c_err) = session_as('canary', "SHOW slidewin.enforce;\n"
	  . ($attempt x 4)
	  . row_sql(q{rl_enforce('ws:shadow', 2, '1 hour')})
	  . row_sql(q{rl_wait('ws:shadow', 2, '1 hour', 1, '5 s')})
	  . q{SELECT rl_allow('ws:shadow', 2, '1 hour');
	      SELECT (clock_timestamp() - statement_timestamp() < interval '1 second')::text
	        FROM rl_wait('ws:shadow', 2, '1 hour', 1, '5 s') r;
	      SHOW slidewin.enforce;});
is($c_out, join("\n",
		'off',
		'true/1/false/redis', 'true/0/false/redis',
		'true/0/true/redis', 'true/0/true/redis',
		'true/0/true/redis', 'true/0/true/redis',
		't', 'true', 'off'),
	'canary: over-limit calls admitted with remaining 0 and the retry_after they would have had; '
	  . 'rl_enforce does not raise, rl_wait does not wait');
is($c_err, '', 'canary: no error, and no denial message by default');

is(superuser_sql(q{SELECT allowed || '/' || remaining FROM rl_peek('ws:shadow', 2, '1 hour')}),
	'false/0', 'superuser peek: the key is over its limit');
is(superuser_sql(q{SELECT remaining FROM rl_peek('ws:shadow', 100, '1 hour')}),
	'92', 'superuser peek: all 8 calls of canary are counted (100 - 8)');
is($redis->cli('zcard', 'slidewin:log:ws:shadow'), '8', 'Redis holds one entry per canary call');

my ($n_out, $n_err) = session_as('normal', $attempt
	  . row_sql(q{rl_enforce('ws:shadow', 2, '1 hour')})
	  . row_sql(q{rl_wait('ws:shadow', 2, '1 hour', 1, '100 ms')})
	  . q{SELECT rl_allow('ws:shadow', 2, '1 hour'); SHOW slidewin.enforce;});
is($n_out, join("\n", 'false/0/true/redis', 'false/0/true/redis', 'f', 'on'),
	'normal: denied on the same key (rl_attempt, rl_wait, rl_allow)');
is(sqlstates($n_err), 'RL429', 'normal: rl_enforce raises RL429');
like($n_err, qr/ERROR:\s+RL429: rate limit exceeded$/m, 'normal: the RL429 message, without the key');
unlike($n_err, $no_denial_msg, 'normal: no denial message by default');
is(superuser_sql(q{SELECT remaining FROM rl_peek('ws:shadow', 100, '1 hour')}),
	'92', 'the denied calls of normal recorded nothing');

# Neither role may change slidewin.enforce for itself: not once the library
# is loaded, not with set_config, not by ALTER ROLE, and not by setting it
# before the library loads.
my $over = row_sql(q{rl_attempt('ws:shadow', 2, '1 hour')});
($c_out, $c_err) = session_as('canary', qq{
	SELECT rl_allow('ws:load', 100, '1 hour');
	SET slidewin.enforce = on;
	SELECT set_config('slidewin.enforce', 'on', false);
	ALTER ROLE canary SET slidewin.enforce = on;
	SHOW slidewin.enforce;
	$over});
is(sqlstates($c_err), '42501,42501,42501',
	'canary: SET, set_config and ALTER ROLE on slidewin.enforce are refused (42501)');
like($c_err, qr/permission denied to set parameter "slidewin.enforce"/,
	'canary: permission denied to set parameter "slidewin.enforce"');
is($c_out, "t\noff\ntrue/0/true/redis", 'canary: still in shadow mode');

($c_out, $c_err) = session_as('canary', "SET slidewin.enforce = on;\n$over"
	  . 'SHOW slidewin.enforce;');
is($c_out, "true/0/true/redis\noff",
	'canary: a SET before the library loads does not switch enforcement on');

($n_out, $n_err) = session_as('normal', qq{
	SELECT rl_allow('ws:load', 100, '1 hour');
	SET slidewin.enforce = off;
	SELECT set_config('slidewin.enforce', 'off', false);
	$over});
is(sqlstates($n_err), '42501,42501', 'normal: SET and set_config slidewin.enforce = off are refused');
is($n_out, "t\nfalse/0/true/redis", 'normal: still enforced');

($n_out, $n_err) = session_as('normal', "SET slidewin.enforce = off;\n$over"
	  . 'SHOW slidewin.enforce;');
is($n_out, "false/0/true/redis\non",
	'normal: a SET before the library loads does not switch enforcement off');

is(superuser_sql(q{SELECT remaining FROM rl_peek('ws:shadow', 100, '1 hour')}),
	'90', 'only the two later canary calls were added (100 - 10)');
is(superuser_sql(q{SELECT array_to_string(setconfig, ',') FROM pg_db_role_setting s
		JOIN pg_roles r ON r.oid = s.setrole WHERE r.rolname = 'canary'}),
	'slidewin.enforce=off', 'canary role setting unchanged');

# --------------------------------------------------------------------------
# 5. slidewin.log_denials.
# --------------------------------------------------------------------------

sub count_of
{
	my ($re, $text) = @_;
	my $n = () = $text =~ /$re/g;
	return $n;
}

my $would_deny = qr/WARNING:\s+[0-9A-Z]{5}: slidewin would deny key "ws:log:c" \(shadow mode\)$/m;
my $denied_c   = qr/WARNING:\s+[0-9A-Z]{5}: slidewin denied key "ws:log:c"$/m;
my $denied_n   = qr/WARNING:\s+[0-9A-Z]{5}: slidewin denied key "ws:log:n"$/m;
my $enforce_n  = row_sql(q{rl_enforce('ws:log:n', 1, '1 hour')});

# Until a new session of a role without its own setting (normal) sees
# $value, once the library is loaded: pg_reload_conf only signals.
sub wait_for_log_denials
{
	my ($value) = @_;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (1)
	{
		my ($o) = session_as('normal',
			"SELECT (rl_peek('ws:warmup', 1, '1 second')).allowed IS NOT NULL;\nSHOW slidewin.log_denials;");
		return if $o eq "t\n$value";
		die "new sessions never saw slidewin.log_denials = $value" if time > $deadline;
		usleep(50_000);
	}
}

# Set for canary only.
superuser_sql('ALTER ROLE canary SET slidewin.log_denials = warning');
($c_out, $c_err) = session_as('canary',
	row_sql(q{rl_attempt('ws:log:c', 1, '1 hour')}) x 3);
is($c_out, "true/0/false/redis\ntrue/0/true/redis\ntrue/0/true/redis",
	'log_denials: canary still admitted');
is(count_of($would_deny, $c_err), 2,
	'log_denials = warning: one "would deny ... (shadow mode)" WARNING per over-limit call of canary');
like($c_err, qr/DETAIL:.*\bused 1 of 1\b.*DETAIL:.*\bused 2 of 1\b/si,
	'the details count the units used; the second over-limit call counts the recorded first one');
is(count_of($denied_c, $c_err), 0, 'no "denied" message in shadow mode');
ok($node->log_contains('slidewin would deny key "ws:log:c" \(shadow mode\)'),
	'the would-be denial is in the server log too');

($n_out, $n_err) = session_as('normal',
	row_sql(q{rl_attempt('ws:log:n', 1, '1 hour')}) x 2);
is($n_out, "true/0/false/redis\nfalse/0/true/redis", 'normal: denied');
unlike($n_err, $no_denial_msg, 'normal: no message while only canary has log_denials set');

# Set for everyone through ALTER SYSTEM.
# ALTER SYSTEM only knows the parameter once the library is loaded.
superuser_sql(q{
	SELECT (rl_peek('ws:warmup', 1, '1 second')).allowed IS NOT NULL;
	ALTER SYSTEM SET slidewin.log_denials = warning;
	SELECT pg_reload_conf();});
wait_for_log_denials('warning');
($n_out, $n_err) = session_as('normal',
	row_sql(q{rl_attempt('ws:log:n', 1, '1 hour')}) . $enforce_n);
is($n_out, 'false/0/true/redis', 'normal: denied again');
is(count_of($denied_n, $n_err), 2,
	'log_denials = warning (ALTER SYSTEM): one "slidewin denied" WARNING per denied call');
is(sqlstates($n_err), 'RL429', 'rl_enforce still raises RL429 after logging');
unlike($n_err, qr/would deny/, 'no "would deny" message when enforcing');

# Back to the default: silent.
superuser_sql(q{
	SELECT (rl_peek('ws:warmup', 1, '1 second')).allowed IS NOT NULL;
	ALTER SYSTEM RESET slidewin.log_denials;
	ALTER ROLE canary RESET slidewin.log_denials;
	SELECT pg_reload_conf();});
wait_for_log_denials('off');
($c_out, $c_err) = session_as('canary', row_sql(q{rl_attempt('ws:log:c', 1, '1 hour')}));
is($c_out, 'true/0/true/redis', 'canary: over limit, shadow-admitted');
unlike($c_err, $no_denial_msg, 'canary: silent again with log_denials reset');
($n_out, $n_err) = session_as('normal', row_sql(q{rl_attempt('ws:log:n', 1, '1 hour')}));
is($n_out, 'false/0/true/redis', 'normal: denied');
unlike($n_err, $no_denial_msg, 'normal: silent again with log_denials reset');

done_testing();
