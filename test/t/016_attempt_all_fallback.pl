# rl_attempt_all in the fallback store and across an outage, for every
# algorithm, under 8 pgbench clients, each call over 2 to 4 keys drawn from 6
# overlapping ones of its algorithm and named in a random order (so that two
# calls often name shared keys in opposite orders), each key with its own
# limit and each call with its own cost per key. The four algorithms run in
# one pgbench, each call taking one at random, on keys of their own. Every
# window is long enough that a key's units are all its admissions: an hour
# for sliding_log; for the counting algorithms a window of at least a day
# that the whole file runs inside (SlidewinTest::aligned_window). So
# fixed_window's window and sliding_counter's bucket are the only ones (no
# previous bucket weighs in: the estimate is the count), token_bucket refills
# less than one unit over the file (its bound, the burst plus the refill, is
# lim), and each key's count is exact and its bound strict.
#
#  1. Redis cannot answer (a closed port): the fallback store decides every
#     call. No call fails (no deadlock, no statement_timeout of 5 s); each
#     call's keys were all admitted or all denied; each key's count in the
#     fallback store (the log's units; fixed_window's and sliding_counter's
#     count; how far token_bucket's bucket stands ahead of its first
#     admission, in units) and its rows waiting for Redis hold exactly the
#     costs of the calls admitted as a whole that named it, at most its
#     limit.
#  2. Redis answers again: one call over a phase's six keys of an algorithm
#     (which one more key, full, denies) carries every key's rows into Redis
#     before Redis decides; Redis then counts exactly the units the fallback
#     store admitted of each key, and nothing waits to be carried.
#  3. Redis frozen (SIGSTOP) for 2 s in the middle of 6 s of paced calls,
#     then thawed: each key's admissions from both stores hold at most its
#     limit (the fallback store started from each key's count in Redis, and
#     Redis learned of each key's fallback admissions before it decided
#     again); and once carried, Redis counts every unit either store
#     admitted of each key. It may count more: the units of scripts that
#     timed out while it was frozen and ran when it woke (for sliding_log,
#     fixed_window and sliding_counter, at most those); and for token_bucket,
#     by design, what Redis's own bucket still owed when the fallback
#     store's was carried into it (doc/failure-modes.md).
#  4. a call on its way to Redis, held up by CLIENT PAUSE: a fallback call of
#     any of its keys meanwhile counts it as admitted (sliding_log).
use strict;
use warnings;

use IPC::Run;
use POSIX ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest;

my @algos = qw(sliding_log fixed_window sliding_counter token_bucket);
my %tag   = (sliding_log => 'sl', fixed_window => 'fw', sliding_counter => 'sc', token_bucket => 'tb');
my %algo_no = (sliding_counter => 1, fixed_window => 2, token_bucket => 3);

# Each algorithm's window, in seconds. The file takes well under 10 minutes.
my $counting_win = SlidewinTest::aligned_window(600, 86400);
my %win = (sliding_log => 3600, map { $_ => $counting_win } qw(fixed_window sliding_counter token_bucket));
note("the counting algorithms' window: $counting_win s");
my $t_start = time;

my $redis = SlidewinTest::start_redis();
my $node  = SlidewinTest::new_node('allfb', $redis,
	[ "shared_preload_libraries = 'slidewin'", "slidewin.redis_retry_interval = '200ms'" ]);

my $algo_tags = join(', ', map { "('$_', '$tag{$_}')" } @algos);
$node->safe_psql('postgres', qq{
	CREATE TABLE keys (k text PRIMARY KEY, l bigint, phase text, algo text);
	INSERT INTO keys SELECT 'f:' || t || i, 20 + 7 * i, 'fallback', a
	  FROM generate_series(1, 6) i, (VALUES $algo_tags) v(a, t);
	INSERT INTO keys SELECT 'o:' || t || i, 40 + 25 * i, 'outage', a
	  FROM generate_series(1, 6) i, (VALUES $algo_tags) v(a, t);
	CREATE SEQUENCE calls;
	CREATE TABLE outcome (call bigint, phase text, algo text, k text, cost bigint, allowed boolean,
	                      store text, reset_at timestamptz);
	CREATE INDEX ON outcome (k);
});

# One call of an algorithm: 2 to 4 distinct keys in a random order, a cost
# of 1 to 3 each.
sub script
{
	my ($phase, $algo, $url) = @_;
	my $set = $url ? "SET slidewin.redis_url = '$url';" : '';
	return qq{
		SET statement_timeout = '5s';
		$set
		\\set n random(2, 4)
		WITH pick AS MATERIALIZED (
		       SELECT k, l, (1 + floor(random() * 3))::bigint AS c, random() AS o
		         FROM keys WHERE phase = '$phase' AND algo = '$algo' ORDER BY random() LIMIT :n),
		     arr AS (SELECT array_agg(k ORDER BY o) ks, array_agg(l ORDER BY o) ls,
		                    array_agg(c ORDER BY o) cs FROM pick),
		     id AS (SELECT nextval('calls') AS call)
		INSERT INTO outcome
		SELECT id.call, '$phase', '$algo', r.key, pick.c, r.allowed, r.store, r.reset_at
		  FROM arr, id,
		       rl_attempt_all_rows(arr.ks, arr.ls, array_fill('$win{$algo} seconds'::interval, ARRAY[:n]),
		                           arr.cs, on_redis_error => 'fallback', algorithm => '$algo') r
		  JOIN pick ON pick.k = r.key;
	};
}

# The scripts of every algorithm, for pgbench to pick one per call.
sub scripts
{
	my ($phase, $url) = @_;
	return { map { ("016_${phase}_$_" => script($phase, $_, $url)) } @algos };
}

sub all_or_none
{
	my ($phase, $algo) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*) FROM (SELECT call FROM outcome WHERE phase = '$phase' AND algo = '$algo'
		                      GROUP BY call HAVING bool_or(allowed) <> bool_and(allowed)) s});
}

# The calls of an algorithm decided as a whole by one store, admitted and
# denied.
sub calls_by
{
	my ($phase, $algo, $store) = @_;
	return split /\|/, $node->safe_psql('postgres', qq{
		SELECT count(*) FILTER (WHERE a), count(*) FILTER (WHERE NOT a)
		  FROM (SELECT bool_and(allowed) a, bool_and(store = '$store') s FROM outcome
		         WHERE phase = '$phase' AND algo = '$algo' GROUP BY call) c WHERE s});
}

# What the fallback store counts of a key (sk: its stored name), read from
# its tables: the log's units; fixed_window's and sliding_counter's live
# count (its row's a, and b the previous bucket's, which must be 0 here);
# and token_bucket's tat (a) less the time of the key's first fallback
# admission (its tat then, reset_at, less its cost), in units of win / lim.
my $live_state = q{
	(SELECT a, b FROM rl_fallback_state f
	  WHERE f.key = sk AND f.algo = %d
	    AND f.expires > (extract(epoch FROM clock_timestamp()) * 1e6)::bigint
	  ORDER BY s DESC, a DESC LIMIT 1)};
my %stored = (
	sliding_log     => q{(SELECT coalesce(sum(cost), 0) FROM rl_fallback_log f WHERE f.key = sk)},
	fixed_window    => sprintf(q{(SELECT coalesce(sum(a + b), 0) FROM %s st)},
		sprintf($live_state, $algo_no{fixed_window})),
	sliding_counter => sprintf(q{(SELECT coalesce(sum(a + b), 0) FROM %s st)},
		sprintf($live_state, $algo_no{sliding_counter})),
	token_bucket    => sprintf(q{(SELECT coalesce(round((st.a - (extract(epoch FROM o.reset_at) * 1e6 - o.cost * t_us)) / t_us), 0)
	                             FROM %s st,
	                                  (SELECT reset_at, cost FROM outcome o WHERE o.k = keys.k AND o.allowed
	                                      AND o.store = 'fallback' ORDER BY reset_at LIMIT 1) o)},
		sprintf($live_state, $algo_no{token_bucket})));

# Per key of an algorithm: lim, the key's costs over the calls admitted as
# a whole (from the outcome table), those of the calls the fallback store
# admitted, the fallback store's count and the units in the carry table.
sub per_key
{
	my ($phase, $algo) = @_;
	return map { [ split /\|/ ] } split /\n/, $node->safe_psql('postgres', qq{
		WITH whole AS (SELECT call FROM outcome WHERE phase = '$phase' AND algo = '$algo'
		                GROUP BY call HAVING bool_and(allowed)),
		     units AS (SELECT o.k, sum(o.cost) AS u, sum(o.cost) FILTER (WHERE o.store = 'fallback') AS fb
		                 FROM outcome o JOIN whole USING (call) GROUP BY o.k)
		SELECT keys.k, keys.l, coalesce(units.u, 0), coalesce(units.fb, 0),
		       coalesce(($stored{$algo})::text, '0'),
		       (SELECT coalesce(sum(cost), 0) FROM rl_fallback_carry f WHERE f.key = sk)
		  FROM keys LEFT JOIN units ON units.k = keys.k,
		       LATERAL (SELECT current_setting('slidewin.key_prefix') || keys.k AS sk,
		                       $win{$algo} * 1e6 / keys.l AS t_us) x
		 WHERE phase = '$phase' AND algo = '$algo' ORDER BY keys.k});
}

# The most units a key of lim may admit in the file: lim, and for
# token_bucket the whole units refilled since the file started too (none
# in a window of a day or more).
sub bound
{
	my ($algo, $lim) = @_;
	return $lim unless $algo eq 'token_bucket';
	return $lim + int((time - $t_start) * $lim / $win{$algo});
}

# A key's units in Redis, read from its structure rather than by rl_peek
# (whose remaining stops at 0, so that a count past lim would read as lim):
# the newest running total of the log (none leaves an hour's window here);
# fixed_window's and sliding_counter's counts (the previous bucket's, p,
# must be 0 here); how far token_bucket's tat stands ahead of Redis's clock,
# in whole units of win / lim.
sub redis_units
{
	my ($algo, $k, $lim) = @_;
	my $rk = "slidewin:$tag{$algo}:$k";
	if ($algo eq 'sliding_log')
	{
		my ($total) = split /\n/, scalar $redis->cli('zrange', "slidewin:log:$k", '-1', '-1');
		return $total // 0;
	}
	if ($algo eq 'fixed_window')
	{
		return $redis->cli('hget', $rk, 'n') || 0;
	}
	if ($algo eq 'sliding_counter')
	{
		my ($c, $p) = split /\n/, scalar $redis->cli('hmget', $rk, 'c', 'p');
		return ($c || 0) + ($p || 0);
	}
	my $tat = $redis->cli('get', $rk) || 0;
	my ($sec, $usec) = split /\n/, scalar $redis->cli('time');
	my $ahead = $tat - ($sec * 1e6 + $usec);
	return $ahead > 0 ? POSIX::ceil($ahead / ($win{$algo} * 1e6 / $lim) - 1e-9) : 0;
}

# One call over the phase's keys of an algorithm that the key 'full:<tag>'
# denies: every key's rows are carried into Redis first, and nothing is
# charged. Then each key's units in Redis.
sub carried_units
{
	my ($phase, $algo) = @_;
	my ($w, $full) = ("$win{$algo} seconds", "full:$tag{$algo}");
	my $sel = "FROM keys WHERE phase = '$phase' AND algo = '$algo'";
	$node->safe_psql('postgres', qq{
		SELECT rl_reset('$full');
		SELECT rl_attempt('$full', 1, '$w', on_redis_error => 'error', algorithm => '$algo');
	});
	my $r = $node->safe_psql('postgres', qq{
		SELECT count(*) FILTER (WHERE allowed), count(*) FILTER (WHERE store = 'redis')
		  FROM rl_attempt_all_rows(
		         (SELECT array_agg(k ORDER BY k) $sel) || '$full'::text,
		         (SELECT array_agg(l ORDER BY k) $sel) || 1::bigint,
		         array_fill('$w'::interval, ARRAY[7]), on_redis_error => 'error', algorithm => '$algo')});
	is($r, '0|7', "$phase, $algo: a call over the keys that '$full' denies, decided by Redis");
	return map { my ($k, $l) = split /\|/; ($k => redis_units($algo, $k, $l)) }
	  split /\n/, $node->safe_psql('postgres', "SELECT k, l $sel");
}

# ---------------------------------------------------------------------
# 1. The fallback store alone.
# ---------------------------------------------------------------------
$node->pgbench('-n -c 8 -j 2 -t 150', 0, [qr{processed: 1200/1200}], [qr{^$}],
	'fallback: 8 clients x 150 calls over 2-4 of 6 keys of an algorithm in random orders, none fails',
	scripts('fallback', 'redis://127.0.0.1:1'));

my %fallback_units;
foreach my $algo (@algos)
{
	is(all_or_none('fallback', $algo), '0', "fallback, $algo: every call admitted all its keys or none");
	my ($admitted, $denied) = calls_by('fallback', $algo, 'fallback');
	cmp_ok($admitted, '>', 10, "fallback, $algo: $admitted calls admitted by the fallback store");
	cmp_ok($denied, '>', 100, "fallback, $algo: $denied calls denied by it (the keys filled up)");
	foreach my $row (per_key('fallback', $algo))
	{
		my ($k, $lim, $units, $fb, $counted, $waiting) = @$row;
		is($counted, $units,
			"fallback, $algo: $k: the fallback store counts $counted units, the admitted calls' costs ($units)");
		is($waiting, $units, "fallback, $algo: $k: $waiting units wait to be carried into Redis");
		cmp_ok($units, '<=', bound($algo, $lim), "fallback, $algo: $k: $units units within lim $lim");
		$fallback_units{$algo}{$k} = $units;
	}
}

# ---------------------------------------------------------------------
# 2. Redis answers again: every key's units are carried into it.
# ---------------------------------------------------------------------
foreach my $algo (@algos)
{
	my %in_redis = carried_units('fallback', $algo);
	foreach my $k (sort keys %{ $fallback_units{$algo} })
	{
		is($in_redis{$k}, $fallback_units{$algo}{$k},
			"carried, $algo: Redis counts $in_redis{$k} units of $k, what the fallback store admitted ($fallback_units{$algo}{$k})");
	}
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM rl_fallback_carry
	   WHERE key IN (SELECT current_setting('slidewin.key_prefix') || k FROM keys WHERE phase = 'fallback')}),
	'0', 'carried: no row of those keys waits');

# ---------------------------------------------------------------------
# 3. Across an outage: frozen and thawed.
# ---------------------------------------------------------------------
{
	my $dir = PostgreSQL::Test::Utils::tempdir('allfb');
	my @files;
	foreach my $algo (@algos)
	{
		my $f = "$dir/outage_$algo.sql";
		open(my $fh, '>', $f) or die "cannot write $f: $!";
		print $fh script('outage', $algo, undef);
		close $fh;
		push @files, '-f', $f;
	}
	my ($out, $err) = ('', '');
	my @cmd = ('pgbench', '-n', '-c', 8, '-j', 2, '-T', 6, '-R', 200, @files,
		'-h', $node->host, '-p', $node->port, 'postgres');
	note("running: @cmd");
	my $t0 = time;
	my $h  = IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	usleep(2_000_000);
	$redis->freeze;
	usleep(2_000_000);
	$redis->thaw;
	$h->finish;
	note(sprintf('frozen from +2 s to +4 s of a run that took %.1f s', time - $t0));
	note("pgbench stdout:\n$out");
	is($h->full_result(0) >> 8, 0, 'outage: pgbench exits 0') or diag($err);
	like($out, qr/^number of failed transactions: 0 \(/m, 'outage: 0 failed transactions');

	my %admitted_units;
	foreach my $algo (@algos)
	{
		is(all_or_none('outage', $algo), '0', "outage, $algo: every call admitted all its keys or none");
		my ($fb) = calls_by('outage', $algo, 'fallback');
		my ($rd) = calls_by('outage', $algo, 'redis');
		cmp_ok($fb, '>', 0, "outage, $algo: the fallback store admitted $fb calls");
		cmp_ok($rd, '>', 0, "outage, $algo: Redis admitted $rd calls");
		foreach my $row (per_key('outage', $algo))
		{
			my ($k, $lim, $units, $fbu) = @$row;
			cmp_ok($units, '<=', bound($algo, $lim),
				"outage, $algo: $k: $units units admitted ($fbu by the fallback store), within lim $lim");
			$admitted_units{$algo}{$k} = $units;
		}
	}
	# Redis holds every unit either store admitted. It may hold more: a
	# script that timed out while Redis was frozen runs when it wakes, and
	# its caller had the fallback store's answer (an over-count,
	# doc/failure-modes.md); at most 4 keys x 3 units per timeout, over
	# every algorithm. And token_bucket's carry adds how far the fallback
	# store's bucket stood ahead, which it took from where Redis's stood:
	# Redis's own units before the outage then count twice, by design
	# (stricter than one store), so its excess is not bounded here.
	my $extra = 0;
	foreach my $algo (@algos)
	{
		my %outage_redis = carried_units('outage', $algo);
		foreach my $k (sort keys %{ $admitted_units{$algo} })
		{
			cmp_ok($outage_redis{$k}, '>=', $admitted_units{$algo}{$k},
				"outage, $algo: Redis counts $outage_redis{$k} units of $k, at least what both stores admitted ($admitted_units{$algo}{$k})");
			$extra += $outage_redis{$k} - $admitted_units{$algo}{$k} unless $algo eq 'token_bucket';
		}
	}
	my $timeouts = $node->safe_psql('postgres', q{SELECT redis_timeouts FROM rl_stats});
	cmp_ok($extra, '<=', 12 * $timeouts,
		"outage: Redis's $extra units more than the admissions (sliding_log, fixed_window, sliding_counter) are at most those of the $timeouts timed-out commands");
	my ($seeded, $carried, $pending) = split /\|/, $node->safe_psql('postgres',
		q{SELECT outage_seeded_units, outage_carried, outage_carry_pending FROM rl_stats});
	cmp_ok($seeded, '>', 0, "outage: units the fallback store started from ($seeded)");
	cmp_ok($carried, '>', 0, "outage: admissions carried back into Redis ($carried)");
	is($pending, '0', 'outage: none waits to be carried back');
}

# ---------------------------------------------------------------------
# 4. A call on its way to Redis (held up by CLIENT PAUSE) over keys this
#    server never had an answer for, 'w1' and 'w2' (lim 1): a fallback call
#    of either key meanwhile counts it as admitted, each key for itself, so
#    none is admitted by the fallback store; Redis then admits the call.
# ---------------------------------------------------------------------
{
	my $q = q{SELECT string_agg(key || ':' || store || ',' || allowed, ' ' ORDER BY key)
	            FROM rl_attempt_all_rows(ARRAY['w1', 'w2'], ARRAY[1, 1],
	                                     ARRAY['1 minute', '1 minute']::interval[])};
	my $fb = q{SET slidewin.redis_url = 'redis://127.0.0.1:1'; };
	$redis->pause_ms(5000);
	my $a = $node->background_psql('postgres', on_error_stop => 0);
	$a->query_safe("SET slidewin.command_timeout = '20s'");
	$a->{stdin} .= "$q;\n";
	$a->{run}->pump_nb;
	$node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM pg_stat_activity
		WHERE query LIKE '%rl_attempt_all_rows(ARRAY[''w1''%' AND state = 'active'
		  AND pid <> pg_backend_pid()})
	  or die 'the call on its way to Redis did not start';
	usleep(200_000);
	is($node->safe_psql('postgres', $fb . q{
		SELECT (r).store || ',' || (r).allowed
		  FROM (SELECT rl_attempt('w2', 1, '1 minute', on_redis_error => 'fallback') r) s}),
		'fallback,false', 'in flight: a fallback call of the second key counts the call on its way to Redis');
	is($node->safe_psql('postgres', $fb . q{
		SELECT rl_allow_all(ARRAY['w1'], ARRAY[1], ARRAY['1 minute']::interval[],
		                    on_redis_error => 'fallback')}),
		'f', 'in flight: a fallback rl_attempt_all of the first key counts it too');
	$redis->cli('client', 'unpause');
	like($a->query_safe("SELECT 'done'"), qr/^w1:redis,true w2:redis,true\ndone$/,
		'in flight: Redis admits the call');
	$a->quit;
	is($node->safe_psql('postgres', q{SELECT count(*) FROM rl_fallback_log
		WHERE key IN (current_setting('slidewin.key_prefix') || 'w1', current_setting('slidewin.key_prefix') || 'w2')}),
		'0', 'in flight: the fallback store admitted none of them');
}

done_testing();
