# rl_attempt_all under concurrency, on one Redis: 8 pgbench clients, each
# call over 2 to 4 keys drawn from 6 overlapping ones, each key with its own
# limit, each call with its own cost per key. Every call's rows are kept
# (rl_attempt_all_rows), and afterwards, for every key:
#   - a call's keys were all admitted or all denied;
#   - the key's Redis log holds one entry per call admitted as a whole that
#     named it, and its units are the sum of that key's costs over those
#     calls (so a denied call charged nothing);
#   - no window of the key's length holds more than its limit, from the
#     admissions' own times and from the entries left in the Redis log.
# Then the same over other keys for each counting algorithm (fixed_window,
# sliding_counter, token_bucket), in a window of a day: all or none, at
# most the limit admitted, and for the two that count (fixed_window,
# sliding_counter) the key's count in Redis is the admitted calls' costs.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
# Every call asks for on_redis_error => 'error': a connection or command
# that a loaded machine (CI's sanitize and Valkey passes) makes slower than
# the default timeouts would abort pgbench, and this file is about what Redis
# decides, not about timeouts (011 and 021 are).
my $node  = SlidewinTest::new_node('all', $redis,
	[ "slidewin.connect_timeout = '2s'", "slidewin.command_timeout = '2s'" ]);

$node->safe_psql('postgres', q{
	CREATE TABLE keys (k text PRIMARY KEY, l bigint, phase text);
	INSERT INTO keys SELECT p || i, 20 + 7 * i, CASE p WHEN 'k' THEN 'long' WHEN 's' THEN 'short'
	                                               WHEN 'f' THEN 'fixed_window' WHEN 'c' THEN 'sliding_counter'
	                                               ELSE 'token_bucket' END
	  FROM generate_series(1, 6) i, unnest(ARRAY['k', 's', 'f', 'c', 't']) p;
	CREATE SEQUENCE calls;
	CREATE TABLE outcome (call bigint, phase text, k text, cost bigint, allowed boolean,
	                      at timestamptz, win interval);
});

# One call: 2 to 4 distinct keys in random order, a cost of 1 to 3 each.
sub script
{
	my ($phase, $win, $algo) = @_;
	$algo //= 'sliding_log';
	return qq{
		\\set n random(2, 4)
		WITH pick AS MATERIALIZED (
		       SELECT k, l, (1 + floor(random() * 3))::bigint AS c
		         FROM keys WHERE phase = '$phase' ORDER BY random() LIMIT :n),
		     arr AS (SELECT array_agg(k ORDER BY k) ks, array_agg(l ORDER BY k) ls,
		                    array_agg(c ORDER BY k) cs FROM pick),
		     id AS (SELECT nextval('calls') AS call)
		INSERT INTO outcome
		SELECT id.call, '$phase', r.key, pick.c, r.allowed, r.reset_at - r.win, r.win
		  FROM arr, id,
		       rl_attempt_all_rows(arr.ks, arr.ls, array_fill('$win'::interval, ARRAY[:n]),
		                           arr.cs, on_redis_error => 'error', algorithm => '$algo') r
		  JOIN pick ON pick.k = r.key;
	};
}

# Phase 1: a window of an hour, so that the Redis log keeps every entry.
$node->pgbench('-n -c 8 -j 2 -t 150', 0, [qr{processed: 1200/1200}], [qr{^$}],
	'8 clients x 150 calls over 2-4 of 6 keys, 1 hour windows',
	{ '014_long' => script('long', '1 hour') });

# Phase 2: other keys, a window of 2 s that many calls cross. Their logs
# are read at once, before they expire (2 s after their newest entry).
$node->pgbench('-n -c 8 -j 2 -T 5', 0, [qr{processed: [1-9]}], [qr{^$}],
	'8 clients for 5 s over 2-4 of 6 keys, 2 s windows',
	{ '014_short' => script('short', '2 seconds') });
my %short_log = map { ($_ => [ redis_log($_, 1) ]) } map { "s$_" } 1 .. 6;

is($node->safe_psql('postgres', q{
	SELECT count(*) FROM (SELECT call FROM outcome GROUP BY call
	                      HAVING bool_or(allowed) <> bool_and(allowed)) s}),
	'0', 'every call admitted all its keys or none');
my ($admitted, $denied) = split /\|/, $node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE a), count(*) FILTER (WHERE NOT a)
	  FROM (SELECT bool_and(allowed) a FROM outcome WHERE phase = 'long' GROUP BY call) s});
cmp_ok($admitted, '>', 10, "phase 1: $admitted calls admitted");
cmp_ok($denied, '>', 100, "phase 1: $denied calls denied (the keys filled up)");

# The Redis log of a key: [score, units] per entry, the first entry's units
# unknown when it is the base an earlier trim kept (undef).
sub redis_log
{
	my ($k, $trimmed) = @_;
	my @e = split /\n/, scalar $redis->cli('zrange', "slidewin:log:$k", '0', '-1', 'withscores');
	my (@log, $prev);
	for (my $i = 0; $i < @e; $i += 2)
	{
		my ($total, $score) = @e[ $i, $i + 1 ];
		push @log, [ $score, defined $prev ? $total - $prev : ($trimmed ? undef : $total) ];
		$prev = $total;
	}
	return @log;
}

foreach my $row (split /\n/, $node->safe_psql('postgres', "SELECT k, l FROM keys WHERE phase = 'long' ORDER BY k"))
{
	my ($k, $lim) = split /\|/, $row;

	# phase 1: every admitted call is in the log, and nothing else
	my ($n, $units) = split /\|/, $node->safe_psql('postgres', qq{
		SELECT count(*), coalesce(sum(cost), 0) FROM outcome
		 WHERE phase = 'long' AND k = '$k' AND allowed});
	my @log = redis_log($k, 0);
	is(scalar @log, $n, "$k: $n admitted calls, $n entries in the Redis log");
	my $sum = 0;
	$sum += $_->[1] for @log;
	is($sum, $units, "$k: the log's units ($sum) are the admitted calls' costs ($units)");
	cmp_ok($units, '<=', $lim, "$k: $units units within lim $lim in the hour");
}

# phase 2: no 2 s stretch of any key holds more than its limit
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM (
	  SELECT a.k, (SELECT sum(b.cost) FROM outcome b
	                WHERE b.phase = 'short' AND b.allowed AND b.k = a.k
	                  AND b.at > a.at - interval '2 seconds' AND b.at <= a.at) AS w, keys.l
	    FROM outcome a JOIN keys ON keys.k = a.k
	   WHERE a.phase = 'short' AND a.allowed) s
	 WHERE w > l}),
	'0', 'phase 2: no 2 s window of any key holds more than its limit');
my ($short_admitted) = $node->safe_psql('postgres', q{
	SELECT count(DISTINCT call) FROM outcome WHERE phase = 'short' AND allowed});
cmp_ok($short_admitted, '>', 50, "phase 2: $short_admitted calls admitted");

# ... and what phase 2 left in each Redis log (its last window, after the
# base an earlier trim kept) is made of admitted calls, each entry at its
# admission's time with its cost, and holds at most the key's limit.
my $unmatched = 0;
my $entries   = 0;
my $over = 0;
foreach my $row (split /\n/, $node->safe_psql('postgres', "SELECT k, l FROM keys WHERE phase = 'short' ORDER BY k"))
{
	my ($k, $lim) = split /\|/, $row;
	my $live = 0;
	my %adm = map { my ($at, $c) = split /\|/; ($at => $c) } split /\n/,
	  $node->safe_psql('postgres', qq{
		SELECT ((extract(epoch FROM at) * 1000000)::bigint)::text, cost FROM outcome
		 WHERE phase = 'short' AND k = '$k' AND allowed});
	my @log = @{ $short_log{$k} };
	foreach my $e (@log)
	{
		next unless defined $e->[1];
		$entries++;
		$live += $e->[1] if $e->[0] > $log[-1][0] - 2000000;
		$unmatched++ unless defined $adm{ $e->[0] } && $adm{ $e->[0] } == $e->[1];
	}
	$over++ if $live > $lim;
}
cmp_ok($entries, '>', 0, "phase 2: $entries entries left in the Redis logs");
is($unmatched, 0, 'phase 2: every entry left in a Redis log is an admitted call, at its time, with its cost');
is($over, 0, 'phase 2: the last window of each Redis log holds at most its limit');

# Phase 3: the counting algorithms, one after the other, a window of a day.
# A day's window starts at midnight UTC: should a run cross one, the counts
# start anew in Redis, and only the checks that do not read them are made.
my $day_us = 86_400_000_000;
my %tag = (fixed_window => 'fw', sliding_counter => 'sc', token_bucket => 'tb');
foreach my $algo (qw(fixed_window sliding_counter token_bucket))
{
	my $day0 = int($node->safe_psql('postgres', q{SELECT extract(epoch FROM clock_timestamp())::bigint}) / 86400);
	$node->pgbench('-n -c 8 -j 2 -t 60', 0, [qr{processed: 480/480}], [qr{^$}],
		"$algo: 8 clients x 60 calls over 2-4 of 6 keys, 1 day windows",
		{ "014_$algo" => script($algo, '1 day', $algo) });
	my $day1 = int($node->safe_psql('postgres', q{SELECT extract(epoch FROM clock_timestamp())::bigint}) / 86400);

	is($node->safe_psql('postgres', qq{
		SELECT count(*) FROM (SELECT call FROM outcome WHERE phase = '$algo' GROUP BY call
		                      HAVING bool_or(allowed) <> bool_and(allowed)) s}),
		'0', "$algo: every call admitted all its keys or none");
	my ($adm, $den) = split /\|/, $node->safe_psql('postgres', qq{
		SELECT count(*) FILTER (WHERE a), count(*) FILTER (WHERE NOT a)
		  FROM (SELECT bool_and(allowed) a FROM outcome WHERE phase = '$algo' GROUP BY call) s});
	cmp_ok($adm, '>', 10, "$algo: $adm calls admitted");
	cmp_ok($den, '>', 100, "$algo: $den calls denied (the keys filled up)");
	foreach my $row (split /\n/, $node->safe_psql('postgres', "SELECT k, l FROM keys WHERE phase = '$algo' ORDER BY k"))
	{
		my ($k, $lim) = split /\|/, $row;
		my $units = $node->safe_psql('postgres', qq{
			SELECT coalesce(sum(cost), 0) FROM outcome WHERE phase = '$algo' AND k = '$k' AND allowed});
		# a token bucket refills lim units a day: well under one in the run
		cmp_ok($units, '<=', $lim, "$algo, $k: $units units admitted, within lim $lim");
		next if $algo eq 'token_bucket';
		SKIP:
		{
			skip "$algo, $k: the run crossed midnight UTC, the counts started anew", 1
			  if $day0 != $day1;
			my $count = $redis->cli('hget', "slidewin:$tag{$algo}:$k", $algo eq 'fixed_window' ? 'n' : 'c');
			chomp $count;
			is($count, $units, "$algo, $k: the count in Redis ($count) is the admitted calls' costs ($units)");
		}
	}
}

done_testing();
