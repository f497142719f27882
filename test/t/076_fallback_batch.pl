# Local batches in the fallback store (rule 6 of src/switch/local_batch.c):
# while Redis cannot answer, a hot key's calls reserve a batch as one
# fallback row scored at the batch's end, and this database's backends use
# its units from shared memory.
#  1. Exact: with a limit that binds, 8 pgbench clients on one key, no
#     window of length win holds more than lim bracketed admissions (the
#     brackets of 074_local_batch: two readings of the clock around the
#     call, so a window that holds more is a real excess).
#  2. Fewer rows than admissions when the limit never binds; no row larger
#     than slidewin.local_batch; the rows' units cover every admission.
#  3. The row goes with its transaction. A batch reserved in a transaction
#     that rolls back, or in a subtransaction that rolls back, is freed
#     with its row: nothing is held, and the next call writes a row again.
#     A committed batch serves another session of the database without a
#     row, and none of another database. One transaction goes on reserving
#     as it uses batches up.
#  4. What an ended batch did not use goes back: the next call of its key
#     in its database, after the batch's deadline and within 4 d of it,
#     gives the rest back as a partial refund of the batch's row, in its own
#     transaction (so not at all if that rolls back); after that time, or
#     once given, nothing more is.
#  5. When Redis answers again, the batch's row is carried into the key's
#     log scored ahead of Redis's now (its end), not at now: a carried row
#     scored at now would leave Redis's window up to d before its last
#     unit's use does.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
my $node = SlidewinTest::new_node('fb_batch', $redis,
	[ "shared_preload_libraries = 'slidewin'", 'max_connections = 30' ]);
SlidewinTest::bracketed_take($node);
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION slidewin');

# Redis goes away for sections 1 to 3: every call fails over at once
$redis->stop;

sub rows_of
{
	my ($k, $db) = @_;
	return $node->safe_psql($db // 'postgres',
		"SELECT count(*) || ' ' || coalesce(sum(cost), 0) || ' ' || coalesce(max(cost), 0)"
		  . " FROM rl_fallback_log WHERE key = 'slidewin:$k'");
}

# ---------------------------------------------------------------------
# 1. A limit that binds, in the fallback store
# ---------------------------------------------------------------------
{
	my ($lim, $win) = (40, 0.2);
	SlidewinTest::pgbench_on_each(<<"EOS", '-c slidewin.local_batch=10 -c slidewin.local_batch_time=30', ['-T', 2], $node);
\\set s random(1, 20)
\\sleep :s ms
SELECT take('hot', $lim, '200 ms');
EOS
	my ($max, $n) = SlidewinTest::taken_fullest([$node], 'hot', $win);
	note("binding limit in the fallback store: $n admitted; fullest window of 200 ms holds $max");
	cmp_ok($n, '>', 3 * $lim, "the limit bound, and was filled again and again ($n admitted)");
	cmp_ok($max, '<=', $lim, "no window of 200 ms holds more than $lim admissions ($max)");
}

# ---------------------------------------------------------------------
# 2. A limit that never binds: rows per admission
# ---------------------------------------------------------------------
{
	SlidewinTest::pgbench_on_each(<<"EOS", '-c slidewin.local_batch=100 -c slidewin.local_batch_time=20', ['-t', 200], $node);
SELECT take('free', 1000000000, '1 hour');
EOS
	my $adm = $node->safe_psql('postgres', q{SELECT count(*) FROM adm WHERE k = 'free'});
	my ($rows, $units, $most) = split / /, rows_of('free');
	note("limit never binds: $adm admissions, $rows fallback rows of $units units, the largest $most");
	is($adm, 1600, '8 clients x 200 calls, all admitted');
	cmp_ok($rows, '<', $adm / 2, "far fewer rows than admissions ($rows)");
	cmp_ok($most, '>', 1, 'the hot key was served from batches');
	cmp_ok($most, '<=', 100, 'no batch larger than slidewin.local_batch');
	cmp_ok($units, '>=', $adm, "the rows' units cover every admission ($units)");
	is($node->safe_psql('postgres', q{SELECT 1000000000 - remaining FROM rl_peek('free', 1000000000, '1 hour')}),
		$units, 'a peek counts every unit of the rows, used or not');
}

# ---------------------------------------------------------------------
# 3. The row goes with its transaction
# ---------------------------------------------------------------------
# d is 10 s, so that nothing ends on its own while the section runs. The
# key warms up in one statement: two calls alone, then a batch of 10 (the
# setting), its first unit the third call's.
my $warm = q{SELECT count(*) FROM generate_series(1, 3) g WHERE take('%s', 100 + 0 * g, '1 hour')};
my $held = q{SELECT rl_batch_held('%s', 100, '1 hour')};
{
	my $s = $node->background_psql('postgres');
	$s->query_safe('SET slidewin.local_batch = 10');
	$s->query_safe("SET slidewin.local_batch_time = '10s'");

	$s->query_safe('BEGIN');
	is($s->query_safe(sprintf($warm, 'ab')), '3', 'in a transaction: 3 calls admitted');
	is($s->query_safe(sprintf($held, 'ab')), '9', '... the third reserved a batch of 10, 9 held');
	is($s->query_safe(sprintf($warm, 'ab')), '3', '... and 3 more calls use it');
	is($s->query_safe(sprintf($held, 'ab')), '6', '... 6 held');
	$s->query_safe('ROLLBACK');
	is($s->query_safe(sprintf($held, 'ab')), '0', 'rolled back: the batch is gone with its row');
	is(rows_of('ab'), '0 0 0', '... and no row is left');

	$s->query_safe('BEGIN');
	$s->query_safe('SAVEPOINT p');
	is($s->query_safe(sprintf($warm, 'sp')), '3', 'in a subtransaction: 3 calls admitted');
	is($s->query_safe(sprintf($held, 'sp')), '9', '... a batch of 10 reserved');
	$s->query_safe('ROLLBACK TO SAVEPOINT p');
	is($s->query_safe(sprintf($held, 'sp')), '0', 'the subtransaction rolled back: the batch is gone');
	is($s->query_safe(q{SELECT take('sp', 100, '1 hour')}), 't', 'the next call is admitted');
	is($s->query_safe(sprintf($held, 'sp')), '9', '... by a batch of its own');
	$s->query_safe('COMMIT');
	is(rows_of('sp'), '1 10 10', '... whose row is the only one: it took nothing from the dead batch');

	is($s->query_safe(sprintf($warm, 'ok')), '3', 'committed: 3 calls admitted');
	is(rows_of('ok'), '3 12 10', '... two rows of one unit, and the batch of 10');

	# another session of the database takes from it without a row; another
	# database has its own fallback store and does not
	my $t = $node->background_psql('postgres');
	$t->query_safe('SET slidewin.local_batch = 10');
	is($t->query_safe(q{SELECT count(*) FROM generate_series(1, 5) g WHERE rl_allow('ok', 100 + 0 * g, '1 hour')}),
		'5', 'another session: 5 calls admitted');
	is($t->query_safe(sprintf($held, 'ok')), '4', '... from the batch: 4 units held');
	is(rows_of('ok'), '3 12 10', '... and no row written');
	# the key is hot on the server, so the other database reserves at once
	is($node->safe_psql('other', q{SET slidewin.local_batch = 10; SET slidewin.local_batch_time = '10s'; SELECT rl_allow('ok', 100, '1 hour')}),
		't', 'another database: admitted');
	is(rows_of('ok', 'other'), '1 10 10', '... by a batch of its own, a row of its own store');
	is($node->safe_psql('other', sprintf($held, 'ok')), '9', '... whose units it sees, and not the 4 of the first');
	is($t->query_safe(sprintf($held, 'ok')), '4', '... which are as they were');
	$t->quit;

	# one transaction that uses up batch after batch: a used-up batch is
	# forgotten at once, so the transaction goes on reserving (a backend
	# keeps at most 8 batches pending)
	is($s->query_safe(q{SELECT count(*) FROM generate_series(1, 500) g WHERE rl_allow('loop', 1000 + 0 * g, '1 hour')}),
		'500', 'one statement of 500 calls: all admitted');
	my ($rows, $units) = split / /, rows_of('loop');
	note("500 calls in one transaction: $rows rows of $units units");
	cmp_ok($rows, '<=', 60, "... from batch after batch of 10: $rows rows, not one a call past the 8th batch");
	$s->quit;
}

# ---------------------------------------------------------------------
# 4. An ended batch's rest goes back
# ---------------------------------------------------------------------
{
	my $s = $node->background_psql('postgres');
	$s->query_safe('SET slidewin.local_batch = 10');
	$s->query_safe("SET slidewin.local_batch_time = '300ms'");
	my $one = q{SELECT take('%s', 100, '1 hour')};
	my $used = q{SELECT 100 - remaining FROM rl_peek('%s', 100, '1 hour')};

	# the 3 calls of the warm-up and 2 more, one statement: 5 of the 10 used
	is($s->query_safe(q{SELECT count(*) FROM generate_series(1, 5) g WHERE take('gb', 100 + 0 * g, '1 hour')}),
		'5', '5 calls: two alone, three from a batch of 10');
	is(rows_of('gb'), '3 12 10', '... rows of 1, 1 and the batch of 10');
	is($s->query_safe(sprintf($held, 'gb')), '7', '... 7 units not used');
	# 0.9 s: the batch has ended, and the key's calls are too rare for
	# another (their average gap, a quarter of this one, is over d / 2)
	usleep(900_000);
	is($s->query_safe(sprintf($one, 'gb')), 't', 'after the batch ended: the next call is admitted');
	is(rows_of('gb'), '4 6 3', '... and gave the 7 back: the batch row holds the 3 used, beside its own row');
	is($s->query_safe(sprintf($used, 'gb')), '6', '... so the window counts 6 units, not 13');
	is($s->query_safe(sprintf($held, 'gb')), '0', '... and nothing is held');
	is($node->safe_psql('postgres', q{SELECT string_agg(cost::text, ' ' ORDER BY ts) FROM rl_fallback_carry WHERE key = 'slidewin:gb'}),
		'1 1 10 1', '... while the carry rows keep the batch whole, for Redis to count every unit');

	# given back in a transaction that rolls back: nothing is given
	is($s->query_safe(q{SELECT count(*) FROM generate_series(1, 5) g WHERE take('gr', 100 + 0 * g, '1 hour')}),
		'5', 'another key: a batch of 10, 3 of it used');
	usleep(900_000);
	$s->query_safe('BEGIN');
	is($s->query_safe(sprintf($one, 'gr')), 't', 'in a transaction: the next call gives the rest back');
	is($s->query_safe(q{SELECT count(*) || ' ' || sum(cost) || ' ' || max(cost) FROM rl_fallback_log WHERE key = 'slidewin:gr'}),
		'4 6 3', '... which its transaction sees');
	$s->query_safe('ROLLBACK');
	is(rows_of('gr'), '3 12 10', '... and which its rollback takes back: the 7 stay counted');
	is($s->query_safe(sprintf($one, 'gr')), 't', 'the next call');
	is(rows_of('gr'), '4 13 10', '... gives nothing back again: the batch was given up once');

	# no call of the key within 4 d of its end: the rest stays counted
	is($s->query_safe(q{SELECT count(*) FROM generate_series(1, 5) g WHERE take('gl', 100 + 0 * g, '1 hour')}),
		'5', 'a third key: a batch of 10, 3 of it used');
	usleep(2_000_000);
	is($s->query_safe(sprintf($one, 'gl')), 't', 'called again 2 s later (4 d is 1.2 s)');
	is(rows_of('gl'), '4 13 10', '... too late: nothing is given back');
	$s->quit;
}

# ---------------------------------------------------------------------
# 5. Carried into Redis at its end, ahead of Redis's now
# ---------------------------------------------------------------------
{
	my $s = $node->background_psql('postgres');
	$s->query_safe('SET slidewin.local_batch = 10');
	$s->query_safe("SET slidewin.local_batch_time = '10s'");
	is($s->query_safe(sprintf($warm, 'fut')), '3', 'in the fallback store: a batch of 10, scored 10 s ahead');
	$s->quit;
	$redis->restart;
	# batches off: the call goes to Redis, and carries the key's rows first
	SlidewinTest::wait_for('Redis answers', sub {
		$node->safe_psql('postgres', q{SELECT store FROM rl_attempt('fut', 100, '1 hour')}) eq 'redis' }, 20);
	my ($sec, $usec) = split /\n/, scalar $redis->cli('time');
	my $now = $sec * 1_000_000 + $usec;
	my @z = split /\n/, scalar $redis->cli('zrange', 'slidewin:log:fut', '0', '-1', 'withscores');
	my ($prev, @units) = (0);
	for (my $i = 0; $i + 1 < @z; $i += 2)
	{
		push @units, [ $z[$i] - $prev, $z[ $i + 1 ] - $now ];
		$prev = $z[$i];
	}
	my ($batch) = grep { $_->[0] == 10 } @units;
	note('the log in Redis, as [units, score less Redis now (us)]: '
		  . join(' ', map { "[$_->[0], $_->[1]]" } @units));
	ok($batch, 'the batch of 10 was carried into Redis');
	cmp_ok($batch ? $batch->[1] : 0, '>', 5_000_000,
		'... scored at its end, seconds ahead of Redis now');
}

done_testing();
