# rl_attempt_all on a 3-master Redis Cluster with keys in different hash
# slots: reserved on each slot's master, then confirmed or cancelled
# (src/store/redis/store_redis_xslot.c).
#
#  - keys in different slots are admitted all or none, and a denial by one
#    key leaves the others uncharged;
#  - confirmed entries are ordinary entries: refund_on_abort gives them back;
#  - a reservation counts for a concurrent rl_attempt of its key while it
#    lives (slidewin.test_pause_lock holds the call between the two steps);
#  - a backend killed between the steps leaves a reservation that stops
#    counting within its life (1 s + 2 x command_timeout per slot);
#  - a confirm that comes after the reservation ended, and was given back,
#    fails the call and charges no key;
#  - a confirm that cannot reach its master (frozen) after another slot
#    confirmed fails the call: the confirmed slot is given back at once, and
#    no reservation on the frozen master outlives its life;
#  - the counting algorithms (fixed_window, sliding_counter, token_bucket)
#    the same way: their reservations, a hash next to each key's state, are
#    confirmed into the state or cancelled at once; a paused call's
#    reservation counts for rl_attempt, rl_peek and a one-slot
#    rl_attempt_all; a killed backend's stops counting within its life;
#  - 8 pgbench clients, calls over 2-4 keys of 6 in different slots mixed
#    with single-key rl_attempt calls of the same keys: every call all or
#    none, no key over its limit, each key's units the sum of the admitted
#    calls' costs; for the sliding log, then for each counting algorithm
#    (these on the test clock, one window).
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest qw(sqlstate);

# node_timeout 10 s: a master frozen below for a second is not failed over
my $cluster = SlidewinTest::start_cluster(masters => 3, replicas => 0, node_timeout => 10000);
my $url     = $cluster->{url};

my $node = SlidewinTest::new_node('xslot', undef,
	[ "slidewin.redis_url = '$url'", 'slidewin.redis_retry_interval = 0',
	  "shared_preload_libraries = 'slidewin'", 'max_connections = 40',
	  # the load below asks for on_redis_error => 'error': a first connection
	  # slowed by a loaded machine must not abort pgbench (command_timeout,
	  # which sets the reservations' life, stays the default)
	  "slidewin.connect_timeout = '2s'" ]);

sub run_sql { return SlidewinTest::node_sql($node, @_) }

# the eight hex digits of the key's Cluster hash tag
sub fnv { return substr(SlidewinTest::cluster_tag($_[0]), 1, 8) }
sub logkey { my ($k) = @_; return 'slidewin:{' . fnv($k) . "}log:$k" }

my @masters = SlidewinTest::cluster_masters($cluster);
sub slot_of { return scalar $masters[0]->cli('cluster', 'keyslot', logkey($_[0])) }

# Units charged to a key in its hour window, as rl_peek counts them.
sub units
{
	my ($k, $lim) = @_;
	my $rem = $node->safe_psql('postgres', "SELECT (rl_peek('$k', $lim, '1 hour')).remaining");
	return $lim - $rem;
}

# Reservations still held in a key's ledger (members scored +inf), read
# straight from Redis (a script would give back the ended ones first).
sub held
{
	my ($k) = @_;
	my $lk = 'slidewin:{' . fnv($k) . "}logr:$k";
	my $n = 0;
	for my $m (@masters)
	{
		my $c = scalar $m->cli('zcount', $lk, '+inf', '+inf');
		$n += $c if $c =~ /^\d+$/;
	}
	return $n;
}

my @abc = qw(xa xb xc);
my %slots = map { (slot_of($_) => 1) } @abc;
is(scalar keys %slots, 3, 'the three keys lie in three different hash slots');

# ---------------------------------------------------------------------
# All or none
# ---------------------------------------------------------------------
my $call = q{SELECT allowed, key FROM rl_attempt_all_rows(ARRAY['xa','xb','xc'], ARRAY[5,3,8],
	ARRAY['1 hour','1 hour','1 hour']::interval[], ARRAY[1,1,2], on_redis_error => 'error')};
for my $i (1 .. 3)
{
	my ($o, $e) = run_sql($call);
	is($o, "t|xa\nt|xb\nt|xc", "call $i over three slots: every key admitted");
	is($e, '', "call $i: no error");
}
is(join(',', units('xa', 5), units('xb', 3), units('xc', 8)), '3,3,6',
	'three calls charged each key its cost three times');
my ($o, $e) = run_sql($call);
is($o, "f|xa\nf|xb\nf|xc", 'call 4: xb is full, no key admitted');
is(held('xa') + held('xc'), 0, 'the reservations of xa and xc were removed at once');
($o, $e) = run_sql(q{SELECT allowed, lim FROM rl_attempt_all(ARRAY['xa','xb','xc'], ARRAY[5,3,8],
	ARRAY['1 hour','1 hour','1 hour']::interval[], ARRAY[1,1,2], on_redis_error => 'error')});
is($o, 'f|3', 'rl_attempt_all: denied, by xb (lim 3)');
is(join(',', units('xa', 5), units('xb', 3), units('xc', 8)), '3,3,6',
	'the denied calls charged no key: xa and xc, which had room, were given back');
($o, $e) = run_sql(q{SELECT allowed FROM rl_attempt_all_rows(ARRAY['xa','xc'], ARRAY[5,8],
	ARRAY['1 hour','1 hour']::interval[], ARRAY[2,2], on_redis_error => 'error')});
is($o, "t\nt", 'xa and xc still have the room the denied calls reserved and gave back');
is(join(',', units('xa', 5), units('xc', 8)), '5,8', 'xa and xc are now full');

# The counting algorithms: a reservation is a field of a hash next to the
# key's state (counter_args.lua), counted by every reader while it lives;
# confirmed, its units go into the state; cancelled, they are given back.
my %tag = (fixed_window => 'fw', sliding_counter => 'sc', token_bucket => 'tb');
# The counting algorithms' window in the sections below: a whole number of
# hours whose aligned window (fixed_window's and sliding_counter's buckets)
# holds the whole section, set before each. A window of one hour turned
# while a section ran once, at 19:00:00 UTC: a fixed window's reservation
# made in the hour before stops counting at the turn, as its units would.
our $cwin = '1 hour';
sub cunits
{
	my ($k, $lim, $algo) = @_;
	my $rem = $node->safe_psql('postgres',
		"SELECT (rl_peek('$k', $lim, '$cwin', algorithm => '$algo')).remaining");
	return $lim - $rem;
}
# Reservations held for a key, read straight from Redis.
sub cheld
{
	my ($k, $algo) = @_;
	my $rk = 'slidewin:{' . fnv($k) . "}$tag{$algo}r:$k";
	my $n = 0;
	for my $m (@masters)
	{
		my $c = scalar $m->cli('hlen', $rk);
		$n += $c if $c =~ /^\d+$/;
	}
	return $n;
}

# cend($k, $algo): when the reservation of key $k ends (Redis time, in
# seconds), from its field 'end:cost:bucket'; undef when it holds none. Redis
# runs on this machine, so its time is this script's.
sub cend
{
	my ($k, $algo) = @_;
	my $rk = 'slidewin:{' . fnv($k) . "}$tag{$algo}r:$k";
	for my $m (@masters)
	{
		my @v = grep { /^\d+:/ } split /\n/, scalar $m->cli('hvals', $rk);
		return (split /:/, $v[0])[0] / 1e6 if @v;
	}
	return undef;
}
isnt(slot_of('ca'), slot_of('cb'), 'ca and cb lie in different slots');
foreach my $algo (qw(fixed_window sliding_counter token_bucket))
{
	$cwin = SlidewinTest::aligned_window(60, 3600) . ' seconds';
	my $c2 = qq{SELECT allowed, key FROM rl_attempt_all_rows(ARRAY['ca','cb'], ARRAY[4,4],
		ARRAY['$cwin','$cwin']::interval[], ARRAY[1,2], algorithm => '$algo', on_redis_error => 'error')};
	($o, $e) = run_sql($c2);
	is($o, "t|ca\nt|cb", "$algo over two slots: both keys admitted");
	is($e, '', "$algo: no error");
	is(cunits('ca', 4, $algo) . ',' . cunits('cb', 4, $algo), '1,2', "$algo: each key charged its cost");
	is(cheld('ca', $algo) + cheld('cb', $algo), 0, "$algo: the reservations were confirmed, none is left");
	# cb has 2 left; the call asks 1 of ca and 2 of cb twice: the second denies
	($o) = run_sql($c2);
	is($o, "t|ca\nt|cb", "$algo: a second call fills cb");
	($o, $e) = run_sql($c2);
	is($o, "f|ca\nf|cb", "$algo: cb full, no key admitted");
	is(cunits('ca', 4, $algo), 2, "$algo: the cancel gave ca its reserved unit back at once");
	is(cheld('ca', $algo), 0, "$algo: and left no reservation");
	($o) = run_sql(qq{SELECT allowed FROM rl_attempt('ca', 4, '$cwin', 2, algorithm => '$algo', on_redis_error => 'error')});
	is($o, 't', "$algo: ca still has the 2 units the denied call reserved and gave back");
}

# A confirmed reservation is an ordinary entry: refund_on_abort gives it back.
isnt(slot_of('ra'), slot_of('rb'), 'ra and rb lie in different slots');
($o, $e) = run_sql(q{BEGIN;
	SELECT allowed FROM rl_attempt_all(ARRAY['ra','rb'], ARRAY[4,4],
	  ARRAY['1 hour','1 hour']::interval[], ARRAY[3,1], refund_on_abort => true);
	ROLLBACK;});
is($o, 't', 'admitted inside a transaction');
is(join(',', units('ra', 4), units('rb', 4)), '0,0', 'ROLLBACK gave every key its units back');
($o) = run_sql(q{SELECT allowed FROM rl_attempt_all(ARRAY['ra','rb'], ARRAY[4,4],
	  ARRAY['1 hour','1 hour']::interval[], ARRAY[3,1])});
is($o, 't', 'and the keys admit the same call again');
is(join(',', units('ra', 4), units('rb', 4)), '3,1', 'charged once');

# ---------------------------------------------------------------------
# Between the two steps
# ---------------------------------------------------------------------
# A session holding pg_advisory_lock(4242) stops a call whose
# slidewin.test_pause_lock is 4242 after it reserved, before it confirms.
my $holder = $node->background_psql('postgres', on_error_stop => 0);
my $caller = $node->background_psql('postgres', on_error_stop => 0);
$holder->query_safe('SELECT pg_advisory_lock(4242)');
# command_timeout 1.5 s: the call's reservations over 2 slots live
# 1 + 2 x 2 x 1.5 = 7 s, long enough for the checks below to run inside it on
# a loaded machine (5 s once was not). The checks are timed from the
# reservation's end as Redis recorded it, not from when the call was sent.
$caller->query_safe('SET slidewin.test_pause_lock = 4242; SET slidewin.command_timeout = 1500');

sub start_paused_call
{
	my ($keys) = @_;
	$caller->{stdin} .= "SELECT allowed FROM rl_attempt_all_rows(ARRAY[$keys], ARRAY[1,1],
		ARRAY['1 hour','1 hour']::interval[], on_redis_error => 'error');\n";
	$caller->{run}->pump_nb;
	$node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE wait_event_type = 'Lock' AND query LIKE '%rl_attempt_all_rows%'})
	  or die 'the call did not pause';
}

# free_at($sql): poll $sql (a query answering t or f) in one session every
# 20 ms until it answers t. Returns when that answer came back, and when the
# last poll that still answered f was sent (a poll's own time, which a
# loaded machine can stretch to seconds, is not the reservation's); undef
# after 20 s. One session, not a psql per poll: a loaded machine took half a
# second to start each.
my $poller;
sub free_at
{
	my ($sql) = @_;
	$poller //= $node->background_psql('postgres', on_error_stop => 0);
	my ($t0, $last_f) = (time, undef);
	while (time - $t0 < 20)
	{
		my $sent = time;
		my $o = $poller->query_safe($sql);
		return (time, $last_f) if $o eq 't';
		$last_f = $sent;
		usleep(20_000);
	}
	return (undef, $last_f);
}

# lend($k): when the sliding log's reservation of key $k ends (Redis time,
# in seconds), from its ledger member 'end:score:cost' scored +inf; undef
# when it holds none.
sub lend
{
	my ($k) = @_;
	my $lk = 'slidewin:{' . fnv($k) . "}logr:$k";
	for my $m (@masters)
	{
		my @v = grep { /^\d+:/ } split /\n/, scalar $m->cli('zrangebyscore', $lk, '+inf', '+inf');
		return (split /:/, $v[0])[0] / 1e6 if @v;
	}
	return undef;
}

# A reservation counts for a concurrent rl_attempt of its key.
my $life = 1 + 2 * 2 * 1.5;
isnt(slot_of('ya'), slot_of('yb'), 'ya and yb lie in different slots');
isnt(slot_of('za'), slot_of('zb'), 'za and zb lie in different slots');
my $reserved = time;
start_paused_call(q{'ya','yb'});
($o) = run_sql(q{SELECT allowed FROM rl_attempt('ya', 1, '1 hour', on_redis_error => 'error')});
is($o, 'f', 'a reservation counts: rl_attempt of its key, concurrent, is denied');
($o) = run_sql(q{SELECT allowed FROM rl_peek('yb', 1, '1 hour', on_redis_error => 'error')});
is($o, 'f', 'and rl_peek sees it too');
my $checked = time;
is(held('ya') . ',' . held('yb'), '1,1', 'the paused call holds a reservation of each key');
my $end = lend('ya') // 0;
cmp_ok($checked, '<', $end, 'those two calls ended within the reservations\' life');
cmp_ok($end - $reserved, '>=', $life - 0.01, sprintf('which is %.1f s from the reserve on (it ends %.2f s after the call was sent)',
	$life, $end - $reserved));
cmp_ok($end - $reserved, '<', $life + 3, 'and the reserve ran soon after the call was sent');

# The backend dies between the two steps.
my $killed = time;
$node->safe_psql('postgres', q{
	SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	 WHERE query LIKE '%rl_attempt_all_rows%' AND pid <> pg_backend_pid()});
eval { $caller->quit; };
($o) = run_sql(q{SELECT allowed FROM rl_peek('ya', 1, '1 hour', on_redis_error => 'error')});
is($o, 'f', 'right after the kill, the reservation still counts');
my ($freed, $last_f) = free_at(q{SELECT allowed FROM rl_peek('ya', 1, '1 hour', on_redis_error => 'error')});
ok(defined $freed, 'the killed backend\'s reservation of ya stopped counting');
cmp_ok(($last_f // 0) - $end, '<', 0.05,
	sprintf('once its life of %.1f s had ended: no poll sent after its end still counted it (the last at %.2f s from its end; t came back %.2f s after it, %.2f s after the kill)',
		$life, ($last_f // 0) - $end, ($freed // 1e10) - $end, ($freed // 1e10) - $killed));
cmp_ok(($freed // 0) - $end, '>', -0.05, 'and not before');
($o) = run_sql(q{SELECT allowed FROM rl_attempt('yb', 1, '1 hour', on_redis_error => 'error')});
is($o, 't', 'yb\'s reservation ended too: its unit is free for rl_attempt');
($o) = run_sql(q{SELECT allowed FROM rl_attempt('ya', 1, '1 hour', on_redis_error => 'error')});
is($o, 't', 'and ya\'s');

# The same for the counting algorithms, with reservations that live
# 1 + 2 x 2 x 1.5 = 7 s (command_timeout 1.5 s). Each check is timed from the
# reservation's own end as Redis recorded it, not from when the call was
# sent: on a loaded machine the call and the checks around it take seconds.
foreach my $algo (qw(fixed_window sliding_counter token_bucket))
{
	$cwin = SlidewinTest::aligned_window(90, 3600) . ' seconds';
	my ($ka, $kb) = ("da_$algo", "db_$algo");
	isnt(slot_of($ka), slot_of($kb), "$ka and $kb lie in different slots");
	$caller = $node->background_psql('postgres', on_error_stop => 0);
	$caller->query_safe('SET slidewin.test_pause_lock = 4242; SET slidewin.command_timeout = 1500');
	my $clife = 7;
	my $t0 = time;
	$caller->{stdin} .= "SELECT allowed FROM rl_attempt_all_rows(ARRAY['$ka','$kb'], ARRAY[1,1],
		ARRAY['$cwin','$cwin']::interval[], algorithm => '$algo', on_redis_error => 'error');\n";
	$caller->{run}->pump_nb;
	$node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE wait_event_type = 'Lock' AND query LIKE '%rl_attempt_all_rows%'})
	  or die 'the call did not pause';
	($o) = run_sql(qq{SELECT allowed FROM rl_attempt('$ka', 1, '$cwin', algorithm => '$algo', on_redis_error => 'error')});
	is($o, 'f', "$algo: a reservation counts for a concurrent rl_attempt of its key");
	($o) = run_sql(qq{SELECT allowed FROM rl_peek('$kb', 1, '$cwin', algorithm => '$algo', on_redis_error => 'error')});
	is($o, 'f', "$algo: and for rl_peek");
	($o) = run_sql(qq{SELECT allowed FROM rl_attempt_all(ARRAY['$kb'], ARRAY[1],
		ARRAY['$cwin']::interval[], algorithm => '$algo', on_redis_error => 'error')});
	is($o, 'f', "$algo: and for a one-slot rl_attempt_all");
	my $checked = time;
	is(cheld($ka, $algo) . ',' . cheld($kb, $algo), '1,1', "$algo: the paused call holds a reservation of each key");
	my $end = cend($ka, $algo) // 0;
	cmp_ok($checked, '<', $end, "$algo: those three calls ended within the reservation's life");
	cmp_ok($end - $t0, '>=', $clife - 0.01, sprintf('%s: which is %.1f s from the reserve on (it ends %.2f s after the call was sent)',
		$algo, $clife, $end - $t0));
	cmp_ok($end - $t0, '<', $clife + 3, "$algo: and the reserve ran soon after the call was sent");
	$node->safe_psql('postgres', q{
		SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		 WHERE query LIKE '%rl_attempt_all_rows%' AND pid <> pg_backend_pid()});
	eval { $caller->quit; };
	my ($gone, $glast_f) = free_at(qq{SELECT allowed FROM rl_peek('$ka', 1, '$cwin', algorithm => '$algo', on_redis_error => 'error')});
	ok(defined $gone, "$algo: the killed backend's reservation stopped counting");
	cmp_ok(($glast_f // 0) - $end, '<', 0.05,
		sprintf('%s: once its life of %.1f s had ended: no poll sent after its end still counted it (the last at %.2f s from its end; t came back %.2f s after it)',
			$algo, $clife, ($glast_f // 0) - $end, ($gone // 1e10) - $end));
	cmp_ok(($gone // 0) - $end, '>', -0.05, "$algo: and not before");
	($o) = run_sql(qq{SELECT allowed FROM rl_attempt('$kb', 1, '$cwin', algorithm => '$algo', on_redis_error => 'error')});
	is($o, 't', "$algo: $kb\'s reservation ended too: its unit is free");
	is(cheld($kb, $algo), 0, "$algo: and the call that read $kb dropped it");
}

# A confirm that comes after its reservation ended and was given back (a
# peek read the key after its life) fails the call, and no key is charged.
$caller = $node->background_psql('postgres', on_error_stop => 0);
$caller->query_safe('SET slidewin.test_pause_lock = 4242; SET slidewin.command_timeout = 1500');
start_paused_call(q{'za','zb'});
usleep(int(($life + 0.3) * 1_000_000));
($o) = run_sql(q{SELECT allowed FROM rl_peek('za', 1, '1 hour', on_redis_error => 'error')});
is($o, 't', 'a reservation past its life no longer counts');
$holder->query_safe('SELECT pg_advisory_unlock(4242)');
($o, $e) = SlidewinTest::session_sql($caller, 'SELECT 1');
like($caller->{stderr} . $e, qr/ERROR:.*\n.*DETAIL:  a reservation of rl_attempt_all ended before it was confirmed/, 'the late confirm fails the call, saying why') or diag($o);
is(join(',', units('za', 1), units('zb', 1)), '0,0', 'and neither key is charged');
$caller->quit;
$holder->quit;

# A confirm that cannot reach its master after another slot confirmed: the
# call fails, the confirmed slot is given back at once, and the reservation
# on the master that did not answer ends by itself.
sub master_of
{
	my ($k) = @_;
	my $slot = slot_of($k);
	for my $line (split /\n/, scalar $masters[0]->cli('cluster', 'nodes'))
	{
		my @f = split / /, $line;
		next unless $f[2] =~ /master/;
		my ($port) = $f[1] =~ /:(\d+)/;
		for my $r (@f[ 8 .. $#f ])
		{
			my ($lo, $hi) = $r =~ /^(\d+)(?:-(\d+))?$/ or next;
			$hi //= $lo;
			return (grep { $_->port == $port } @masters)[0] if $slot >= $lo && $slot <= $hi;
		}
	}
	return undef;
}
my ($qa, $qb);
for my $i (1 .. 50)
{
	($qa, $qb) = ("qa$i", "qb$i");
	last if master_of($qa)->port != master_of($qb)->port;
}
isnt(master_of($qa)->port, master_of($qb)->port, "$qa and $qb are on different masters");
$holder = $node->background_psql('postgres', on_error_stop => 0);
$holder->query_safe('SELECT pg_advisory_lock(4242)');
$caller = $node->background_psql('postgres', on_error_stop => 0);
# 300 ms a command: the reservations live 1 + 2 x 2 x 0.3 = 2.2 s
$caller->query_safe('SET slidewin.test_pause_lock = 4242; SET slidewin.command_timeout = 300');
my $qlife = 2.2;
$reserved = time;
start_paused_call("'$qa','$qb'");
my $frozen = master_of($qb);
$frozen->freeze;
$holder->query_safe('SELECT pg_advisory_unlock(4242)');
($o, $e) = SlidewinTest::session_sql($caller, 'SELECT 1');
$frozen->thaw;
like($caller->{stderr} . $e, qr/ERROR:  slidewin could not reach Redis/,
	"the master of $qb frozen at the confirm: the call fails") or diag($o);
is(units($qa, 1), 0, "$qa, confirmed before, was given back at once");
# The frozen master runs, once thawed, whatever reached it before the
# timeout: the confirm (then the entry of $qb stays, an over-count, as for
# any command that timed out), or nothing, and then the reservation ends.
# Either way no reservation outlives its life, and $qb stays within lim.
my $wait = $reserved + $qlife + 0.3 - time;
usleep(int($wait * 1_000_000)) if $wait > 0;
($o) = run_sql(qq{SELECT allowed FROM rl_peek('$qb', 1, '1 hour', on_redis_error => 'error')});
is(held($qb), 0, "no reservation of $qb outlives its life");
my $qunits = units($qb, 1);
cmp_ok($qunits, '<=', 1, "$qb holds $qunits unit(s), within its limit of 1");
$caller->quit;
$holder->quit;

# ---------------------------------------------------------------------
# Under load
# ---------------------------------------------------------------------
$node->safe_psql('postgres', q{
	CREATE TABLE keys (k text PRIMARY KEY, l bigint);
	INSERT INTO keys SELECT 'w' || i, 20 + 7 * i FROM generate_series(1, 6) i;
	CREATE SEQUENCE calls;
	CREATE TABLE outcome (call bigint, k text, cost bigint, allowed boolean);
});
my %wslots = map { (slot_of("w$_") => 1) } 1 .. 6;
is(scalar keys %wslots, 6, 'the six keys of the load lie in six slots');
$node->pgbench('-n -c 8 -j 2 -t 150', 0, [qr{processed: 1200/1200}], [qr{^$}],
	'8 clients x 150 calls: over 2-4 of 6 keys in different slots, or one key',
	{ '104_all' => q{
		\set n random(2, 4)
		WITH pick AS MATERIALIZED (
		       SELECT k, l, (1 + floor(random() * 3))::bigint AS c
		         FROM keys ORDER BY random() LIMIT :n),
		     arr AS (SELECT array_agg(k ORDER BY k) ks, array_agg(l ORDER BY k) ls,
		                    array_agg(c ORDER BY k) cs FROM pick),
		     id AS (SELECT nextval('calls') AS call)
		INSERT INTO outcome
		SELECT id.call, r.key, pick.c, r.allowed
		  FROM arr, id,
		       rl_attempt_all_rows(arr.ks, arr.ls, array_fill('1 hour'::interval, ARRAY[:n]),
		                           arr.cs, on_redis_error => 'error') r
		  JOIN pick ON pick.k = r.key;
	  }, '104_one' => q{
		\set i random(1, 6)
		INSERT INTO outcome
		SELECT nextval('calls'), k, 1, (rl_attempt(k, l, '1 hour', on_redis_error => 'error')).allowed
		  FROM keys WHERE k = 'w' || :i;
	  } });
# check_load($label, $held, $units, $min_denied): after a load into the
# table outcome, no reservation left behind ($held->(key)), every call all or
# none, calls over several keys both admitted and denied, and each key's
# admitted units within its limit and equal to what Redis counts
# ($units->(key, lim)).
sub check_load
{
	my ($label, $held, $units, $min_denied) = @_;
	is(join(',', map { $held->("w$_") } 1 .. 6), '0,0,0,0,0,0',
		"${label}no reservation is left behind: each was confirmed or cancelled");
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM (SELECT call FROM outcome GROUP BY call
		                      HAVING bool_or(allowed) <> bool_and(allowed)) s}),
		'0', "${label}every call admitted all its keys or none");
	my ($adm, $den) = split /\|/, $node->safe_psql('postgres', q{
		SELECT count(*) FILTER (WHERE a AND n > 1), count(*) FILTER (WHERE NOT a AND n > 1)
		  FROM (SELECT bool_and(allowed) a, count(*) n FROM outcome GROUP BY call) s});
	cmp_ok($adm, '>', 10, "$label$adm calls over several keys admitted");
	cmp_ok($den, '>', $min_denied, "$label$den calls over several keys denied (the keys filled up)");
	foreach my $row (split /\n/, $node->safe_psql('postgres', 'SELECT k, l FROM keys ORDER BY k'))
	{
		my ($k, $lim) = split /\|/, $row;
		my $sum = $node->safe_psql('postgres',
			"SELECT coalesce(sum(cost), 0) FROM outcome WHERE k = '$k' AND allowed");
		cmp_ok($sum, '<=', $lim, "$label$k: admitted units ($sum) within its limit ($lim)");
		is($units->($k, $lim), $sum, "$label$k: the units Redis counts are the admitted calls' costs ($sum)");
	}
	return;
}
check_load('', \&held, \&units, 100);

# The same load for each counting algorithm, on the test clock (so that
# every call falls in one window, and no reservation ends): 8 clients x 40.
# (Limits that divide the hour in whole microseconds: token_bucket's tokens
# then add up exactly in Redis's doubles, and rl_peek can be compared with
# the sum of the admitted costs to the unit.)
$node->safe_psql('postgres', q{
	UPDATE keys SET l = (ARRAY[20, 24, 30, 36, 40, 45])[substr(k, 2)::int];
	CREATE TABLE algo (a text);
	ALTER DATABASE postgres SET slidewin.test_now = '2030-01-01 00:10:00+00';
});
# check_load reads each key back with cunits, in the window the loads use.
# $cwin still held the aligned window of the two-slot checks above, which
# near an hour's turn is two or three hours long: token_bucket's peek then
# read a bucket three times as slow and counted a third of the units (CI,
# at 01:59 UTC).
$cwin = '1 hour';
foreach my $algo (qw(fixed_window sliding_counter token_bucket))
{
	$node->safe_psql('postgres', "TRUNCATE outcome; DELETE FROM algo; INSERT INTO algo VALUES ('$algo')");
	$node->pgbench('-n -c 8 -j 2 -t 40', 0, [qr{processed: 320/320}], [qr{^$}],
		"$algo: 8 clients x 40 calls over 2-4 of 6 keys in different slots, or one key",
		{ "104_all_$algo" => q{
			\set n random(2, 4)
			WITH pick AS MATERIALIZED (
			       SELECT k, l, (1 + floor(random() * 3))::bigint AS c
			         FROM keys ORDER BY random() LIMIT :n),
			     arr AS (SELECT array_agg(k ORDER BY k) ks, array_agg(l ORDER BY k) ls,
			                    array_agg(c ORDER BY k) cs FROM pick),
			     id AS (SELECT nextval('calls') AS call)
			INSERT INTO outcome
			SELECT id.call, r.key, pick.c, r.allowed
			  FROM arr, id,
			       rl_attempt_all_rows(arr.ks, arr.ls, array_fill('1 hour'::interval, ARRAY[:n]),
			                           arr.cs, algorithm => (SELECT a FROM algo),
			                           on_redis_error => 'error') r
			  JOIN pick ON pick.k = r.key;
		  }, "104_one_$algo" => q{
			\set i random(1, 6)
			INSERT INTO outcome
			SELECT nextval('calls'), k, 1,
			       (rl_attempt(k, l, '1 hour', algorithm => (SELECT a FROM algo),
			                   on_redis_error => 'error')).allowed
			  FROM keys WHERE k = 'w' || :i;
		  } });
	check_load("$algo: ", sub { cheld($_[0], $algo) }, sub { cunits($_[0], $_[1], $algo) }, 10);
}
$node->safe_psql('postgres', 'ALTER DATABASE postgres RESET slidewin.test_now');

done_testing();
