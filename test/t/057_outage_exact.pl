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
#     admissions of both stores;
#  6. the counting algorithms, Redis killed and restarted empty: those
#     bounds from the fallback store's admissions on, and up to the restart;
#  7. the counting algorithms on two servers: at most 2 x lim (two bursts)
#     during the outage, and once both servers had a Redis answer for a
#     key after their last fallback call of it, each algorithm's bound over
#     the union of both servers.
#  8. a carry waits for a fallback admission of its key not yet committed;
#  9. a fallback call counts a call of its key on its way to Redis, also for
#     a key this server never had an answer for.
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
			ts      timestamptz,            -- the admission time its store recorded
			st      timestamptz NOT NULL DEFAULT statement_timestamp() -- when the call was sent
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

# Runs 3 and 5-7 pace their load (pgbench -R, calls per second of one
# pgbench) rather than run as fast as the machine goes, which took both
# cores (1,000-1,600 calls/s) from the TAP file beside it for nothing those
# checks need. What they need is demand above every key's limit before,
# during and after the outage, so that its windows fill and any excess would
# show: lim 20 units per 4 s is 5 units/s, and a call costs 1.5 units on
# average.
#  - run 3 (two servers, the hot key only): 250 calls/s each, 750 units/s
#    in all, 150 x the limit (22-28 fallback admissions during the outage,
#    31 unpaced);
#  - runs 5-7 (15 keys): $counting_rate calls/s in all, 26.7 calls/s per key
#    (40 units/s, 8 x the limit; 106-229 fallback admissions per algorithm
#    and run, 68-160 unpaced).
# Runs 1 and 2 stay unpaced: there, how many admissions the fallback store
# makes during the outage depends on how early before it the 20 keys of
# moderate demand filled their windows; paced at 500 calls/s (18.75 units/s
# per key) they filled later, and a freeze saw 20-32 fallback admissions
# instead of 142.
# A paced pgbench that falls behind (calls held up by the frozen Redis)
# catches up afterwards, so no call is lost to the pacing.
my $counting_rate = 400;

sub bench
{
	my ($node, $run, $nkeys, $clients, $rate) = @_;
	my ($out, $err) = ('', '');
	my @cmd = ('pgbench', '-n', '-c', $clients, '-j', 2, '-T', $duration, ($rate ? ('-R', $rate) : ()),
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
	my $b = bench($node1, 1, 40, 8, 0);
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
	my $b = bench($node1, 2, 40, 8, 0);
	my $down = sleep_until($t0, $down_at);
	$redis->kill9;
	my $restart_at = sleep_until($t0, $up_at);
	$redis->restart;
	my $up = time;
	note(sprintf('run 2: killed at +%.2f s, restarted at +%.2f s', $down - $t0, $up - $t0));
	bench_done($b, 'restarted');
	my @rows = admissions(2, $node1);
	my $during = stores(\@rows, $down, $up);
	cmp_ok($during->{fallback} // 0, '>', 0,
		'restarted: the fallback store admitted during the outage (' . ($during->{fallback} // 0) . ')');
	# Redis's admissions are split at the restart (the time read just before
	# it): none can be made between the kill and the restart, and one made
	# just after the test read the time to kill (ts a little after $down)
	# was the old Redis's, lost with its data.
	my ($max, $k, $t) = fullest(\@rows, sub { $_[0][2] eq 'fallback' || $_[0][0] > $restart_at });
	cmp_ok($max, '<=', $lim, sprintf('restarted: from the outage on (fallback and Redis after it) the fullest window holds %d (key %s, ending +%.2f s)',
		$max, $k, $t - $t0))
	  or diag("the key's admissions around that window (+s from the start; at: returned, ts: admitted):\n"
		. $node1->safe_psql('postgres', qq{
			SELECT round((extract(epoch FROM at) - $t0)::numeric, 4) AS at,
			       round((extract(epoch FROM ts) - $t0)::numeric, 4) AS ts, cost, allowed, store
			FROM calls WHERE run = 2 AND k = '$k'
			  AND at > to_timestamp($t - $win_s - 0.5) AND at < to_timestamp($t + 0.5) AND allowed
			ORDER BY at}));
	($max, $k, $t) = fullest(\@rows, sub { $_[0][2] eq 'fallback' || $_[0][0] < $restart_at });
	cmp_ok($max, '<=', $lim, sprintf('restarted: up to the restart (Redis before it and the fallback) the fullest window holds %d (key %s, ending +%.2f s)',
		$max, $k, $t - $t0));
	($max) = fullest(\@rows, sub { 1 });
	note("restarted: the fullest window of all holds $max (Redis before the kill counted twice at most)");
}

# ---------------------------------------------------------------------
# 3. Two servers, one hot key.
# ---------------------------------------------------------------------
{
	my @b = (bench($node1, 3, 20, 4, 250), bench($node2, 3, 20, 4, 250));
	# Three keys fill at once, and stay full for a window after the first
	# admissions: the outage must outlast that window for the fallback
	# stores to have anything to admit. So the times count from the run's
	# first admission on both servers, not from pgbench's start, which a
	# loaded machine delayed by over a second once (0 fallback admissions).
	# The first call's own time on each server (the later of the two), not
	# when this script saw it: asking a sanitized server under load can
	# take a second or more.
	my $t0;
	SlidewinTest::wait_for('run 3: a call on each server', sub {
		my @first = map { $_->safe_psql('postgres', 'SELECT extract(epoch FROM min(at)) FROM calls WHERE run = 3') } ($node1, $node2);
		return 0 if grep { $_ eq '' } @first;
		$t0 = $first[0] > $first[1] ? $first[0] : $first[1];
		return 1;
	}, 30);
	note(sprintf('run 3: the first calls came %.2f s before this script saw them', time - $t0));
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
		# A backend whose breaker was still open decides in the fallback
		# store for up to redis_retry_interval after the thaw, counting what
		# its server last heard from Redis, not the other server's
		# admissions since: the bound holds once each server has carried
		# its last fallback admission, with its first Redis call after it.
		$first{$i} = $n->safe_psql('postgres', qq{
			SELECT extract(epoch FROM min(at)) FROM calls
			WHERE run = 3 AND store = 'redis' AND extract(epoch FROM at) > $up
			  AND at > (SELECT coalesce(max(at), '-infinity') FROM calls WHERE run = 3 AND store = 'fallback')});
	}
	my $both = $first{0} > $first{1} ? $first{0} : $first{1};
	note(sprintf('two servers: thawed at +%.2f s; first Redis answers at +%.2f s and +%.2f s',
		$up - $t0, $first{0} - $t0, $first{1} - $t0));
	my $fb = grep { $_->[2] eq 'fallback' } @rows;
	my %fb_by = map { $_ => scalar grep { $_->[2] eq 'fallback' && $_->[4] == $_ } @rows } (0, 1);
	cmp_ok($fb, '>', 0, "two servers: the fallback stores admitted ($fb)")
	  or diag(sprintf("frozen at +%.2f s, thawed at +%.2f s; calls by second since the first, store and answer:\n", $down - $t0, $up - $t0),
		map { $_->safe_psql('postgres', qq{
			SELECT floor(extract(epoch FROM at) - $t0) AS s, store, allowed, count(*)
			FROM calls WHERE run = 3 GROUP BY 1, 2, 3 ORDER BY 1, 2, 3}) . "\n" } ($node1, $node2));
	my ($max, $k, $t) = fullest(\@rows, sub { 1 });
	cmp_ok($max, '<=', 2 * $lim, sprintf('two servers: at most 2 x lim in any window (%d, ending +%.2f s)', $max, $t - $t0));
	($max, $k, $t) = fullest(\@rows, sub { 1 }, $both);
	cmp_ok($max, '<=', $lim, sprintf('two servers: once both had a Redis answer, no admission while the union held lim (fullest window ending later: %d, at +%.2f s)',
		$max, $t - $t0));
}

# ---------------------------------------------------------------------
# 5-7. The counting algorithms: frozen and thawed (5), killed and
# restarted empty (6), two servers (7).
# ---------------------------------------------------------------------
my $cscript = "$dir/counting.sql";
{
	open(my $cf, '>', $cscript) or die "cannot write $cscript: $!";
	print $cf <<"EOS";
\\set r random(0, 14)
\\set c random(1, 2)
INSERT INTO calls (run, k, cost, allowed, store, at, ts)
SELECT :run, s.a || ':' || :r, :c, r.allowed, r.store, clock_timestamp(), r.reset_at
FROM (SELECT (ARRAY['fixed_window', 'sliding_counter', 'token_bucket'])[1 + :r % 3] AS a) s,
     rl_attempt('run' || :run || ':' || s.a || ':' || :r, $lim, interval '$win_s seconds', :c, algorithm => s.a) r;
EOS
	close $cf;
}

# counting_calls(run, nodes...): per key, [cost, store, returned at (us),
# reset_at (us), node index, allowed] of every call of the run, by time; and
# $late, the longest a call took from being sent to returning.
my $late;
sub counting_calls
{
	my ($run, @nodes) = @_;
	my %by;
	$late = 0;
	for my $i (0 .. $#nodes)
	{
		for my $line (split /\n/, $nodes[$i]->safe_psql('postgres', qq{
			SELECT k, cost, store, (extract(epoch FROM at) * 1e6)::bigint,
			       (extract(epoch FROM ts) * 1e6)::bigint, allowed,
			       (extract(epoch FROM at - st) * 1e6)::bigint
			FROM calls WHERE run = $run ORDER BY at}))
		{
			my ($k, $c, $st, $at, $reset, $ok, $took) = split /\|/, $line;
			push @{ $by{$k} }, [ $c, $st, $at, $reset, $i, $ok eq 't' ];
			$late = $took if $took > $late;
		}
	}
	@$_ = sort { $a->[2] <=> $b->[2] } @$_ for values %by;
	$late = 1_000_000 if $late > 1_000_000;
	note(sprintf('run %d: the slowest call took %.3f s (the token bucket checks allow that much lateness, at most 1 s)', $run, $late / 1e6));
	return \%by;
}

# window_sums(\@admissions): units per window (fixed_window: an admission's
# reset_at is its window's end; sliding_counter: its bucket's start plus 2
# windows, one value per bucket).
sub window_sums
{
	my %sum;
	$sum{ $_->[3] } += $_->[0] for @{ $_[0] };
	return \%sum;
}

# gcra_ahead(\@admissions): how far one GCRA over the admissions, at the
# times the calls returned, ran ahead of an admission (the most). A call
# returns a little after it was decided, by a varying lateness (a bucket
# found empty restarts at the later call's return), so the checks allow
# 50 ms plus the longest a call of the run took (at most 1 s: a loaded or
# sanitizer build's calls take longer); a store that forgot the other's
# admissions runs seconds ahead (a whole window, 4 s).
sub gcra_ahead
{
	my ($adm, $counted) = @_;
	my $t = $win_s * 1_000_000 / $lim;
	my ($tat, $ahead) = (0, -1e18);
	for my $e (@$adm)
	{
		$tat = $e->[2] if $tat < $e->[2];
		$tat += $e->[0] * $t;
		$ahead = $tat - $e->[2] if $tat - $e->[2] > $ahead && (!$counted || $counted->($e));
	}
	return $ahead;
}

# counting_run(run, mode, nodes...): 8 clients in all on 15 keys (5 per
# algorithm), Redis frozen ('frozen'), or killed and restarted empty
# ('restarted') for longer than the window, so that the outage holds a
# boundary of the aligned windows (and buckets): a key Redis filled before
# the outage gets fallback admissions after the boundary, which Redis then
# learns. The boundary is the first at least 1 s after the outage began, as
# this script saw it begin (after the signal), and Redis comes back 3.5 s
# after it: 0.5 s of that window follow the outage. Timed from the start of
# the run instead, on a loaded machine the signal went out more than a
# second late, the boundary fell before the outage, and Redis filled the
# window the whole outage lay in: the fallback store rightly admitted
# nothing, and the run checked nothing across the switch (a CI run saw 0
# fallback admissions for two algorithms). Returns (calls by key, down, up).
sub counting_run
{
	my ($run, $mode, @nodes) = @_;
	my $t0 = time;
	my @b;
	for my $n (@nodes)
	{
		my ($out, $err) = ('', '');
		my @cmd = ('pgbench', '-n', '-c', 8 / @nodes, '-j', 2, '-T', int($down_at + 1 + $win_s + 3.5 + 5),
			'-R', $counting_rate / @nodes,
			'-D', "run=$run", '-f', $cscript, '-h', $n->host, '-p', $n->port, 'postgres');
		push @b, { h => IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err),
			out => \$out, err => \$err, name => $n->name };
	}
	sleep_until($t0, $down_at);
	$mode eq 'restarted' ? $redis->kill9 : $redis->freeze;
	my $down = time;
	my $boundary = (int(($down + 1) / $win_s) + 1) * $win_s;
	my $up = sleep_until($boundary, 3.5);
	$mode eq 'restarted' ? $redis->restart : $redis->thaw;
	note(sprintf('run %d: Redis %s at +%.2f s, back at +%.2f s, a window boundary at +%.2f s',
		$run, $mode eq 'restarted' ? 'killed' : 'frozen', $down - $t0, $up - $t0, $boundary - $t0));
	bench_done($_, "counting, run $run") for @b;
	my $by = counting_calls($run, @nodes);
	my %fb;
	for my $k (keys %$by) { $fb{ (split /:/, $k)[0] } += grep { $_->[5] && $_->[1] eq 'fallback' } @{ $by->{$k} } }
	for my $a (qw(fixed_window sliding_counter token_bucket))
	{
		cmp_ok($fb{$a} // 0, '>', 0, "counting, run $run, $a: the fallback store admitted (" . ($fb{$a} // 0) . ')')
		  or diag(counting_story($by, $a, $down, $up));
	}
	return ($by, $down, $up);
}

# What the calls of one algorithm got, by store and answer, before, during
# and after the outage (for a failure's diagnosis).
sub counting_story
{
	my ($by, $a, $down, $up) = @_;
	my %n;
	for my $k (grep { /^$a:/ } keys %$by)
	{
		for my $c (@{ $by->{$k} })
		{
			my $t = $c->[2] / 1e6;
			my $when = $t < $down ? 'before' : $t < $up ? 'during' : 'after';
			$n{"$when $c->[1] " . ($c->[5] ? 'admitted' : 'denied')}++;
		}
	}
	return "$a: " . join(', ', map { "$_ $n{$_}" } sort keys %n);
}

# The most units in one window (bucket) of any key of the algorithm, over
# the admissions that pass $filter.
sub counting_max
{
	my ($by, $a, $filter) = @_;
	my ($max, $mk) = (0, '');
	for my $k (grep { /^$a:/ } keys %$by)
	{
		my $sums = window_sums([ grep { $_->[5] && $filter->($_) } @{ $by->{$k} } ]);
		for (values %$sums) { ($max, $mk) = ($_, $k) if $_ > $max }
	}
	return ($max, $mk);
}

sub token_max
{
	my ($by, $filter, $counted) = @_;
	my ($ahead, $ak) = (-1e18, '');
	for my $k (grep { /^token_bucket:/ } keys %$by)
	{
		my $x = gcra_ahead([ grep { $_->[5] && $filter->($_) } @{ $by->{$k} } ], $counted);
		($ahead, $ak) = ($x, $k) if $x > $ahead;
	}
	return ($ahead, $ak);
}

my $win_us = $win_s * 1_000_000;

# 5. Frozen and thawed: each algorithm keeps its own bound across both
# switches, checked on every admission from either store.
{
	my ($by) = counting_run(5, 'frozen', $node1);
	for my $a (qw(fixed_window sliding_counter))
	{
		my ($max, $mk) = counting_max($by, $a, sub { 1 });
		cmp_ok($max, '<=', $lim, "counting, $a: at most lim in every window across both switches ($max, key $mk)");
	}
	my ($ahead, $ak) = token_max($by, sub { 1 });
	cmp_ok($ahead, '<=', $win_us + 50_000 + $late, sprintf('counting, token_bucket: one bucket across both switches (the tat ran at most %.3f s ahead, key %s; window %d s)',
		$ahead / 1e6, $ak, $win_s));
}

# 6. Killed and restarted empty: as for the sliding log, the bound holds
# from the fallback store's admissions on (fallback and Redis after the
# restart), and up to the restart (Redis before the kill and fallback).
{
	my ($by, $down, $up) = counting_run(6, 'restarted', $node1);
	my %part = (
		'from the outage on' => sub { $_[0][1] eq 'fallback' || $_[0][2] > $up * 1e6 },
		'up to the restart'  => sub { $_[0][1] eq 'fallback' || $_[0][2] < $up * 1e6 });
	for my $p (sort keys %part)
	{
		for my $a (qw(fixed_window sliding_counter))
		{
			my ($max, $mk) = counting_max($by, $a, $part{$p});
			cmp_ok($max, '<=', $lim, "counting restarted, $a, $p: at most lim in every window ($max, key $mk)");
		}
		my ($ahead, $ak) = token_max($by, $part{$p});
		cmp_ok($ahead, '<=', $win_us + 50_000 + $late, sprintf('counting restarted, token_bucket, %s: one bucket (the tat ran at most %.3f s ahead, key %s)',
			$p, $ahead / 1e6, $ak));
	}
}

# 7. Two servers sharing one Redis, 4 clients each, frozen and thawed: at
# most 2 x lim in a window (2 x the burst) during the outage; once both
# servers have had a Redis answer for the key (each carries the key's
# admissions back before its first), a window (bucket) that holds an
# admission after that holds at most lim in all, and the token bucket over
# both servers' admissions runs at most win ahead of such an admission.
{
	my ($by, $down, $up) = counting_run(7, 'frozen', $node1, $node2);
	# Per key: when both servers had had a Redis answer after the thaw and
	# after their last fallback call of the key (a backend whose breaker was
	# still open decides in the fallback store for up to
	# redis_retry_interval after the thaw, knowing only what its own server
	# last heard from Redis; each server carries its admissions with its
	# next Redis call of the key).
	my %both;
	for my $k (keys %$by)
	{
		my (%last_fb, %after);
		for my $e (@{ $by->{$k} })
		{
			$last_fb{ $e->[4] } = $e->[2] if $e->[1] eq 'fallback';
		}
		for my $e (@{ $by->{$k} })
		{
			$after{ $e->[4] } //= $e->[2]
			  if $e->[1] eq 'redis' && $e->[2] > $up * 1e6 && $e->[2] > ($last_fb{ $e->[4] } // 0);
		}
		$both{$k} = (sort { $b <=> $a } values %after)[0] if keys %after == 2;
	}
	cmp_ok(scalar(keys %both), '>=', 12, 'two servers: most keys had Redis answers on both servers after the thaw ('
		. scalar(keys %both) . ' of 15)');
	for my $a (qw(fixed_window sliding_counter))
	{
		my ($max, $mk) = counting_max($by, $a, sub { 1 });
		cmp_ok($max, '<=', 2 * $lim, "two servers, $a: at most 2 x lim in any window ($max, key $mk)");
		my ($amax, $ak) = (0, '');
		for my $k (grep { /^$a:/ && defined $both{$_} } keys %$by)
		{
			my @adm = grep { $_->[5] } @{ $by->{$k} };
			my %late = map { $_->[3] => 1 } grep { $_->[2] > $both{$k} } @adm;
			my $sums = window_sums(\@adm);
			for my $w (keys %late) { ($amax, $ak) = ($sums->{$w}, $k) if $sums->{$w} > $amax }
		}
		cmp_ok($amax, '<=', $lim, "two servers, $a: once both had a Redis answer, a window admitting more holds at most lim in all ($amax, key $ak)");
	}
	# The token bucket is not one GCRA over the union of two servers: each
	# server's fallback bucket refills on its own during the outage. What is
	# promised: each fallback bucket starts where Redis's stood in that
	# server's last answer (so during the outage, N buckets, each at most
	# win ahead), and a server's first Redis call of the key after the thaw
	# moves Redis's bucket ahead by as much as that server's fallback bucket
	# stood ahead then. The check replays that model over the calls: every
	# fallback admission leaves its server's modelled bucket at most win
	# ahead (a fallback store that forgot Redis's count runs ahead of it),
	# and every admission after both carries leaves the modelled Redis
	# bucket at most win ahead (a Redis that missed a server's fallback
	# admissions admits while the model's bucket is still full).
	my $t = $win_us / $lim;
	my ($fahead, $fk) = (-1e18, '');
	my ($lahead, $lk) = (-1e18, '');
	for my $k (grep { /^token_bucket:/ && defined $both{$_} } keys %$by)
	{
		my ($r, %f, %carried, %seen) = (0);
		for my $e (@{ $by->{$k} })
		{
			my ($c, $st, $at, undef, $node, $ok) = @$e;
			if ($st eq 'fallback')
			{
				$f{$node} //= $seen{$node} // 0;
				next unless $ok;
				$f{$node} = $at if $f{$node} < $at;
				$f{$node} += $c * $t;
				($fahead, $fk) = ($f{$node} - $at, $k) if $f{$node} - $at > $fahead;
				next;
			}
			if ($at > $up * 1e6 && !$carried{$node}++ && defined $f{$node})
			{
				$r = $at if $r < $at;
				$r += $f{$node} - $at if $f{$node} > $at;
			}
			$seen{$node} = $r;
			next unless $ok;
			$r = $at if $r < $at;
			$r += $c * $t;
			$seen{$node} = $r;
			($lahead, $lk) = ($r - $at, $k) if $at > $both{$k} && $r - $at > $lahead;
		}
	}
	cmp_ok($fahead, '<=', $win_us + 50_000 + $late, sprintf('two servers, token_bucket: during the outage each server\'s fallback bucket started where Redis\'s stood (%.3f s ahead, key %s)',
		$fahead / 1e6, $fk));
	cmp_ok($lahead, '<=', $win_us + 50_000 + $late, sprintf('two servers, token_bucket: once both had a Redis answer, Redis\'s bucket held both servers\' fallback buckets (%.3f s ahead, key %s)',
		$lahead / 1e6, $lk));
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

# ---------------------------------------------------------------------
# 8. A carry and a fallback admission of its key not yet committed: the
# carry waits (at most 100 ms) for it, so that Redis's decision counts it
# if it commits meanwhile (as an admission does within its statement); a
# transaction left open after it is waited for once, not at every call.
# ---------------------------------------------------------------------
{
	my $dead = SlidewinTest::free_port();
	my $a = $node1->background_psql('postgres', on_error_stop => 0);
	$a->query_safe("SET slidewin.redis_url = 'redis://127.0.0.1:$dead'");
	$a->query_safe('BEGIN');
	is($a->query_safe(q{SELECT (r).store || ',' || (r).allowed FROM (SELECT rl_attempt('pend', 100, '1 minute', 5) r) s}),
		'fallback,true', '(8) a fallback admission of 5 units, its transaction left open');
	my $b = $node1->background_psql('postgres', on_error_stop => 0);
	my $sql = q{SELECT (rl_attempt('pend', 100, '1 minute')).remaining || ',' || round(extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000)};
	my ($rem, $ms) = split /,/, $b->query_safe($sql);
	is($rem, 99, '(8) Redis cannot count an admission not yet committed');
	cmp_ok($ms, '>=', 90, "(8) the carrying call waited for it first ($ms ms)");
	($rem, $ms) = split /,/, $b->query_safe($sql);
	cmp_ok($ms, '<', 90, "(8) and does not wait for the same one again ($ms ms)");
	$a->query_safe('COMMIT');
	($rem, $ms) = split /,/, $b->query_safe($sql);
	is($rem, 92, '(8) committed, it is carried with the next call (100 - 5 - 3 units)');
	$a->quit;
	$b->quit;
}

# ---------------------------------------------------------------------
# 9. A key this server never had an answer for: a call of it on its way to
# Redis (carried, held up by CLIENT PAUSE) when another backend's call of it
# falls back. The fallback call counts it as admitted, though nothing Redis
# counted is kept for the key, so the window holds lim (it admitted 2 of
# lim 1 when only the keys the outage table holds counted calls in flight:
# the soak, TAP 140, found it).
# ---------------------------------------------------------------------
{
	my $q = q{SELECT (r).store || ',' || (r).allowed FROM (SELECT rl_attempt('unseen9', 1, '1 minute') r) s};
	$redis->pause_ms(5000);
	my $a = $node1->background_psql('postgres', on_error_stop => 0);
	$a->query_safe("SET slidewin.command_timeout = '20s'");
	$a->{stdin} .= "$q;\n";
	$a->{run}->pump_nb;
	$node1->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM pg_stat_activity
		WHERE query LIKE '%unseen9%' AND state = 'active' AND pid <> pg_backend_pid()})
	  or die 'the call on its way to Redis did not start';
	usleep(200_000);
	is($node1->safe_psql('postgres', $q), 'fallback,false',
		'(9) a fallback call of a key never answered here counts the call on its way to Redis');
	$redis->cli('client', 'unpause');
	like($a->query_safe("SELECT 'done'"), qr/^redis,true\ndone$/, '(9) which Redis admits');
	$a->quit;
	is($node1->safe_psql('postgres', q{SELECT count(*) FROM rl_fallback_log WHERE key = 'slidewin:unseen9'}), '0',
		'(9) one admission in all, lim 1');
}

for my $n ($node1, $node2)
{
	unlike(slurp_file($n->logfile), qr/PANIC|terminated by signal/, $n->name . ': no crash');
}
done_testing();
