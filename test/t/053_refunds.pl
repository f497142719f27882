# Refunds (refund_on_abort) under real failures and at scale:
#  - an abort that finds no connection and no file descriptor to spare
#    neither PANICs nor reconnects; the refund is sent at the next call;
#  - pg_terminate_backend of a backend in the middle of an exchange: the
#    abort discards that connection without reading from it, and exits at once;
#  - rolling back 8,000 refundable rows is fast, every unit comes back, none
#    is dropped;
#  - a refund with 300,000 later entries costs Redis little, and is exact;
#  - the refund script is idempotent;
#  - cancel and terminate work while refunds wait on a stalled Redis, and
#    refunds sent twice give back once;
#  - a key expires from its newest entry, not from now (clock stepped back).
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
# A small file budget, so that a handful of dblink connections use up the
# external descriptors (AcquireExternalFD allows a third of max_safe_fds).
my $node = SlidewinTest::new_node('refunds', $redis,
	[ 'max_files_per_process = 80', 'slidewin.redis_retry_interval = 0' ]);

sub sql { return $node->safe_psql('postgres', $_[0]); }

# Redis's own time for commands, from SLOWLOG with every command logged.
sub slowlog_on
{
	$redis->cli('config', 'set', 'slowlog-log-slower-than', '0');
	$redis->cli('config', 'set', 'slowlog-max-len', '100000');
	$redis->cli('slowlog', 'reset');
}

# Duration (us) of the logged EVALSHA/EVAL whose arguments include $arg.
sub slowlog_usec_with
{
	my ($arg) = @_;
	my @l = split /\n/, scalar $redis->cli('slowlog', 'get', '100000');
	my $found;
	for my $i (3 .. $#l)
	{
		next unless $l[$i] eq 'EVALSHA' || $l[$i] eq 'EVAL';
		next unless grep { $_ eq $arg } @l[ $i + 1 .. ($i + 9 < $#l ? $i + 9 : $#l) ];
		$found = $l[ $i - 1 ];
	}
	return $found;
}

sub wait_for_active_call
{
	my ($what) = @_;
	$node->poll_query_until('postgres', qq{
		SELECT count(*) > 0 FROM pg_stat_activity
		WHERE query LIKE '%$what%' AND wait_event_type = 'Extension'
		  AND pid <> pg_backend_pid()})
	  or die "the call ($what) never started waiting";
}

# Poll until $cond (SQL returning a boolean) holds, for at most $secs.
sub wait_until
{
	my ($cond, $secs) = @_;
	my $t0 = time;
	while (time - $t0 < $secs)
	{
		return time - $t0 if sql($cond) eq 't';
		usleep(20_000);
	}
	return undef;
}

my $started_at = sql('SELECT pg_postmaster_start_time()');
my $log_offset = -s $node->logfile;

# --- item 15: expiry from the newest entry ----------------------------------
sql(q{
	SET slidewin.test_now = '2030-01-01 01:00:00+00';
	SELECT rl_attempt('e:k', 5, '1 minute');
	SET slidewin.test_now = '2030-01-01 00:00:00+00';
	SELECT rl_attempt('e:k', 5, '1 minute');});
my $pttl = $redis->cli('pttl', 'slidewin:log:e:k');
note("after a backward step of one hour: PTTL $pttl ms");
cmp_ok($pttl, '>', 3_600_000 + 55_000,
	"the key lives until its newest entry (1 h ahead) leaves the window ($pttl ms)");
cmp_ok($pttl, '<=', 3_660_002, 'and not longer');

# --- item 2: no PANIC when the abort has no connection and no fd to spare ---
sql('CREATE EXTENSION dblink');
(my $connstr = $node->connstr('postgres')) =~ s/'/''/g;
my $p = $node->background_psql('postgres', on_error_stop => 0);
$p->query_safe('SET slidewin.command_timeout = 60000');
$p->query_safe('BEGIN');
is($p->query_safe(q{SELECT remaining FROM rl_attempt('p:k', 5, '1 hour', 2, refund_on_abort => true)}),
	'3', 'panic: a refundable admission');
$p->query_safe('SAVEPOINT a');
$redis->freeze;
$p->query(q{SET LOCAL statement_timeout = '300ms'; SELECT rl_attempt('p:x', 5, '1 hour')});
like($p->{stderr}, qr/statement timeout/, 'panic: an exchange interrupted: no connection is open');
$p->{stderr} = '';
$redis->thaw;
$p->query_safe('ROLLBACK TO SAVEPOINT a');
# Use up the external descriptors, then free exactly one: an abort that
# reconnected would get a socket and then fail (ERROR) to get a WaitEventSet.
my $opened = $p->query_safe(qq{
	DO \$\$
	DECLARE i int := 0;
	BEGIN
	  LOOP
	    BEGIN
	      PERFORM dblink_connect('c' || i, '$connstr');
	    EXCEPTION WHEN OTHERS THEN EXIT;
	    END;
	    i := i + 1;
	    EXIT WHEN i > 90;
	  END LOOP;
	  PERFORM dblink_disconnect('c' || (i - 1));
	END \$\$;
	SELECT count(*) FROM unnest(dblink_get_connections());});
cmp_ok($opened, '>', 5, "panic: $opened dblink connections hold the external descriptors");
cmp_ok($opened, '<', 80, 'panic: ... and the budget ran out');
$p->query('ROLLBACK');
is($p->{stderr}, '', 'panic: ROLLBACK raised nothing');
$p->{stderr} = '';
is(sql('SELECT pg_postmaster_start_time()'), $started_at, 'panic: the server did not restart');
unlike(slurp_file($node->logfile, $log_offset), qr/PANIC|terminated by signal|ERRORDATA_STACK_SIZE/,
	'panic: no PANIC in the log');
$p->query_safe('SELECT dblink_disconnect(c) FROM unnest(dblink_get_connections()) c');
is($p->query_safe(q{SELECT remaining FROM rl_peek('p:k', 5, '1 hour')}), '5',
	'panic: the refund was sent once a call could connect');
is($p->query_safe('SELECT refunds_dropped FROM rl_backend_stats()'), '0', 'panic: nothing dropped');
$p->quit;

# --- FATAL in the middle of an exchange --------------------------------------
my $f = $node->background_psql('postgres', on_error_stop => 0);
$f->query_safe('SET slidewin.command_timeout = 60000');
$f->query_safe('BEGIN');
is($f->query_safe(q{SELECT remaining FROM rl_attempt('f:k', 5, '1 hour', 2, refund_on_abort => true)}),
	'3', 'fatal: a refundable admission');
$redis->freeze;
$f->{stdin} .= "SELECT rl_attempt('f:mid', 5, '1 hour');\n";
$f->{run}->pump_nb;
wait_for_active_call('f:mid');
my $t0 = time;
sql(q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	WHERE query LIKE '%f:mid%' AND pid <> pg_backend_pid()});
my $gone = wait_until(q{SELECT count(*) = 0 FROM pg_stat_activity
	WHERE query LIKE '%f:mid%' AND pid <> pg_backend_pid()}, 10);
ok(defined $gone && $gone < 3,
	sprintf('fatal: the backend exits at once, without waiting on that connection (%.2f s)', $gone // -1));
$redis->thaw;
eval { $f->quit; };
is(sql(q{SELECT remaining FROM rl_peek('f:k', 5, '1 hour')}), '3',
	'fatal: nothing was sent on the half-used connection (the refund was dropped: units stay spent)');
like(slurp_file($node->logfile, $log_offset), qr/slidewin dropped 1 refunds at backend exit/,
	'fatal: the dropped refund is logged');
is(sql('SELECT pg_postmaster_start_time()'), $started_at, 'fatal: the server did not restart');

# --- 8,000 refundable rows ------------------------------------------------------
sql(q{
	CREATE TABLE items (id int, tenant text);
	CREATE TRIGGER quota BEFORE INSERT ON items FOR EACH ROW
	  EXECUTE FUNCTION rl_trigger('tenant', '100000', '1 hour', '1', 'refund_on_abort');});
my $b = $node->background_psql('postgres');
$b->query_safe('BEGIN');
$b->query_safe(q{INSERT INTO items SELECT g, 'bulk' FROM generate_series(1, 8000) g});
is(sql(q{SELECT remaining FROM rl_peek('public.items:bulk', 100000, '1 hour')}), '92000',
	'bulk: 8,000 units charged');
$t0 = time;
$b->query_safe('ROLLBACK');
my $rollback_s = time - $t0;
note(sprintf('ROLLBACK of 8,000 refundable rows: %.3f s', $rollback_s));
cmp_ok($rollback_s, '<', 1, sprintf('bulk: ROLLBACK takes under 1 s (%.3f s)', $rollback_s));
is($b->query_safe('SELECT refunded || \' \' || refunds_dropped FROM rl_backend_stats()'), '8000 0',
	'bulk: 8,000 refunds confirmed, none dropped');
is(sql(q{SELECT remaining FROM rl_peek('public.items:bulk', 100000, '1 hour')}), '100000',
	'bulk: every unit came back');

# --- one refund with 300,000 later entries ------------------------------------
my $big = 300_000;
$b->query_safe(q{SET slidewin.test_now = '2030-01-01 00:00:00+00'});
# Warm up: this connection has seen the refund script answer, so the refund
# below goes as EVALSHA (an EVAL would also load the script).
$b->query_safe(q{BEGIN; SELECT rl_attempt('w:k', 5, '1 hour', refund_on_abort => true); ROLLBACK});
$b->query_safe(q{SELECT rl_peek('w:k', 5, '1 hour')});
$b->query_safe('BEGIN');
is($b->query_safe(q{SELECT remaining FROM rl_attempt('big:k', 1000000, '1 hour', 1, refund_on_abort => true)}),
	'999999', 'big: the entry to give back');
my ($ts) = $redis->cli('zrange', 'slidewin:log:big:k', '0', '0', 'withscores') =~ /\n(\d+)$/;
# Later entries, as other clients' calls would have left them: 10 us apart.
my $fill = q{
	local t0, m0, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
	for i = 1, n do
	  redis.call('ZADD', KEYS[1], string.format('%.0f', t0 + 10 * i), string.format('%.0f', m0 + i))
	end
	return redis.call('ZCARD', KEYS[1])};
is($redis->cli('eval', $fill, '1', 'slidewin:log:big:k', $ts, '1', $big), $big + 1,
	"big: $big later entries");
slowlog_on();
$b->query_safe('ROLLBACK');
my $after = $b->query_safe(q{SELECT remaining || ' ' || retry_after FROM rl_peek('big:k', 1000000, '1 hour')});
my $usec = slowlog_usec_with($ts);
$redis->cli('config', 'set', 'slowlog-log-slower-than', '10000');
ok(defined $usec, 'big: the refund was found in SLOWLOG');
note("Redis time of the refund with $big later entries: " . ($usec // '?') . ' us');
cmp_ok($usec // 1e9, '<', 50_000, "big: Redis spent under 50 ms on it (" . ($usec // '?') . ' us)');
is($after, (1000000 - $big) . ' 00:00:00', "big: exactly $big units left in the window");
# A denial's retry_after is exact: the first unit still counted is the one
# 10 us after the refunded entry, so it frees 1 h + 10 us from now.
is($b->query_safe(qq{SELECT allowed || ' ' || remaining || ' ' || retry_after
		FROM rl_peek('big:k', $big, '1 hour')}),
	'false 0 01:00:00.00001', 'big: retry_after skips the refunded entry, to the microsecond');
is($b->query_safe(qq{SELECT allowed || ' ' || remaining || ' ' || retry_after
		FROM rl_attempt('big:k', @{[ $big + 1 ]}, '1 hour', 1)}),
	'true 0 00:00:00', 'big: the freed unit can be taken again');
$b->query_safe('RESET slidewin.test_now');
$b->quit;

# --- the refund script is idempotent ------------------------------------------
my $src = SlidewinTest::src_dir() . '/src/store/redis/scripts.c';
my $refund_lua = `perl "@{[ SlidewinTest::src_dir() ]}/test/bench/lua_source.pl" "$src" lua_log_refund`;
ok(length($refund_lua) > 100, 'idempotent: read the refund script');
sql(q{
	SET slidewin.test_now = '2030-01-01 00:00:00+00';
	SELECT rl_attempt('i:k', 10, '1 hour', c) FROM (VALUES (1), (2), (3)) v(c);});
my @e = split /\n/, scalar $redis->cli('zrange', 'slidewin:log:i:k', '0', '-1', 'withscores');
my $ts2 = $e[3];
my @call = ('eval', $refund_lua, '2', 'slidewin:log:i:k', 'slidewin:logr:i:k', $ts2, '2', '3600000000',
	'1893456000000001');
is($redis->cli(@call), '1', 'idempotent: the first refund gives back');
is($redis->cli(@call), '0', 'idempotent: the same refund again gives nothing back');
is(sql(q{SET slidewin.test_now = '2030-01-01 00:00:01+00';
	SELECT remaining FROM rl_peek('i:k', 10, '1 hour')}), '6', 'idempotent: 2 units came back, once');

# --- cancel and terminate while refunds wait on a stalled Redis ----------------
sub stalled_rollback
{
	my ($s, $tenant) = @_;
	$s->query_safe('SET slidewin.command_timeout = 60000');
	$s->query_safe('BEGIN');
	$s->query_safe(qq{INSERT INTO items SELECT g, '$tenant' FROM generate_series(1, 8000) g});
	$redis->freeze;
	my $t = time;
	$s->query_safe('ROLLBACK');
	my $dt = time - $t;
	cmp_ok($dt, '<', 1, sprintf('%s: ROLLBACK does not wait on a frozen Redis (%.3f s)', $tenant, $dt));
	# the next call sends and reads the refunds first: it waits
	$s->{stdin} .= "SELECT * FROM rl_backend_stats();\n";
	$s->{run}->pump_nb;
	wait_for_active_call('rl_backend_stats');
	return;
}

my $c = $node->background_psql('postgres', on_error_stop => 0);
stalled_rollback($c, 'cancelled');
$t0 = time;
sql(q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity
	WHERE query LIKE '%rl_backend_stats%' AND pid <> pg_backend_pid()});
$c->query('SELECT 1');
my $cancel_s = time - $t0;
like($c->{stderr}, qr/canceling statement due to user request/, 'cancelled: the waiting call is cancelled');
cmp_ok($cancel_s, '<', 2, sprintf('cancelled: at once (%.2f s)', $cancel_s));
$c->{stderr} = '';

my $d = $node->background_psql('postgres', on_error_stop => 0);
$redis->thaw;
stalled_rollback($d, 'terminated');
$t0 = time;
sql(q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	WHERE query LIKE '%rl_backend_stats%' AND pid <> pg_backend_pid()});
$gone = wait_until(q{SELECT count(*) = 0 FROM pg_stat_activity
	WHERE query LIKE '%rl_backend_stats%' AND pid <> pg_backend_pid()}, 10);
ok(defined $gone && $gone < 3, sprintf('terminated: the backend exits at once (%.2f s)', $gone // -1));
$redis->thaw;
eval { $d->quit; };

# The cancelled backend's refunds went partly out before its connection was
# discarded (Redis applies those when it resumes); its next call sends them
# all again. Each unit comes back exactly once.
my ($given, $dropped) = split /\|/, $c->query_safe('SELECT refunded, refunds_dropped FROM rl_backend_stats()');
note("the cancelled backend's replies confirmed $given of 8000 refunds; the rest had been applied already");
is($dropped, '0', 'cancelled: nothing dropped');
is(sql(q{SELECT remaining FROM rl_peek('public.items:cancelled', 100000, '1 hour')}), '100000',
	'cancelled: every unit came back, exactly once');
$c->quit;

is(sql('SELECT pg_postmaster_start_time()'), $started_at, 'the server never restarted');
unlike(slurp_file($node->logfile, $log_offset), qr/PANIC|terminated by signal/, 'no PANIC, no crash');

done_testing();
