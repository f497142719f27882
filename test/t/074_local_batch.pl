# Local batches (slidewin.local_batch, issue 40): two PostgreSQL servers,
# both preloading slidewin, share one Redis.
#  1. Exact: every admission's use is bracketed by two readings of the
#     server's clock (before and after the call; Redis and both servers
#     read this host's clock). A call whose bracket lies wholly inside a
#     window of length win certainly used its unit in that window, so a
#     window holding more than lim such calls is a real excess (sound: no
#     false alarm from the brackets' width). Checked for 8 pgbench clients
#     on each server on one hot key with a limit that binds, and for a
#     batch whose units are used late in its life on one server while the
#     other asks Redis after the batch's reserve has left the window (which
#     a batch scored at its reserve, not at its end, would get wrong).
#  2. Far fewer Redis calls than admissions when the limit never binds
#     (the ratio is printed; make bench holds the target).
#  3. The unused units of a batch go back to Redis within d plus a margin
#     for the round trip and this loaded machine, by the worker, with no
#     call on the key; a call after the batch's end asks Redis again.
#     rl_block and rl_reset end this server's batches of the key at once.
#  4. Batches off (the default): a call goes to Redis every time.
#  5. A reserve's reply is checked (a fake Redis): the units it says it took
#     lie between the call's cost and the batch asked for, and agree with
#     the rest of the reply.
#  6. Batches are sized from the key's recent rate on the server (rule 5 of
#     src/switch/local_batch.c): a key called once, or rarely, or again
#     after a silence of more than 16 d, goes to Redis alone (one entry of
#     its own cost, scored at its time, and no refund); a key called at a
#     steady rate gets batches of about what it uses in d, never more than
#     the setting.
# A key warms up before it batches: its first two calls in a run go alone,
# so the sections that need a batch call the key a few times in one
# statement first, and read the batch from the key's log in Redis.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest;
use FakeRedis;

my $redis = SlidewinTest::start_redis();
my @conf  = ("shared_preload_libraries = 'slidewin'", 'max_connections = 30');
my $a_node = SlidewinTest::new_node('batch_a', $redis, \@conf);
my $b_node = SlidewinTest::new_node('batch_b', $redis, \@conf);

# The entries of key $k's sliding log in Redis, oldest first, as [score
# (us), units]: a member is the running total of the log's units, so an
# entry's units are its member less the one before (for a log that never
# lost an entry to its window).
sub log_entries
{
	my ($k) = @_;
	my @z = split /\n/, scalar $redis->cli('zrange', "slidewin:log:$k", '0', '-1', 'withscores');
	my ($prev, @e) = (0);
	for (my $i = 0; $i + 1 < @z; $i += 2)
	{
		push @e, [ $z[ $i + 1 ], $z[$i] - $prev ];
		$prev = $z[$i];
	}
	return @e;
}

# Whether Redis holds a refund of key $k (the log's ledger).
sub has_refund
{
	my ($k) = @_;
	return $redis->cli('exists', "slidewin:logr:$k") ne '0';
}

for my $n ($a_node, $b_node)
{
	SlidewinTest::bracketed_take($n);
}

# The most calls of key $k whose brackets lie inside one window of $win
# seconds, over both servers; and how many were admitted in all.
sub fullest_window
{
	my ($k, $win) = @_;
	return SlidewinTest::taken_fullest([ $a_node, $b_node ], $k, $win);
}

sub bench_both { return SlidewinTest::pgbench_on_each(@_) }

# ---------------------------------------------------------------------
# 1a. A limit that binds: 8 clients on each server, one key
# ---------------------------------------------------------------------
{
	my ($lim, $win) = (40, 0.2);
	my $before = $redis->scripts_run;
	bench_both(<<"EOS", '-c slidewin.local_batch=10 -c slidewin.local_batch_time=30', ['-T', 2], $a_node, $b_node);
\\set s random(1, 20)
\\sleep :s ms
SELECT take('hot', $lim, '200 ms');
EOS
	my ($max, $n) = fullest_window('hot', $win);
	note("binding limit: $n admitted on both servers, " . ($redis->scripts_run - $before)
		  . " Redis calls; fullest window of 200 ms holds $max");
	cmp_ok($n, '>', 3 * $lim, "the limit bound, and was filled again and again ($n admitted)");
	cmp_ok($max, '<=', $lim, "no window of 200 ms holds more than $lim admissions ($max)");
	for my $node ($a_node, $b_node)
	{
		cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM adm WHERE k = 'hot'}), '>', 0,
			$node->name . ' admitted some');
	}
}

# ---------------------------------------------------------------------
# 1b. Units of a batch used late in its life, and the other server after
# ---------------------------------------------------------------------
# lim 10, win 1 s, d 600 ms. A warms the key up with 3 calls in one
# statement: two alone, then a batch of the 8 units left at r (one used),
# and uses the other 7 at about r + 0.45 s. B then calls from r + 1.1 s:
# the batch's entry, scored r + 0.6 s, is still in B's window, so B is
# denied until the units used at r + 0.45 s could have left it. A batch
# scored at r would let B take 10 more while A's 7 are in the window.
{
	my ($lim, $win) = (10, 1);
	my $sa = $a_node->background_psql('postgres');
	$sa->query_safe('SET slidewin.local_batch = 10');
	$sa->query_safe("SET slidewin.local_batch_time = '600ms'");
	my $t_r = time;
	is($sa->query_safe(q{SELECT count(*) FROM generate_series(1, 3) g WHERE take('late', 10 + 0 * g, '1 second')}),
		'3', 'A warms the key up: 3 calls admitted');
	# calls microseconds apart ask for d / gap units, far above 10
	my @e = log_entries('late');
	is(join(',', map { $_->[1] } @e), '1,1,8',
		'two calls went alone, the third reserved a batch of the 8 units the window had left');
	usleep(450_000);
	my $calls = $redis->scripts_run;
	is($sa->query_safe(q{SELECT count(*) FROM generate_series(1, 7) g WHERE take('late', 10 + 0 * g, '1 second')}),
		'7', 'A uses the other 7 units of its batch, late in its life');
	is($redis->scripts_run - $calls, 0, '... with no round trip') if time - $t_r < 0.6;
	$sa->quit;
	my $wait = $t_r + 1.1 - time;
	usleep(1_000_000 * $wait) if $wait > 0;
	# B calls every 10 ms for 0.5 s (batches off on B: each call asks Redis)
	$b_node->safe_psql('postgres', q{
		DO $$ BEGIN
		  FOR i IN 1 .. 50 LOOP PERFORM take('late', 10, '1 second'); PERFORM pg_sleep(0.01); END LOOP;
		END $$});
	my ($max, $n) = fullest_window('late', $win);
	note("late use: $n admitted, fullest window of 1 s holds $max");
	cmp_ok($max, '<=', $lim, "no window of 1 s holds more than $lim admissions ($max)");
}

# ---------------------------------------------------------------------
# 2. A limit that never binds: Redis calls per admission
# ---------------------------------------------------------------------
{
	my $before_calls = $redis->scripts_run;
	my $before_adm   = $a_node->safe_psql('postgres', q{SELECT count(*) FROM adm WHERE k = 'free'});
	bench_both(<<"EOS", '-c slidewin.local_batch=100 -c slidewin.local_batch_time=20', ['-t', 200], $a_node);
SELECT take('free', 1000000000, '1 hour');
EOS
	my $adm   = $a_node->safe_psql('postgres', q{SELECT count(*) FROM adm WHERE k = 'free'}) - $before_adm;
	my $calls = $redis->scripts_run - $before_calls;
	my $ratio = $adm ? $calls / $adm : 1;
	note(sprintf('limit never binds: %d admissions, %d Redis calls, %.4f calls per admission',
			$adm, $calls, $ratio));
	is($adm, 1600, "8 clients x 200 calls, all admitted");
	cmp_ok($ratio, '<', 0.5, sprintf('far fewer Redis calls than admissions (%.4f per admission)', $ratio));

	# the batches, read from the key's log (a window of an hour keeps them all)
	my @sizes = map { $_->[1] } log_entries('free');
	my @batches = grep { $_ > 1 } @sizes;
	my ($most) = sort { $b <=> $a } @sizes;
	note(sprintf('%d entries in the log, %d of them batches; the largest %d units',
			scalar @sizes, scalar @batches, $most // 0));
	cmp_ok(scalar @batches, '>', 0, 'the hot key was served from batches');
	cmp_ok($most // 0, '<=', 100, 'no batch larger than slidewin.local_batch');
	# every unit reserved and not used goes back: Redis counts the 1600 alone
	my $used = sub {
		$b_node->safe_psql('postgres', q{SELECT 1000000000 - remaining FROM rl_peek('free', 1000000000, '1 hour')});
	};
	SlidewinTest::wait_for('the batches\' rest back', sub { $used->() <= 1600 }, 10);
	is($used->(), 1600, 'once the batches ended, Redis counts exactly the 1600 admissions');
}

# ---------------------------------------------------------------------
# 3. Unused units go back to Redis within d (plus one round trip)
# ---------------------------------------------------------------------
{
	my $d = 0.3;
	my $sa = $a_node->background_psql('postgres');
	my $sb = $b_node->background_psql('postgres');
	# B watches from its own session: rl_peek every 5 ms until the units
	# are back, and the time it saw them back (every peek asks Redis)
	$sb->query_safe(q{
		CREATE FUNCTION back_at(k text, want bigint) RETURNS float8 LANGUAGE plpgsql AS $$
		BEGIN
		  FOR i IN 1 .. 2000 LOOP
		    IF (SELECT remaining FROM rl_peek(k, 100, '1 hour')) = want THEN
		      RETURN extract(epoch FROM clock_timestamp());
		    END IF;
		    PERFORM pg_sleep(0.005);
		  END LOOP;
		  RETURN NULL;
		END $$});
	$sa->query_safe('SET slidewin.local_batch = 50');
	$sa->query_safe("SET slidewin.local_batch_time = '300ms'");
	my $t0 = time;
	is($sa->query_safe(q{SELECT count(*) FROM generate_series(1, 5) g WHERE rl_allow('back', 100 + 0 * g, '1 hour')}),
		'5', 'five calls in quick succession admitted');
	my @e = log_entries('back');
	my @batches = grep { $_->[1] > 1 } @e;
	my $counted = 0;
	$counted += $_->[1] for @e;
	is($e[0][1], 1, 'the first call went to Redis alone (one unit of its own)');
	cmp_ok(scalar @batches, '>=', 1, 'then the key reserved a batch');
	cmp_ok($_->[1], '<=', 50, "a batch of $_->[1] units, no more than slidewin.local_batch") for @batches;
	# what A's batches hold unused: all they reserved but the 3 of the 5
	# calls they served (the first two went alone)
	my $held = $sa->query_safe(q{SELECT rl_batch_held('back', 100, '1 hour')});
	is($held, $counted - 5, "rl_batch_held on the server holding the batch: its unused units ($held)")
	  if time - $t0 < $d;
	is($sb->query_safe(q{SELECT rl_batch_held('back', 100, '1 hour')}), '0',
		'rl_batch_held on the other server: none');
	is($sa->query_safe(q{SELECT rl_batch_held('back', 100, '1 minute')}), '0',
		'rl_batch_held of the key with another window: none');
	# rl_headers on the other server: r promises none of A's batch
	my $hdr = $sb->query_safe(q{SELECT rl_headers(p)->>'RateLimit' FROM rl_peek('back', 100, '1 hour') p});
	my ($r_hdr) = $hdr =~ /;r=(\d+)/;
	cmp_ok($r_hdr // 999, '<=', 100 - $counted,
		"rl_headers on the other server promises no unit A's batch holds ($hdr)")
	  if time - $t0 < $d;
	my $mid = $sb->query_safe(q{SELECT remaining FROM rl_peek('back', 100, '1 hour')});
	my $t_mid = time - $t0;
	# (on a machine too busy to ask within d, the batch may have ended)
	is($mid, 100 - $counted, "while the batch lives, another server sees its units used ($counted in all)")
	  if $t_mid < $d;
	my $back = $sb->query_safe(q{SELECT back_at('back', 95)});
	isnt($back, '', 'the unused units went back to Redis, with no call on the key: it counts the 5 used');
	$back = ($back || 9e9) - $t0;
	note(sprintf('unused units back after %.3f s (d = %.3f s)', $back, $d));
	# d, a round trip, and 0.15 s for a worker woken late by a busy machine
	cmp_ok($back, '<=', $d + 0.15, sprintf('they were back within d + 0.15 s (%.3f s)', $back));
	cmp_ok($back, '>=', $d, sprintf('and not before the batch ended (%.3f s)', $back));
	# the worker frees the batch once Redis has taken the rest back
	my $held_after = $sa->query_safe(q{
		DO $$ BEGIN
		  FOR i IN 1 .. 200 LOOP
		    EXIT WHEN rl_batch_held('back', 100, '1 hour') = 0;
		    PERFORM pg_sleep(0.005);
		  END LOOP;
		END $$;
		SELECT rl_batch_held('back', 100, '1 hour')});
	is($held_after, '0', 'once given back, the batch holds nothing');

	# after the batch's end, a call asks Redis again (alone, or for a small
	# batch: the key's rate fell while it waited)
	my $calls = $redis->scripts_run;
	my ($ok, $left) = split /\|/,
	  $sa->query_safe(q{SELECT allowed, remaining FROM rl_attempt('back', 100, '1 hour')});
	is($ok, 't', 'a call after the batch ended is admitted');
	cmp_ok($left, '>=', 45, "what it reserved is within the setting (remaining $left)");
	cmp_ok($left, '<=', 94, '... and counts its own unit');
	cmp_ok($redis->scripts_run - $calls, '>=', 1, 'it asked Redis');
	# any unused units go back too (a Redis call of the worker's, which must
	# not fall into the count below)
	isnt($sb->query_safe(q{SELECT back_at('back', 94)}), '', 'and its unused units went back');
	$sa->quit;
	$sb->quit;

	# within a live batch, calls on this server do not (a long d, so that
	# a busy machine cannot end it first)
	$sa = $a_node->background_psql('postgres');
	$sa->query_safe('SET slidewin.local_batch = 50');
	$sa->query_safe("SET slidewin.local_batch_time = '5s'");
	$calls = $redis->scripts_run;
	my $t1 = time;
	is($sa->query_safe(q{SELECT count(*) FROM generate_series(1, 20) g WHERE rl_allow('live', 100 + 0 * g, '1 hour')}),
		'20', '20 calls admitted');
	my $n_calls = $redis->scripts_run - $calls;
	is($n_calls, 3, 'three Redis calls for the 20: two alone while the key warmed up, then a batch the rest came from')
	  if time - $t1 < 5;
	# its rest goes back now, not in a later section's count of Redis calls
	$a_node->safe_psql('postgres', q{SELECT rl_reset('live')});
	$sa->quit;
}

# ---------------------------------------------------------------------
# 3b. rl_block and rl_reset end this server's batches of the key at once
# ---------------------------------------------------------------------
{
	my $sa = $a_node->background_psql('postgres');
	$sa->query_safe('SET slidewin.local_batch = 50');
	$sa->query_safe("SET slidewin.local_batch_time = '5s'");
	my $t0 = time;
	is($sa->query_safe(q{SELECT count(*) FROM generate_series(1, 5) g WHERE rl_allow('blk', 100 + 0 * g, '1 hour')}),
		'5', 'five calls admitted, the last ones from a batch (it lives 5 s)');
	cmp_ok($b_node->safe_psql('postgres', q{SELECT remaining FROM rl_peek('blk', 100, '1 hour')}), '<', 95,
		'Redis counts more than the 5 used: a batch is live') if time - $t0 < 5;
	$a_node->safe_psql('postgres', q{SELECT rl_block('blk', '1 hour')});
	is($sa->query_safe(q{SELECT allowed FROM rl_attempt('blk', 100, '1 hour')}), 'f',
		'a block from another session of the server denies the next call, batch or not');

	is($sa->query_safe(q{SELECT count(*) FROM generate_series(1, 5) g WHERE rl_allow('rst', 100 + 0 * g, '1 hour')}),
		'5', 'five calls on another key, the last ones from a batch');
	$a_node->safe_psql('postgres', q{SELECT rl_reset('rst')});
	my ($ok, $left) = split /\|/,
	  $sa->query_safe(q{SELECT allowed, remaining FROM rl_attempt('rst', 100, '1 hour')});
	is($ok, 't', 'after rl_reset, the next call is admitted');
	cmp_ok($left, '<', 100, "... and counts its unit (remaining $left)");
	is($b_node->safe_psql('postgres', q{SELECT remaining FROM rl_peek('rst', 100, '1 hour')}), $left,
		'and Redis counts what it said, from an empty log (a call served from the batch the reset emptied would not be counted)');
	$a_node->safe_psql('postgres', q{SELECT rl_reset('rst')});
	$sa->quit;
}

# ---------------------------------------------------------------------
# 4. Batches off, the default: every call asks Redis
# ---------------------------------------------------------------------
{
	my $calls = $redis->scripts_run;
	is($a_node->safe_psql('postgres', q{SELECT count(*) FROM generate_series(1, 20) g WHERE rl_allow('off', 100 + 0 * g, '1 hour')}),
		'20', 'batches off: 20 calls admitted');
	is($redis->scripts_run - $calls, 20, 'one Redis call each');
	is($b_node->safe_psql('postgres', q{SELECT 100 - remaining FROM rl_peek('off', 100, '1 hour')}), '20',
		'and the log counts exactly 20');
	is($a_node->safe_psql('postgres', q{SHOW slidewin.local_batch}), '0', 'slidewin.local_batch is 0 by default');
}

# ---------------------------------------------------------------------
# 5. The reply to a reserve is checked: a fake Redis (a session's own URL)
# ---------------------------------------------------------------------
{
	my $fake = FakeRedis->start;
	my $s = $a_node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe('\set VERBOSITY verbose');
	$s->query_safe('SET slidewin.redis_url = ' . "'redis://127.0.0.1:" . $fake->port . "'");
	$s->query_safe('SET slidewin.redis_retry_interval = 0');
	$s->query_safe('SET slidewin.local_batch = 50');
	$s->query_safe("SET slidewin.local_batch_time = '1s'");
	my $ts  = 1_900_000_000_000_000;
	my $win = 3_600_000_000;
	# three calls of a fresh key in one statement: two alone (ordinary
	# admissions), then the reserve whose reply is under test
	my $n = 0;
	my $call = sub {
		$n++;
		return qq{SELECT (r).allowed, (r).remaining FROM generate_series(1, 3) g,
			LATERAL rl_attempt('fk$n', 100 + 0 * g, '1 hour', 1, 'error') r ORDER BY g DESC LIMIT 1};
	};
	my @alone = (FakeRedis::ints(99, $ts, $ts + $win), FakeRedis::ints(98, $ts + 1, $ts + $win));
	for my $case (
		[ 'more units than asked for', FakeRedis::ints(49, $ts, $ts + $win, 51),
			qr/The units a local batch took must be an integer between 1 and 50\./ ],
		[ 'fewer units than the call costs', FakeRedis::ints(100, $ts, $ts + $win, 0),
			qr/The units a local batch took must be an integer between 1 and 50\./ ],
		[ 'the short form of a single admission', FakeRedis::ints(99, $ts, $ts + $win),
			qr/The reply to a local batch's admission has 3 elements, not 4\./ ],
		[ 'units taken at odds with remaining', FakeRedis::ints(90, $ts, $ts + $win, 50),
			qr/Field "used" of the sliding_log attempt reply is 10, but it must include the 50 units recorded\./ ])
	{
		my ($name, $reply, $why) = @$case;
		$fake->script(@alone, $reply);
		my ($out, $err) = SlidewinTest::session_sql($s, $call->());
		is(SlidewinTest::sqlstate($err), '08P01', "a reserve answered with $name is refused");
		like($err, $why, "... naming why ($name)");
	}
	$fake->script(@alone, FakeRedis::ints(48, $ts + 2, $ts + $win, 50));
	$fake->mark;
	is($s->query_safe($call->()), 't|48', 'a well-formed reserve of 50 units is believed');
	is($fake->count('EVALSHA') + $fake->count('EVAL'), 3, '... after two calls alone: three script calls');
	$s->quit;
}

# ---------------------------------------------------------------------
# 6. Batch sizes follow the key's rate on the server
# ---------------------------------------------------------------------
{
	my $sa = $a_node->background_psql('postgres');
	$sa->query_safe('SET slidewin.local_batch = 100');
	$sa->query_safe("SET slidewin.local_batch_time = '100ms'");
	# no batch of this section's keys is live: the count of Redis calls
	# below holds only this section's own (and those of the worker)
	usleep(300_000);

	# (a) a key called once pays for no batch: one entry of its own cost,
	# scored at its time, and nothing given back later
	my $calls = $redis->scripts_run;
	my $t0    = time;
	is($sa->query_safe(q{SELECT allowed, remaining FROM rl_attempt('once', 100, '1 hour', 3)}), 't|97',
		'a key called once: admitted, Redis counts its own 3 units');
	my $t1 = time;
	usleep(400_000);    # d, and time for a worker that would give back
	my @e = log_entries('once');
	is(scalar @e, 1, 'its log holds one entry');
	is($e[0][1], 3, '... of the call\'s own 3 units, not a batch');
	cmp_ok($e[0][0], '<=', ($t1 + 0.01) * 1e6, '... scored at the call, not ahead by d');
	ok(!has_refund('once'), 'no refund of the key followed');
	is($redis->scripts_run - $calls, 1, 'one Redis call in all');

	# a key called once per 10 d (d = 20 ms here): every call alone
	$calls = $redis->scripts_run;
	$sa->query_safe(q{SET slidewin.local_batch_time = '20ms'});
	$sa->query_safe(q{DO $$ BEGIN
		FOR i IN 1 .. 5 LOOP PERFORM rl_allow('rare', 100, '1 hour'); PERFORM pg_sleep(0.2); END LOOP;
		END $$});
	$sa->query_safe(q{SET slidewin.local_batch_time = '100ms'});
	@e = log_entries('rare');
	is(join(',', map { $_->[1] } @e), '1,1,1,1,1', 'a key called once per 10 d: five entries of one unit each');
	ok(!has_refund('rare'), 'no refund of it');
	is($redis->scripts_run - $calls, 5, 'one Redis call per call, no more');

	# (b) a steady rate of one call per 10 ms (or slower, on a busy
	# machine), d = 200 ms: batches of at most d / 10 ms = 20 units, far
	# below the setting
	$calls = $redis->scripts_run;
	$sa->query_safe(q{SET slidewin.local_batch_time = '200ms'});
	$sa->query_safe(q{DO $$ BEGIN
		FOR i IN 1 .. 200 LOOP PERFORM rl_allow('steady', 1000000, '1 hour'); PERFORM pg_sleep(0.01); END LOOP;
		END $$});
	$sa->query_safe(q{SET slidewin.local_batch_time = '100ms'});
	my $n_calls = $redis->scripts_run - $calls;
	my @sizes = map { $_->[1] } log_entries('steady');
	my @batches = grep { $_ > 1 } @sizes;
	my ($most) = sort { $b <=> $a } @sizes;
	note(sprintf('steady key: 200 calls, %d Redis calls (%.3f per admission), %d batches, the largest %d units',
			$n_calls, $n_calls / 200, scalar @batches, $most));
	cmp_ok(scalar @batches, '>', 0, 'a key called every 10 ms batches');
	cmp_ok($most, '<=', 20, "its batches are sized from its rate: at most d / 10 ms ($most units)");
	cmp_ok($n_calls / 200, '<', 0.5, sprintf('Redis calls per admission well below 1 (%.3f)', $n_calls / 200));

	# (b) a hot key: many calls per d, batches never above the setting
	$calls = $redis->scripts_run;
	is($sa->query_safe(q{SELECT count(*) FROM generate_series(1, 2000) g WHERE rl_allow('hotter', 1000000 + 0 * g, '1 hour')}),
		'2000', 'a hot key: 2000 calls in one statement admitted');
	$n_calls = $redis->scripts_run - $calls;
	@sizes = map { $_->[1] } log_entries('hotter');
	($most) = sort { $b <=> $a } @sizes;
	note(sprintf('hot key: 2000 calls, %d Redis calls (%.4f per admission), the largest batch %d units',
			$n_calls, $n_calls / 2000, $most));
	cmp_ok($most, '<=', 100, "no batch above slidewin.local_batch ($most units)");
	cmp_ok($n_calls / 2000, '<', 0.1, sprintf('Redis calls per admission far below 1 (%.4f)', $n_calls / 2000));

	# (c) after a silence of more than 16 d, the next call goes alone again
	usleep(2_000_000);
	$calls = $redis->scripts_run;
	is($sa->query_safe(q{SELECT allowed FROM rl_attempt('hotter', 1000000, '1 hour', 2)}), 't',
		'the hot key, called again after 2 s (20 d)');
	my $t2 = time;
	usleep(400_000);
	@e = log_entries('hotter');
	is($e[-1][1], 2, 'it went alone: its entry holds its own 2 units');
	cmp_ok($e[-1][0], '<=', ($t2 + 0.01) * 1e6, '... scored at the call');
	is($redis->scripts_run - $calls, 1, 'one Redis call, and no refund after it');
	$sa->quit;
}

# Bad settings are refused, naming the setting.
{
	my ($ret, $out, $err) = $a_node->psql('postgres', 'SET slidewin.local_batch = -1');
	like($err, qr/-1 is outside the valid range for parameter "slidewin.local_batch"/, 'a negative batch is refused');
	($ret, $out, $err) = $a_node->psql('postgres', q{SET slidewin.local_batch_time = '0'});
	like($err, qr/outside the valid range for parameter "slidewin.local_batch_time"/, 'a batch time of 0 is refused');
}

$a_node->stop;
$b_node->stop;
done_testing();
