# A paused, busy or frozen Redis never hangs a backend: calls end near
# slidewin.command_timeout, and pg_cancel_backend or statement_timeout end a
# call that waits with a long timeout at once.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
# These tests are about the Redis path itself: failures must surface as
# errors (not go to the fallback store), and every call must try Redis.
my $node = SlidewinTest::new_node('timeouts', $redis,
	[ "slidewin.on_redis_error = 'error'", 'slidewin.redis_retry_interval = 0' ]);

# Runs one rl_attempt inside the backend and reports its own duration and
# SQLSTATE, so psql start-up time does not blur the measurement.
sub timed_call
{
	my ($settings) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', qq{
		$settings
		DO \$\$
		DECLARE t0 timestamptz := clock_timestamp();
		BEGIN
			PERFORM rl_attempt('tap:t', 5, '1 minute');
			RAISE NOTICE 'ok % ms', round(extract(epoch FROM clock_timestamp() - t0) * 1000);
		EXCEPTION WHEN OTHERS THEN
			RAISE NOTICE '% % ms: %', SQLSTATE,
				round(extract(epoch FROM clock_timestamp() - t0) * 1000), SQLERRM;
		END \$\$;
	});
	my ($state, $ms) = $err =~ /NOTICE:\s+(\S+) (\d+) ms/;
	return ($state // "none: $err", $ms // -1);
}

sub wait_for_active_call
{
	$node->poll_query_until('postgres', q{
		SELECT count(*) > 0 FROM pg_stat_activity
		WHERE query LIKE '%rl_attempt%' AND wait_event_type = 'Extension'
		  AND pid <> pg_backend_pid()})
	  or die 'the call never started waiting';
}

my ($state, $ms) = timed_call('');
is($state, 'ok', 'a call works while Redis is healthy');

# DEBUG SLEEP keeps Redis busy for 3 s.
my $bg = $redis->debug_sleep_bg(3);
usleep(200_000);
($state, $ms) = timed_call('');
is($state, '08006', 'busy Redis: connection failure SQLSTATE');
cmp_ok($ms, '>=', 90, "busy Redis: waited the command timeout ($ms ms)");
cmp_ok($ms, '<', 1000, "busy Redis: gave up near the 100 ms default ($ms ms)");
($state, $ms) = timed_call('SET slidewin.command_timeout = 400;');
cmp_ok($ms, '>=', 390, "command_timeout = 400 ms is honoured ($ms ms)");
cmp_ok($ms, '<', 1300, "command_timeout = 400 ms is not overrun ($ms ms)");
$bg->finish;

# CLIENT PAUSE stalls every command for 2 s.
$redis->pause_ms(2000);
($state, $ms) = timed_call('SET slidewin.command_timeout = 150;');
is($state, '08006', 'paused Redis: connection failure SQLSTATE');
cmp_ok($ms, '<', 1000, "paused Redis: gave up near 150 ms ($ms ms)");
$redis->cli('client', 'unpause');

# A frozen server (SIGSTOP) accepts nothing and answers nothing.
$redis->freeze;
($state, $ms) = timed_call('');
like($state, qr/^0800[16]$/, "frozen Redis: connection failure SQLSTATE ($state)");
cmp_ok($ms, '<', 1000, "frozen Redis: gave up within the timeouts ($ms ms)");

# pg_cancel_backend interrupts a call that would wait a minute.
my $s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('SET slidewin.command_timeout = 60000');
my $t0 = time;
$s->{stdin} .= "SELECT rl_attempt('tap:t', 5, '1 minute');\n";
$s->{run}->pump_nb;
wait_for_active_call();
my $started = time;
$node->safe_psql('postgres', q{
	SELECT pg_cancel_backend(pid) FROM pg_stat_activity
	WHERE query LIKE '%rl_attempt%' AND pid <> pg_backend_pid()});
my $out = $s->query('SELECT 1');
my $cancel_s = time - $started;
like($s->{stderr}, qr/canceling statement due to user request/,
	'pg_cancel_backend cancels a waiting call');
cmp_ok($cancel_s, '<', 2, sprintf('cancel took effect at once (%.2f s)', $cancel_s));
is($out, '1', 'the session is usable after the cancel');
$s->{stderr} = '';

# statement_timeout interrupts it too.
$t0 = time;
$out = $s->query(
	"SET statement_timeout = '300ms'; SELECT rl_attempt('tap:t', 5, '1 minute'); RESET statement_timeout;");
my $st_s = time - $t0;
like($s->{stderr}, qr/canceling statement due to statement timeout/,
	'statement_timeout cancels a waiting call');
cmp_ok($st_s, '<', 2.5, sprintf('statement_timeout took effect at once (%.2f s)', $st_s));
$s->{stderr} = '';

$redis->thaw;
$out = $s->query("RESET statement_timeout; SELECT (rl_attempt('tap:t', 5, '1 minute')).store");
is($out, 'redis', 'after Redis thaws, the same session works again');
is($s->{stderr}, '', 'no error after thaw');

# pg_terminate_backend ends a waiting backend too.
$redis->freeze;
$s->{stdin} .= "SELECT rl_attempt('tap:t', 5, '1 minute');\n";
$s->{run}->pump_nb;
wait_for_active_call();
$started = time;
$node->safe_psql('postgres', q{
	SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	WHERE query LIKE '%rl_attempt%' AND pid <> pg_backend_pid()});
$node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM pg_stat_activity
	WHERE query LIKE '%rl_attempt%' AND pid <> pg_backend_pid()})
  or die 'backend did not exit';
cmp_ok(time - $started, '<', 3, 'pg_terminate_backend ends a waiting backend');
$redis->thaw;
# psql exits once its backend is terminated; reap it.
eval { $s->quit; };

($state) = timed_call('');
is($state, 'ok', 'new sessions work after all of this');

done_testing();
