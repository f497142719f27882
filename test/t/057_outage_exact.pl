# Exact across an outage, for every algorithm of rl_attempt. Under 8 pgbench
# clients, half of the calls on one hot key and half spread over 20 keys,
# lim 20 per 4 s window (sliding log unless said otherwise),
# Redis goes away for 3 s, shorter than the window, so that windows hold
# admissions from before, during and after the outage:
#
#  1. frozen (SIGSTOP) and thawed (SIGCONT): Redis keeps its data. The
#     fullest window of every key holds at most lim units, across both
#     switches: the fallback store started from what Redis had counted, and
#     Redis learned what the fallback store admitted before it decided again.
#  2. killed and restarted empty: at most lim in any window from the
#     fallback store's admissions on (fallback plus Redis after the
#     restart), and at most lim before it (Redis before the kill plus the
#     fallback store).
#  3. two servers sharing one Redis, 4 clients each on the hot key, Redis
#     frozen and thawed: at most 2 x lim in a window during the outage, and
#     once both servers have had a Redis answer (each carries its
#     admissions back before its first), no admission while the union of
#     both servers' admissions in the window is lim.
#  4. a backend terminated in the middle of carrying admissions back (its
#     script held up by CLIENT PAUSE, or its transaction not yet committed
#     after Redis recorded them): every admission reaches Redis once, none
#     is lost, none is counted twice; and another backend carrying the same
#     key meanwhile is answered at once.
#  5. the counting algorithms, frozen for longer than the window (so that
#     the outage holds a boundary), 15 keys (5 each): each
#     keeps its own bound across both switches, checked on every admission
#     from either store: fixed_window and sliding_counter at most lim in
#     each window (bucket), token_bucket conforming to one GCRA over the
#     admissions of both stores.
#
# No pgbench transaction fails in any of them.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest;

my $lim      = 20;
my $win_s    = 4;
my $duration = 10;
my $down_at  = 2.5;
my $up_at    = 5.5;

my $redis = SlidewinTest::start_redis();
my @conf = ('max_connections = 30', "shared_preload_libraries = 'slidewin'",
	"slidewin.redis_retry_interval = '200ms'");
my $node1 = SlidewinTest::new_node('outage1', $redis, \@conf);
my $node2 = SlidewinTest::new_node('outage2', $redis, \@conf);

for my $n ($node1, $node2)
{
	$n->safe_psql('postgres', q{
		CREATE TABLE calls (
			id      bigserial PRIMARY KEY,
			run     int NOT NULL,
			k       text NOT NULL,
			cost    int NOT NULL,
			allowed boolean NOT NULL,
			store   text NOT NULL,
			at      timestamptz NOT NULL,   -- when the call returned
			ts      timestamptz             -- the admission time its store recorded
		);
	});
}

my $dir    = PostgreSQL::Test::Utils::tempdir('outage');
my $script = "$dir/attempt.sql";
open(my $fh, '>', $script) or die "cannot write $script: $!";
print $fh <<"EOS";
\\set r random(1, :nkeys)
\\set c random(1, 2)
INSERT INTO calls (run, k, cost, allowed, store, at, ts)
SELECT :run, k, :c, r.allowed, r.store, clock_timestamp(),
       CASE WHEN r.allowed THEN r.reset_at - interval '$win_s seconds' END
FROM (SELECT CASE WHEN :r <= 20 THEN 'hot' ELSE 'k' || :r END AS k) s,
     rl_attempt('run' || :run || ':' || s.k, $lim, interval '$win_s seconds', :c) r;
EOS
close $fh;

sub bench
{
	my ($node, $run, $nkeys, $clients) = @_;
	my ($out, $err) = ('', '');
	my @cmd = ('pgbench', '-n', '-c', $clients, '-j', 2, '-T', $duration,
		'-D', "run=$run", '-D', "nkeys=$nkeys",
		'-f', $script, '-h', $node->host, '-p', $node->port, 'postgres');
	note("running: @cmd");
	my $h = IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	return { h => $h, out => \$out, err => \$err, name => $node->name };
}

sub bench_done
{
	my ($b, $what) = @_;
	$b->{h}->finish;
	my $rc = $b->{h}->full_result(0) >> 8;
	note("pgbench ($b->{name}) stdout:\n${ $b->{out} }");
	is($rc, 0, "$what: pgbench on $b->{name} exits 0") or diag(${ $b->{err} });
	like(${ $b->{out} }, qr/^number of failed transactions: 0 \(/m,
		"$what: pgbench on $b->{name}: 0 failed transactions");
	return;
}

sub sleep_until
{
	my ($t0, $at) = @_;
	my $d = $t0 + $at - time;
	usleep(int($d * 1e6)) if $d > 0;
	return time;
}

# admissions(run, nodes...): [epoch ts, cost, store, key, node index] of
# every admission of the run, by time.
sub admissions
{
	my ($run, @nodes) = @_;
	my @rows;
	for my $i (0 .. $#nodes)
	{
		for my $line (split /\n/, $nodes[$i]->safe_psql('postgres', qq{
			SELECT extract(epoch FROM ts), cost, store, k FROM calls
			WHERE run = $run AND allowed ORDER BY ts}))
		{
			my ($t, $c, $s, $k) = split /\|/, $line;
			push @rows, [ $t, $c, $s, $k, $i ];
		}
	}
	return sort { $a->[0] <=> $b->[0] } @rows;
}

# fullest(\@rows, $filter, $after): per key, the most units that rows passing
# $filter hold in one window (t - win, t], over windows ending at an
# admission later than $after; returns (max, key, window end).
sub fullest
{
	my ($rows, $filter, $after) = @_;
	my %by;
	push @{ $by{ $_->[3] } }, $_ for grep { $filter->($_) } @$rows;
	my ($max, $mk, $mt) = (0, '', 0);
	for my $k (keys %by)
	{
		my $r = $by{$k};
		my ($lo, $sum) = (0, 0);
		for my $hi (0 .. $#$r)
		{
			$sum += $r->[$hi][1];
			while ($r->[$lo][0] <= $r->[$hi][0] - $win_s)
			{
				$sum -= $r->[$lo][1];
				$lo++;
			}
			($max, $mk, $mt) = ($sum, $k, $r->[$hi][0])
			  if $sum > $max && $r->[$hi][0] > ($after // 0);
		}
	}
	return ($max, $mk, $mt);
}

sub stores
{
	my ($rows, $from, $to) = @_;
	my %n;
	$n{ $_->[2] }++ for grep { $_->[0] >= $from && $_->[0] < $to } @$rows;
	return \%n;
}

my $stats_sql = q{SELECT outage_seeded_units, outage_carried, outage_carry_pending FROM rl_stats};

# ---------------------------------------------------------------------
# 1. Frozen and thawed.
# ---------------------------------------------------------------------
{
	my $t0 = time;
	my $b = bench($node1, 1, 40, 8);
	my $down = sleep_until($t0, $down_at);
	$redis->freeze;
	my $up = sleep_until($t0, $up_at);
	$redis->thaw;
	note(sprintf('run 1: frozen at +%.2f s, thawed at +%.2f s', $down - $t0, $up - $t0));
	bench_done($b, 'frozen');
	my @rows = admissions(1, $node1);
	my $during = stores(\@rows, $down, $up);
	my $after = stores(\@rows, $up + 1, $t0 + $duration + 5);
	cmp_ok($during->{fallback} // 0, '>', 0,
		'frozen: the fallback store admitted during the outage (' . ($during->{fallback} // 0) . ')');
	cmp_ok($after->{redis} // 0, '>', 0,
		'frozen: Redis admitted after it (' . ($after->{redis} // 0) . ')');
	my ($max, $k, $t) = fullest(\@rows, sub { 1 });
	cmp_ok($max, '<=', $lim, sprintf('frozen: the fullest window holds %d units (key %s, ending +%.2f s), at most lim %d',
		$max, $k, $t - $t0, $lim));
	my ($seeded, $carried, $pending) = split /\|/, $node1->safe_psql('postgres', $stats_sql);
	cmp_ok($seeded, '>', 0, "frozen: units carried into the fallback store from shared memory ($seeded)");
	cmp_ok($carried, '>', 0, "frozen: admissions carried back into Redis ($carried)");
	is($pending, '0', 'frozen: none waits to be carried back');
}

# ---------------------------------------------------------------------
# 2. Killed and restarted empty.
# ---------------------------------------------------------------------
{
	my $t0 = time;
	my $b = bench($node1, 2, 40, 8);
	my $down = sleep_until($t0, $down_at);
	$redis->kill9;
	sleep_until($t0, $up_at);
	$redis->restart;
	my $up = time;
	note(sprintf('run 2: killed at +%.2f s, restarted at +%.2f s', $down - $t0, $up - $t0));
	bench_done($b, 'restarted');
	my @rows = admissions(2, $node1);
	my $during = stores(\@rows, $down, $up);
	cmp_ok($during->{fallback} // 0, '>', 0,
		'restarted: the fallback store admitted during the outage (' . ($during->{fallback} // 0) . ')');
	my ($max, $k, $t) = fullest(\@rows, sub { $_[0][2] eq 'fallback' || $_[0][0] > $down });
	cmp_ok($max, '<=', $lim, sprintf('restarted: from the outage on (fallback and Redis after it) the fullest window holds %d (key %s, ending +%.2f s)',
		$max, $k, $t - $t0));
	($max, $k, $t) = fullest(\@rows, sub { $_[0][2] eq 'fallback' || $_[0][0] < $down });
	cmp_ok($max, '<=', $lim, sprintf('restarted: up to the restart (Redis before it and the fallback) the fullest window holds %d (key %s, ending +%.2f s)',
		$max, $k, $t - $t0));
	($max) = fullest(\@rows, sub { 1 });
	note("restarted: the fullest window of all holds $max (Redis before the kill counted twice at most)");
}

# ---------------------------------------------------------------------
# 3. Two servers, one hot key.
# ---------------------------------------------------------------------
{
	my $t0 = time;
	my @b = (bench($node1, 3, 20, 4), bench($node2, 3, 20, 4));
	my $down = sleep_until($t0, $down_at);
	$redis->freeze;
	my $up = sleep_until($t0, $up_at);
	$redis->thaw;
	bench_done($_, 'two servers') for @b;
	my @rows = admissions(3, $node1, $node2);
	my %first;
	for my $i (0, 1)
	{
		my $n = ($node1, $node2)[$i];
		$first{$i} = $n->safe_psql('postgres', qq{
			SELECT extract(epoch FROM min(at)) FROM calls
			WHERE run = 3 AND store = 'redis' AND extract(epoch FROM at) > $up});
	}
	my $both = $first{0} > $first{1} ? $first{0} : $first{1};
	note(sprintf('two servers: thawed at +%.2f s; first Redis answers at +%.2f s and +%.2f s',
		$up - $t0, $first{0} - $t0, $first{1} - $t0));
	my $fb = grep { $_->[2] eq 'fallback' } @rows;
	my %fb_by = map { $_ => scalar grep { $_->[2] eq 'fallback' && $_->[4] == $_ } @rows } (0, 1);
	cmp_ok($fb, '>', 0, "two servers: the fallback stores admitted ($fb)");
	my ($max, $k, $t) = fullest(\@rows, sub { 1 });
	cmp_ok($max, '<=', 2 * $lim, sprintf('two servers: at most 2 x lim in any window (%d, ending +%.2f s)', $max, $t - $t0));
	($max, $k, $t) = fullest(\@rows, sub { 1 }, $both);
	cmp_ok($max, '<=', $lim, sprintf('two servers: once both had a Redis answer, no admission while the union held lim (fullest window ending later: %d, at +%.2f s)',
		$max, $t - $t0));
}

# ---------------------------------------------------------------------
# 5. The counting algorithms, frozen and thawed.
# ---------------------------------------------------------------------
{
	my $cscript = "$dir/counting.sql";
	open(my $cf, '>', $cscript) or die "cannot write $cscript: $!";
	print $cf <<"EOS";
\\set r random(0, 14)
\\set c random(1, 2)
INSERT INTO calls (run, k, cost, allowed, store, at, ts)
SELECT 5, s.a || ':' || :r, :c, r.allowed, r.store, clock_timestamp(), r.reset_at
FROM (SELECT (ARRAY['fixed_window', 'sliding_counter', 'token_bucket'])[1 + :r % 3] AS a) s,
     rl_attempt('run5:' || s.a || ':' || :r, $lim, interval '$win_s seconds', :c, algorithm => s.a) r;
EOS
	close $cf;
	# An outage longer than the window, so that it holds a boundary of the
	# aligned windows (and buckets): a key Redis filled before the outage
	# gets fallback admissions after the boundary, which Redis then learns.
	my $t0 = time;
	my ($out, $err) = ('', '');
	my @cmd = ('pgbench', '-n', '-c', 8, '-j', 2, '-T', $duration + 2, '-f', $cscript,
		'-h', $node1->host, '-p', $node1->port, 'postgres');
	my $h = IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	my $down = sleep_until($t0, $down_at);
	$redis->freeze;
	my $up = sleep_until($t0, $down_at + $win_s + 0.5);
	$redis->thaw;
	bench_done({ h => $h, out => \$out, err => \$err, name => $node1->name }, 'counting');

	my $win_us = $win_s * 1_000_000;
	my %by;
	for my $line (split /\n/, $node1->safe_psql('postgres', q{
		SELECT k, cost, store, (extract(epoch FROM at) * 1e6)::bigint,
		       (extract(epoch FROM ts) * 1e6)::bigint
		FROM calls WHERE run = 5 AND allowed ORDER BY at}))
	{
		my ($k, $c, $st, $at, $reset) = split /\|/, $line;
		push @{ $by{$k} }, [ $c, $st, $at, $reset ];
	}
	my %fb;
	for my $k (keys %by) { $fb{ (split /:/, $k)[0] } += grep { $_->[1] eq 'fallback' } @{ $by{$k} } }
	for my $a (qw(fixed_window sliding_counter token_bucket))
	{
		cmp_ok($fb{$a} // 0, '>', 0, "counting, $a: the fallback store admitted (" . ($fb{$a} // 0) . ')');
	}

	# fixed_window: an admission's reset_at is its window's end;
	# sliding_counter: its bucket's start plus 2 windows.
	for my $a (qw(fixed_window sliding_counter))
	{
		my ($max, $mk) = (0, '');
		for my $k (grep { /^$a:/ } keys %by)
		{
			my %sum;
			$sum{ $_->[3] } += $_->[0] for @{ $by{$k} };
			for (values %sum) { ($max, $mk) = ($_, $k) if $_ > $max }
		}
		cmp_ok($max, '<=', $lim, "counting, $a: at most lim in every window across both switches ($max, key $mk)");
	}

	# token_bucket: one GCRA over every admission, at the times the calls
	# returned: the theoretical arrival time may run at most win ahead of
	# an admission. A call returns a little after it was decided, by a
	# varying lateness (a bucket found empty restarts at the later call's
	# return), so the check allows 50 ms; a store that forgot the other's
	# admissions runs seconds ahead.
	my ($ahead, $ak) = (-1e18, '');
	my $t = $win_us / $lim;
	for my $k (grep { /^token_bucket:/ } keys %by)
	{
		my $tat = 0;
		for my $e (@{ $by{$k} })
		{
			$tat = $e->[2] if $tat < $e->[2];
			$tat += $e->[0] * $t;
			($ahead, $ak) = ($tat - $e->[2], $k) if $tat - $e->[2] > $ahead;
		}
	}
	cmp_ok($ahead, '<=', $win_us + 50_000, sprintf('counting, token_bucket: one bucket across both switches (the tat ran at most %.3f s ahead, key %s; window %d s)',
		$ahead / 1e6, $ak, $win_s));
}

# ---------------------------------------------------------------------
# 4. A backend terminated in the middle of carrying admissions back.
# ---------------------------------------------------------------------
{
	my $n = 150;			# more than two scripts' worth (64 each)
	my $dead = SlidewinTest::free_port();
	my $url = $node1->safe_psql('postgres', 'SHOW slidewin.redis_url');
	$node1->safe_psql('postgres', qq{
		SET slidewin.redis_url = 'redis://127.0.0.1:$dead';
		SELECT count(*) FROM (SELECT rl_attempt('carry', 1000, '1 minute') r
		                      FROM generate_series(1, $n)) s
		 WHERE (r).store = 'fallback' AND (r).allowed;
	});
	is($node1->safe_psql('postgres', q{SELECT count(*) FROM rl_fallback_carry WHERE key = 'slidewin:carry'}),
		$n, "$n fallback admissions wait to be carried back");
	my ($c0) = split /\|/, $node1->safe_psql('postgres', 'SELECT outage_carried FROM rl_stats');

	# (a) its script held up in Redis, the backend terminated
	$redis->pause_ms(5000);
	my $s1 = $node1->background_psql('postgres', on_error_stop => 0);
	$s1->query_safe("SET slidewin.command_timeout = '20s'");
	$s1->{stdin} .= "SELECT (rl_attempt('carry', 1000, '1 minute')).store;\n";
	$s1->{run}->pump_nb;
	$node1->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM pg_stat_activity
		WHERE query LIKE '%rl_attempt%' AND state = 'active' AND pid <> pg_backend_pid()})
	  or die 'the carrying call did not start';
	usleep(300_000);
	$node1->safe_psql('postgres', q{
		SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE query LIKE '%rl_attempt%' AND pid <> pg_backend_pid()});
	$node1->poll_query_until('postgres', q{
		SELECT count(*) = 0 FROM pg_stat_activity
		WHERE query LIKE '%rl_attempt%' AND pid <> pg_backend_pid()})
	  or die 'the carrying backend did not exit';
	eval { $s1->quit; };
	$redis->cli('client', 'unpause');
	is($node1->safe_psql('postgres', q{SELECT count(*) FROM rl_fallback_carry WHERE key = 'slidewin:carry'}),
		$n, '(a) terminated while Redis held its script: the rows still wait');

	# (b) Redis recorded them, the transaction that deleted the rows never commits
	my $s2 = $node1->background_psql('postgres', on_error_stop => 0);
	my $pid2 = $s2->query_safe('SELECT pg_backend_pid()');
	$s2->query_safe('BEGIN');
	is($s2->query_safe(q{SELECT (rl_attempt('carry', 1000, '1 minute')).remaining}), 1000 - $n - 1,
		'(b) inside a transaction, Redis has all of them, and the call');

	# (c) meanwhile another backend carries the same key: the rows the open
	# transaction deleted are visible to it until that ends, and were sent
	# before they were deleted. It sends them (Redis keeps each once) and
	# leaves them, rather than taking the same batch up again and again
	# until the other transaction ends (which hung TAP 090's pgbench).
	my $t0 = time;
	my ($rc, $rem, $err) = $node1->psql('postgres',
		q{SET statement_timeout = '20s'; SELECT (rl_attempt('carry', 1000, '1 minute')).remaining});
	is($rem, 1000 - $n - 2, '(c) another backend carrying the same key meanwhile: answered, each unit counted once')
	  or diag($err);
	cmp_ok(time - $t0, '<', 10, sprintf('(c) and within seconds (%.1f s)', time - $t0));
	$node1->safe_psql('postgres', "SELECT pg_terminate_backend($pid2)");
	$node1->poll_query_until('postgres', qq{
		SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid2})
	  or die 'the backend did not exit';
	eval { $s2->quit; };
	is($node1->safe_psql('postgres', q{SELECT count(*) FROM rl_fallback_carry WHERE key = 'slidewin:carry'}),
		$n, '(b) terminated before its commit: the rows wait again');

	# sent again: Redis records none twice, and has every one (and the two
	# calls of (b) and now)
	is($node1->safe_psql('postgres', q{SELECT (rl_attempt('carry', 1000, '1 minute')).remaining}), 1000 - $n - 3,
		"sent again: Redis counts the $n units each once, and the three calls");
	is($node1->safe_psql('postgres', q{SELECT count(*) FROM rl_fallback_carry WHERE key = 'slidewin:carry'}),
		'0', 'and nothing waits');
	my ($c1) = split /\|/, $node1->safe_psql('postgres', 'SELECT outage_carried FROM rl_stats');
	is($c1 - $c0, $n, "rl_stats counts $n admissions carried back, each once");
	is(scalar $redis->cli('zcard', 'slidewin:log:carry'), $n + 3, "Redis's log holds " . ($n + 3) . ' entries');
	ok($url ne '', 'the node still points at Redis');
}

for my $n ($node1, $node2)
{
	unlike(slurp_file($n->logfile), qr/PANIC|terminated by signal/, $n->name . ': no crash');
}
done_testing();
