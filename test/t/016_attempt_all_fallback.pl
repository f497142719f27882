# rl_attempt_all in the fallback store and across an outage, under 8 pgbench
# clients, each call over 2 to 4 keys drawn from 6 overlapping ones and
# named in a random order (so that two calls often name shared keys in
# opposite orders), each key with its own limit and each call with its own
# cost per key, in windows of an hour (so that a key's units are all its
# admissions).
#
#  1. Redis cannot answer (a closed port): the fallback store decides every
#     call. No call fails (no deadlock, no statement_timeout of 5 s); each
#     call's keys were all admitted or all denied; each key's fallback log
#     and its rows waiting for Redis hold exactly the costs of the calls
#     admitted as a whole that named it, at most its limit.
#  2. Redis answers again: one call over the six keys (which one more key,
#     full, denies) carries every key's rows into Redis before Redis
#     decides; Redis then counts exactly the units the fallback store
#     admitted of each key, and nothing waits to be carried.
#  3. Redis frozen (SIGSTOP) for 2 s in the middle of 6 s of paced calls,
#     then thawed: each key's admissions from both stores hold at most its
#     limit (the fallback store started from each key's count in Redis, and
#     Redis learned of each key's fallback admissions before it decided
#     again); and once carried, Redis counts every unit either store
#     admitted of each key (and, from scripts that timed out while it was
#     frozen and ran when it woke, at most those scripts' units more).
#  4. a call on its way to Redis, held up by CLIENT PAUSE: a fallback call of
#     any of its keys meanwhile counts it as admitted.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
my $node  = SlidewinTest::new_node('allfb', $redis,
	[ "shared_preload_libraries = 'slidewin'", "slidewin.redis_retry_interval = '200ms'" ]);

$node->safe_psql('postgres', q{
	CREATE TABLE keys (k text PRIMARY KEY, l bigint, phase text);
	INSERT INTO keys SELECT 'f' || i, 20 + 7 * i, 'fallback' FROM generate_series(1, 6) i;
	INSERT INTO keys SELECT 'o' || i, 150 + 50 * i, 'outage' FROM generate_series(1, 6) i;
	CREATE SEQUENCE calls;
	CREATE TABLE outcome (call bigint, phase text, k text, cost bigint, allowed boolean, store text);
});

# One call: 2 to 4 distinct keys in a random order, a cost of 1 to 3 each.
sub script
{
	my ($phase, $url) = @_;
	my $set = $url ? "SET slidewin.redis_url = '$url';" : '';
	return qq{
		SET statement_timeout = '5s';
		$set
		\\set n random(2, 4)
		WITH pick AS MATERIALIZED (
		       SELECT k, l, (1 + floor(random() * 3))::bigint AS c, random() AS o
		         FROM keys WHERE phase = '$phase' ORDER BY random() LIMIT :n),
		     arr AS (SELECT array_agg(k ORDER BY o) ks, array_agg(l ORDER BY o) ls,
		                    array_agg(c ORDER BY o) cs FROM pick),
		     id AS (SELECT nextval('calls') AS call)
		INSERT INTO outcome
		SELECT id.call, '$phase', r.key, pick.c, r.allowed, r.store
		  FROM arr, id,
		       rl_attempt_all_rows(arr.ks, arr.ls, array_fill('1 hour'::interval, ARRAY[:n]),
		                           arr.cs, on_redis_error => 'fallback') r
		  JOIN pick ON pick.k = r.key;
	};
}

sub all_or_none
{
	my ($phase) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*) FROM (SELECT call FROM outcome WHERE phase = '$phase' GROUP BY call
		                      HAVING bool_or(allowed) <> bool_and(allowed)) s});
}

# Per key: lim, the units admitted as a whole (from the outcome table), the
# units in the fallback log and in the carry table.
sub per_key
{
	my ($phase) = @_;
	return map { [ split /\|/ ] } split /\n/, $node->safe_psql('postgres', qq{
		SELECT keys.k, keys.l,
		       (SELECT coalesce(sum(cost), 0) FROM outcome o WHERE o.k = keys.k AND o.allowed),
		       (SELECT coalesce(sum(cost), 0) FROM outcome o WHERE o.k = keys.k AND o.allowed
		                                                   AND o.store = 'fallback'),
		       (SELECT coalesce(sum(cost), 0) FROM rl_fallback_log f
		         WHERE f.key = current_setting('slidewin.key_prefix') || keys.k),
		       (SELECT coalesce(sum(cost), 0) FROM rl_fallback_carry f
		         WHERE f.key = current_setting('slidewin.key_prefix') || keys.k)
		  FROM keys WHERE phase = '$phase' ORDER BY keys.k});
}

# One call over the phase's keys that the key 'full' denies: every key's
# rows are carried into Redis first, and nothing is charged. Then each
# key's units in Redis, by rl_peek.
sub carried_units
{
	my ($phase) = @_;
	$node->safe_psql('postgres', q{
		SELECT rl_reset('full');
		SELECT rl_attempt('full', 1, '1 hour', on_redis_error => 'error');
	});
	my $r = $node->safe_psql('postgres', qq{
		SELECT count(*) FILTER (WHERE allowed), count(*) FILTER (WHERE store = 'redis')
		  FROM rl_attempt_all_rows(
		         (SELECT array_agg(k ORDER BY k) FROM keys WHERE phase = '$phase') || 'full'::text,
		         (SELECT array_agg(l ORDER BY k) FROM keys WHERE phase = '$phase') || 1::bigint,
		         array_fill('1 hour'::interval, ARRAY[7]), on_redis_error => 'error')});
	is($r, '0|7', "$phase: a call over the keys that 'full' denies, decided by Redis");
	return map { split /\|/ } split /\n/, $node->safe_psql('postgres', qq{
		SELECT k, l - (rl_peek(k, l, '1 hour')).remaining FROM keys WHERE phase = '$phase'});
}

# ---------------------------------------------------------------------
# 1. The fallback store alone.
# ---------------------------------------------------------------------
$node->pgbench('-n -c 8 -j 2 -t 100', 0, [qr{processed: 800/800}], [qr{^$}],
	'fallback: 8 clients x 100 calls over 2-4 of 6 keys in random orders, none fails',
	{ '016_fallback' => script('fallback', 'redis://127.0.0.1:1') });

is(all_or_none('fallback'), '0', 'fallback: every call admitted all its keys or none');
my ($admitted, $denied) = split /\|/, $node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE a), count(*) FILTER (WHERE NOT a)
	  FROM (SELECT bool_and(allowed) a, bool_and(store = 'fallback') f FROM outcome
	         WHERE phase = 'fallback' GROUP BY call) s WHERE f});
cmp_ok($admitted, '>', 10, "fallback: $admitted calls admitted by the fallback store");
cmp_ok($denied, '>', 100, "fallback: $denied calls denied by it (the keys filled up)");
my %fallback_units;
foreach my $row (per_key('fallback'))
{
	my ($k, $lim, $units, $fb, $logged, $waiting) = @$row;
	is($logged, $units, "fallback: $k: the fallback log holds $logged units, the admitted calls' costs ($units)");
	is($waiting, $units, "fallback: $k: $waiting units wait to be carried into Redis");
	cmp_ok($units, '<=', $lim, "fallback: $k: $units units within lim $lim");
	$fallback_units{$k} = $units;
}

# ---------------------------------------------------------------------
# 2. Redis answers again: every key's units are carried into it.
# ---------------------------------------------------------------------
my %in_redis = carried_units('fallback');
foreach my $k (sort keys %fallback_units)
{
	is($in_redis{$k}, $fallback_units{$k},
		"carried: Redis counts $in_redis{$k} units of $k, what the fallback store admitted ($fallback_units{$k})");
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM rl_fallback_carry
	   WHERE key IN (SELECT current_setting('slidewin.key_prefix') || k FROM keys WHERE phase = 'fallback')}),
	'0', 'carried: no row of those keys waits');

# ---------------------------------------------------------------------
# 3. Across an outage: frozen and thawed.
# ---------------------------------------------------------------------
{
	my $dir    = PostgreSQL::Test::Utils::tempdir('allfb');
	my $script = "$dir/outage.sql";
	open(my $fh, '>', $script) or die "cannot write $script: $!";
	print $fh script('outage', undef);
	close $fh;
	my ($out, $err) = ('', '');
	my @cmd = ('pgbench', '-n', '-c', 8, '-j', 2, '-T', 6, '-R', 150, '-f', $script,
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

	is(all_or_none('outage'), '0', 'outage: every call admitted all its keys or none');
	my ($fb, $rd) = split /\|/, $node->safe_psql('postgres', q{
		SELECT count(DISTINCT call) FILTER (WHERE store = 'fallback'),
		       count(DISTINCT call) FILTER (WHERE store = 'redis')
		  FROM outcome WHERE phase = 'outage' AND allowed});
	cmp_ok($fb, '>', 0, "outage: the fallback store admitted $fb calls");
	cmp_ok($rd, '>', 0, "outage: Redis admitted $rd calls");

	my %admitted_units;
	foreach my $row (per_key('outage'))
	{
		my ($k, $lim, $units, $fbu) = @$row;
		cmp_ok($units, '<=', $lim,
			"outage: $k: $units units admitted ($fbu by the fallback store), within lim $lim");
		$admitted_units{$k} = $units;
	}
	# Redis holds every unit either store admitted. It may hold more: a
	# script that timed out while Redis was frozen runs when it wakes, and
	# its caller had the fallback store's answer (an over-count,
	# doc/failure-modes.md); at most 4 keys x 3 units per timeout.
	my %outage_redis = carried_units('outage');
	my $extra = 0;
	foreach my $k (sort keys %admitted_units)
	{
		cmp_ok($outage_redis{$k}, '>=', $admitted_units{$k},
			"outage: Redis counts $outage_redis{$k} units of $k, at least what both stores admitted ($admitted_units{$k})");
		$extra += $outage_redis{$k} - $admitted_units{$k};
	}
	my $timeouts = $node->safe_psql('postgres', q{SELECT redis_timeouts FROM rl_stats});
	cmp_ok($extra, '<=', 12 * $timeouts,
		"outage: Redis's $extra units more than the admissions are at most those of the $timeouts timed-out commands");
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
