# Fairness between servers under local batches (issue 40, item 4): two
# PostgreSQL servers, both preloading slidewin, share one Redis and call
# one hot key as fast as 4 pgbench clients each can for 8 s, with a limit
# far below their demand (lim 200 per 1 s). Run once with batches off, as the
# reference, and once on (local_batch 20, local_batch_time d = 20 ms).
# Every admitted call is logged on its server with the clock after the
# call (both servers read this host's clock). From the merged log, from one
# window after both servers' first admissions to either server's last
# (about 6 s):
#  - each server's share of the admissions over the run, and its least
#    share of any window of 1 s that holds at least lim / 2 of them;
#  - each server's longest starvation: the longest run of the other's
#    admissions with none of its own among them, timed over the gaps
#    between them of at most d in which it was asking (a call of its own,
#    denied, in the gap or within 1 ms before it: a gap in which its
#    clients made no call at all, as when this loaded machine does not run
#    them, is not the other server taking its units; a gap longer than d,
#    in which neither server admitted anything, is the full window denying
#    both: a grant's units are used within d), and counted in admissions.
# The checks, from doc/semantics.md, "Fairness between servers":
#  1. each server's share over the run lies within three standard
#     deviations of 50 %, taking each of the run's grants (at most
#     local_batch units each, one unit with batches off) to go to either
#     server with even odds: 50 % +- 19 % for 6 s, batches on and off;
#  2. with batches on, each server is admitted in every window (it has
#     lim / local_batch = 10 grants or more to win, so it loses all of one
#     window's with odds below 1 in 1000);
#  3. with batches on, neither server's longest starvation exceeds the
#     longest of the batches-off run (how long one server's clients can
#     win every race for one unit on this machine) by more than 2 d: d for
#     the life of the batches the other server won before this one's
#     reserve was denied, d for the load on this machine. That holds
#     because a denied reserve names its server in the key's waiting mark,
#     and while it does the other server's reserves take one unit each, as
#     with batches off (log_attempt.lua). Without the mark a server could
#     win batch after batch, d each, with odds of one half per race.
# Before the runs, the waiting mark itself is checked on the script that
# reserves, called directly with two servers' names.
# The numbers are printed (diag) for the report.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
my @conf  = ("shared_preload_libraries = 'slidewin'", 'max_connections = 20');
my $a_node = SlidewinTest::new_node('fair_a', $redis, \@conf);
my $b_node = SlidewinTest::new_node('fair_b', $redis, \@conf);

my ($lim, $win, $secs, $clients) = (200, 1, 8, 4);
my ($batch, $d_ms) = (20, 20);
# a gap longer than this with no admission on either server is idle
my $idle = $d_ms / 1000;

for my $n ($a_node, $b_node)
{
	$n->safe_psql('postgres', 'CREATE UNLOGGED TABLE adm (k text, t float8, ok boolean)');
	$n->safe_psql('postgres', q{
		CREATE FUNCTION take(k text, lim bigint, win interval) RETURNS boolean
		LANGUAGE plpgsql AS $$
		DECLARE ok boolean;
		BEGIN
		  ok := rl_allow(k, lim, win);
		  INSERT INTO adm VALUES (k, extract(epoch FROM clock_timestamp()), ok);
		  RETURN ok;
		END $$});
}

# pgbench on both servers at once, $clients clients each, for $secs s.
sub bench_both
{
	my ($key, $opts) = @_;
	my $dir    = PostgreSQL::Test::Utils::tempdir('pgbench');
	my $script = "$dir/hot.sql";
	open(my $fh, '>', $script) or die "cannot write $script: $!";
	print $fh "SELECT take('$key', $lim, '$win second');\n";
	close $fh;
	local $ENV{PGOPTIONS} = $opts;
	my @bench;
	for my $n ($a_node, $b_node)
	{
		my ($out, $err) = ('', '');
		my @cmd = ('pgbench', '-n', '-c', $clients, '-j', '1', '-T', $secs, '-f', $script,
			'-h', $n->host, '-p', $n->port, 'postgres');
		push @bench, { node => $n, out => \$out, err => \$err,
			h => IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err) };
	}
	for my $b (@bench)
	{
		$b->{h}->finish;
		is($b->{h}->full_result(0) >> 8, 0, $b->{node}->name . ": pgbench exits 0 ($key)")
		  or diag(${ $b->{out} } . ${ $b->{err} });
	}
}

# The merged admissions of $key, [time, server index], in time order, and
# each server's denied calls' times, in time order.
sub admissions
{
	my ($key) = @_;
	my (@all, @denied);
	for my $i (0, 1)
	{
		my $n = ($a_node, $b_node)[$i];
		push @all, map { [ $_, $i ] }
		  split /\n/, $n->safe_psql('postgres', "SELECT t FROM adm WHERE k = '$key' AND ok");
		$denied[$i] = [ split /\n/,
			$n->safe_psql('postgres', "SELECT t FROM adm WHERE k = '$key' AND NOT ok ORDER BY t") ];
	}
	return ([ sort { $a->[0] <=> $b->[0] } @all ], \@denied);
}

# Whether server $x made a (denied) call in [$from - 1 ms, $to]: a binary
# search of its denied calls' times.
sub asking
{
	my ($denied, $from, $to) = @_;
	my ($lo, $hi) = (0, scalar @$denied);
	while ($lo < $hi)
	{
		my $mid = int(($lo + $hi) / 2);
		if ($denied->[$mid] < $from - 0.001) { $lo = $mid + 1 } else { $hi = $mid }
	}
	return $lo < @$denied && $denied->[$lo] <= $to;
}

# Shares and starvation of a run's admissions, from one window after both
# servers' first admissions (the first window is filled by whichever
# server's clients connected first, and one pgbench may start late on this
# loaded machine) to the first server's last.
sub measure
{
	my ($admref, $denied) = @_;
	my @adm = @$admref;
	my (@first, @last);
	for my $e (@adm)
	{
		$first[ $e->[1] ] //= $e->[0];
		$last[ $e->[1] ] = $e->[0];
	}
	return undef unless defined $first[0] && defined $first[1];
	my $t_from = ($first[0] > $first[1] ? $first[0] : $first[1]) + $win;
	my $t_to   = $last[0] < $last[1] ? $last[0] : $last[1];
	@adm = grep { $_->[0] >= $t_from && $_->[0] <= $t_to } @adm;
	return undef unless @adm;
	my %m = (n => [ 0, 0 ], starve => [ 0, 0 ], run => [ 0, 0 ], wmin => [ 1, 1 ], windows => 0);
	$m{n}[ $_->[1] ]++ for @adm;
	$m{span} = $t_to - $t_from;
	# starvation of X: a run of Y's admissions with none of X's among them,
	# timed over the gaps between them of at most $idle seconds (a longer
	# one, in which neither server admitted, is the full window denying both)
	# in which X was asking
	my ($busy, $units, $run_srv, $prev) = (0, 0);
	for my $e (@adm, [ undef, -1 ])
	{
		my ($t, $s) = @$e;
		if (defined $run_srv && $s == $run_srv)
		{
			$busy += $t - $prev
			  if $t - $prev <= $idle && asking($denied->[ 1 - $s ], $prev, $t);
			$units++;
			$prev = $t;
			next;
		}
		if (defined $run_srv)
		{
			my $x = 1 - $run_srv;
			$m{starve}[$x] = $busy  if $busy > $m{starve}[$x];
			$m{run}[$x]    = $units if $units > $m{run}[$x];
		}
		($busy, $units, $run_srv, $prev) = (0, 1, $s, $t);
	}
	# each window of $win seconds, starting every 50 ms, that holds at
	# least lim / 2 admissions
	my $j = 0;
	for (my $w0 = $t_from; $w0 + $win <= $adm[-1][0]; $w0 += 0.05)
	{
		my @c = (0, 0);
		$j++ while $j < @adm && $adm[$j][0] < $w0;
		for (my $k = $j; $k < @adm && $adm[$k][0] < $w0 + $win; $k++)
		{
			$c[ $adm[$k][1] ]++;
		}
		my $tot = $c[0] + $c[1];
		next if $tot < $lim / 2;
		$m{windows}++;
		for my $i (0, 1)
		{
			$m{wmin}[$i] = $c[$i] / $tot if $c[$i] / $tot < $m{wmin}[$i];
		}
	}
	return \%m;
}

# The waiting mark, on the reserve's own script (log_attempt.lua, flag
# 'b'), called directly for two servers named A and B: lim 10, win 10 s,
# up to 10 units a batch, ahead 20 ms, least 1.
my $scripts = SlidewinTest::src_dir() . '/src/store/redis/scripts.c';
my ($attempt_lua, $refund_lua) = map { scalar `perl "@{[ SlidewinTest::src_dir() ]}/test/bench/lua_source.pl" "$scripts" $_` }
  qw(lua_log_attempt lua_log_refund);
ok(length($attempt_lua) > 100 && length($refund_lua) > 100, 'mark: read the reserve and the refund scripts');
my @wk = map { "fairmark:$_" } qw(log logr blk logw);
my $reserve = sub {
	my ($srv) = @_;
	return [ split /\n/,
		$redis->cli('EVAL', $attempt_lua, 4, @wk, 10, 10_000_000, 10, 'b', '', 20_000, 1, $srv) ];
};
my $r1 = $reserve->('A');
is(scalar @$r1 == 4 && $r1->[3], 10, 'mark: A, first, takes a batch of all 10');
my $r2 = $reserve->('B');
is($r2->[0], 0, 'mark: B is denied');
is($redis->cli('GET', $wk[3]), 'B', 'mark: and its denied reserve names B in the waiting mark');
cmp_ok($redis->cli('PTTL', $wk[3]), '>', 0, 'mark: which lapses');
is($redis->cli('EVAL', $refund_lua, 2, @wk[0, 1], $r1->[1], 10, 10_000_000, '', 8), 1,
	'mark: 8 of A\'s batch go back');
my $r3 = $reserve->('A');
is(scalar @$r3 == 4 && $r3->[3], 1, 'mark: while B waits, A\'s reserve takes its call\'s one unit, of 8 free');
is($redis->cli('GET', $wk[3]), 'B', 'mark: and B still waits');
my $r4 = $reserve->('B');
is(scalar @$r4 == 4 && $r4->[3], 7, 'mark: B\'s next reserve takes the 7 left');
is($redis->cli('EXISTS', $wk[3]), 0, 'mark: and clears the mark');
my $r5 = $reserve->('A');
is($r5->[0], 0, 'mark: A, denied now,');
is($redis->cli('GET', $wk[3]), 'A', 'mark: is named in the mark in its turn');
$redis->cli('DEL', @wk);
$redis->cli('SET', 'slidewin:logw:fair_reset', 'B');
$a_node->safe_psql('postgres', "SELECT rl_reset('fair_reset')");
is($redis->cli('EXISTS', 'slidewin:logw:fair_reset'), 0, 'mark: rl_reset deletes the key\'s waiting mark');

for my $mode ([ 'off', 0 ], [ 'on', $batch ])
{
	my ($name, $n) = @$mode;
	my $key = "fair_dc_$name";
	$a_node->safe_psql('postgres', "SELECT count(*) FROM generate_series(1, 5) g WHERE rl_allow('$key', 5 + 0 * g, '1 hour')");
	my $before = $redis->scripts_run;
	my $admitted = $a_node->safe_psql('postgres', qq{
		SET slidewin.local_batch = $n; SET slidewin.local_batch_time = $d_ms;
		SELECT count(*) FILTER (WHERE ok) FROM (
		  SELECT rl_allow('$key', 5 + 0 * g, '1 hour') AS ok, pg_sleep(0.005)
		  FROM generate_series(1, 60) g) c});
	my $asked = $redis->scripts_run - $before;
	is($admitted, 0, "deny cache, batches $name: the full key admits none of 60 calls");
	if ($name eq 'off')
	{
		cmp_ok($asked, '<=', 2, "deny cache, batches off: Redis was asked $asked times (the denial stands)");
	}
	else
	{
		cmp_ok($asked, '>=', 6, "deny cache, batches on: Redis was asked $asked times (a denial kept at most d)");
	}
}

my %res;
for my $mode (['off', '-c slidewin.local_batch=0'],
	['on', "-c slidewin.local_batch=$batch -c slidewin.local_batch_time=$d_ms"])
{
	my ($name, $opts) = @$mode;
	my $key = "fair_$name";
	bench_both($key, $opts);
	my $m = measure(admissions($key));
	BAIL_OUT("batches $name: a server admitted nothing") unless $m;
	$res{$name} = $m;
	my $tot = $m->{n}[0] + $m->{n}[1];
	diag(sprintf("batches %s: %d admitted in %.1f s (A %d, B %d: A's share %.1f %%); "
			. "least share in a window of 1 s: A %.1f %%, B %.1f %% (%d windows); "
			. "longest starvation: A %.1f ms (%d of B's in a row), B %.1f ms (%d of A's in a row)",
			$name, $tot, $m->{span}, $m->{n}[0], $m->{n}[1], 100 * $m->{n}[0] / ($tot || 1),
			100 * $m->{wmin}[0], 100 * $m->{wmin}[1], $m->{windows},
			1000 * $m->{starve}[0], $m->{run}[0], 1000 * $m->{starve}[1], $m->{run}[1]));
	# three standard deviations of a share won in grants of at most
	# local_batch units each (one unit each with batches off, fewer than that)
	my $dev = 100 * 3 * sqrt($batch * $win / ($lim * $m->{span})) / 2;
	for my $i (0, 1)
	{
		my $who   = ('A', 'B')[$i];
		my $share = 100 * $m->{n}[$i] / ($tot || 1);
		ok(abs($share - 50) <= $dev,
			sprintf("batches %s: %s's share of the admissions within 50 %% +- %.1f %% (%.1f %%)",
				$name, $who, $dev, $share));
	}
	# a window that is never filled would make the check below say nothing
	cmp_ok($tot, '>=', ($m->{span} / $win - 1) * $lim,
		sprintf('batches %s: the limit bound, its windows filled (%d admitted in %.1f s)',
			$name, $tot, $m->{span}));
}

my ($on, $off) = @res{ 'on', 'off' };
cmp_ok($on->{windows}, '>', 0, 'batches on: some windows of 1 s held lim / 2 admissions or more');
my $ref = $off->{starve}[0] > $off->{starve}[1] ? $off->{starve}[0] : $off->{starve}[1];
for my $i (0, 1)
{
	my $who = ('A', 'B')[$i];
	cmp_ok($on->{wmin}[$i], '>', 0,
		sprintf('batches on: %s admitted in every window of 1 s (least share %.1f %%)',
			$who, 100 * $on->{wmin}[$i]));
	cmp_ok(1000 * $on->{starve}[$i], '<=', 1000 * $ref + 2 * $d_ms,
		sprintf('batches on: %s starved at most 2 d longer than the longest starvation with batches off '
			  . '(%.1f ms, off %.1f ms)', $who, 1000 * $on->{starve}[$i], 1000 * $ref));
}

done_testing();
