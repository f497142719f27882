# Local batches (slidewin.local_batch) under Redis Cluster: two PostgreSQL
# servers, both preloading slidewin, share a cluster of 3 masters.
#  1. Batches are made: a hot key's master runs far fewer scripts than the
#     calls made, and its log holds entries of a batch's weight; once the
#     batches ended, the log (read from the key's master) counts exactly
#     the admissions.
#  2. The unused rest of a batch goes back to the key's master within d
#     plus a margin for the round trip and this loaded machine.
#  3. rl_batch_held and rl_peek (and rl_headers) on the server holding the
#     batch and on the other; rl_attempt_all over two slots counts the
#     batch's entry; rl_reset and rl_block end the batches of the key.
#  4. Exact with a limit that binds: 8 pgbench clients on each server, one
#     key; no window of win holds more than lim admissions (each use is
#     bracketed by the server's clock, as in 074_local_batch).
#  5. The key's slot moves to another master while a batch is live: a
#     reserve made on an empty window kept the ledger beside the log (as an
#     ordinary attempt does under Cluster), so calls during the migration
#     are answered by Redis (no TRYAGAIN); after the move the worker's
#     refund meets MOVED on the old owner, follows it, and the log on the
#     new owner ends with exactly the units used.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep sleep);
use SlidewinTest;

my $cluster = SlidewinTest::start_cluster(masters => 3, replicas => 0);
my @conf = ("slidewin.redis_url = '$cluster->{url}'", 'slidewin.redis_retry_interval = 0',
	"shared_preload_libraries = 'slidewin'", 'max_connections = 30');
my $a_node = SlidewinTest::new_node('cbatch_a', undef, \@conf);
my $b_node = SlidewinTest::new_node('cbatch_b', undef, \@conf);

sub masters { return SlidewinTest::cluster_masters($cluster) }
sub node_id { return scalar $_[0]->cli('cluster', 'myid') }
# the eight hex digits of the key's Cluster hash tag
sub fnv { return substr(SlidewinTest::cluster_tag($_[0]), 1, 8) }
sub tag    { return 'slidewin:{' . fnv($_[0]) . '}' }
sub logkey { return tag($_[0]) . "log:$_[0]" }
sub ledgerkey { return tag($_[0]) . "logr:$_[0]" }
sub blockkey  { return tag($_[0]) . "blk:$_[0]" }

# The master that holds the key's log now.
sub holder
{
	my ($k) = @_;
	my @h = grep { scalar($_->cli('exists', logkey($k))) eq '1' } masters();
	return $h[0];
}

# Script calls a master redirected (MOVED or ASK).
sub rejected
{
	my ($m) = @_;
	my $n = 0;
	$n += $_ for scalar($m->cli('info', 'commandstats')) =~ /cmdstat_(?:eval(?:sha)?|fcall):.*?rejected_calls=(\d+)/g;
	return $n;
}

# The entries of key $k's log on master $m, oldest first, as [score, units]
# (a window of an hour: no entry of these keys has left it).
sub log_entries
{
	my ($m, $k) = @_;
	my @z = split /\n/, scalar $m->cli('zrange', logkey($k), '0', '-1', 'withscores');
	my ($prev, @e) = (0);
	for (my $i = 0; $i + 1 < @z; $i += 2)
	{
		push @e, [ $z[ $i + 1 ], $z[$i] - $prev ];
		$prev = $z[$i];
	}
	return @e;
}

# The units key $k's log on master $m counts: its newest running total less
# what its ledger gave back (refunds are scored by their entries; the base
# is scored -inf, reservations +inf).
sub net_units
{
	my ($m, $k) = @_;
	my @e = log_entries($m, $k);
	my $total = 0;
	$total += $_->[1] for @e;
	my @z = split /\n/, scalar $m->cli('zrange', ledgerkey($k), '0', '-1', 'withscores');
	my ($base, $given) = (0, 0);
	for (my $i = 0; $i + 1 < @z; $i += 2)
	{
		my ($member, $score) = @z[ $i, $i + 1 ];
		if ($score eq '-inf') { $base = $member }
		elsif ($score ne 'inf' && $member > $given) { $given = $member }
	}
	return $total - ($given > $base ? $given - $base : 0);
}

for my $n ($a_node, $b_node)
{
	SlidewinTest::bracketed_take($n);
	# the time key k's window, as Redis counts it, first holds want units
	$n->safe_psql('postgres', q{
		CREATE FUNCTION back_at(k text, l bigint, want bigint) RETURNS float8 LANGUAGE plpgsql AS $$
		BEGIN
		  FOR i IN 1 .. 2000 LOOP
		    IF (SELECT l - p.remaining FROM rl_peek(k, l, '1 hour') p) = want THEN
		      RETURN extract(epoch FROM clock_timestamp());
		    END IF;
		    PERFORM pg_sleep(0.005);
		  END LOOP;
		  RETURN NULL;
		END $$});
}

# ---------------------------------------------------------------------
# 1. Batches are made on a hot key; Redis ends up counting the admissions
# ---------------------------------------------------------------------
{
	$a_node->safe_psql('postgres', q{SELECT rl_allow('hot', 1000000000, '1 hour')});
	my $m = holder('hot') or die 'the hot key is nowhere';
	my $before = $m->scripts_run;
	my $sa = $a_node->background_psql('postgres');
	$sa->query_safe('SET slidewin.local_batch = 100');
	$sa->query_safe("SET slidewin.local_batch_time = '100ms'");
	is($sa->query_safe(q{SELECT count(*) FROM generate_series(1, 2000) g WHERE rl_allow('hot', 1000000000 + 0 * g, '1 hour')}),
		'2000', 'a hot key: 2000 calls admitted');
	my $calls = $m->scripts_run - $before;
	note(sprintf('hot key: 2000 calls, %d scripts on its master (%.4f per call)', $calls, $calls / 2000));
	cmp_ok($calls / 2000, '<', 0.1, "far fewer scripts on the key's master than calls ($calls)");
	my @sizes = map { $_->[1] } log_entries($m, 'hot');
	my ($most) = sort { $b <=> $a } @sizes;
	cmp_ok(scalar(grep { $_ > 1 } @sizes), '>', 0, "the key's log holds batches (the largest $most units)");
	cmp_ok($most, '<=', 100, 'none above slidewin.local_batch');
	SlidewinTest::wait_for('the batches\' rest back', sub { net_units($m, 'hot') <= 2001 }, 10);
	is(net_units($m, 'hot'), 2001, "once the batches ended, the key's master counts exactly the 2001 admissions");
	is($b_node->safe_psql('postgres', q{SELECT 1000000000 - remaining FROM rl_peek('hot', 1000000000, '1 hour')}),
		'2001', '... and so does rl_peek on the other server');
	$sa->quit;
}

# ---------------------------------------------------------------------
# 2, 3. The rest goes back within d; held units; other slots; reset, block
# ---------------------------------------------------------------------
{
	# long enough for the checks below to run while the batch lives, on a
	# loaded machine too; what only reads Redis is done after them
	my $d = 1.5;
	my $sa = $a_node->background_psql('postgres');
	my $sb = $b_node->background_psql('postgres');
	$sa->query_safe('SET slidewin.local_batch = 50');
	$sa->query_safe("SET slidewin.local_batch_time = '1500ms'");
	# a key of another slot than 'back', for rl_attempt_all below
	my ($any) = masters();
	my $slot_back = scalar $any->cli('cluster', 'keyslot', logkey('back'));
	my ($other) = grep { scalar($any->cli('cluster', 'keyslot', logkey($_))) != $slot_back }
	  map { "other:$_" } 1 .. 5;
	my $t0 = time;
	is($sa->query_safe(q{SELECT count(*) FROM generate_series(1, 5) g WHERE rl_allow('back', 100 + 0 * g, '1 hour')}),
		'5', 'five calls in quick succession admitted');
	# the batch was made between t0 and now, by the first of the calls
	my $made_by = time - $t0;
	# Watch for the rest from now on, from the other server, while the
	# checks below run: what they take must not delay the watch and be taken
	# for the worker's delay.
	my ($back_out, $back_err) = ('', '');
	my $watch = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $b_node->connstr('postgres'), '-c', q{SELECT back_at('back', 100, 5)} ],
		'<', \undef, '>', \$back_out, '2>', \$back_err);
	my $held = $sa->query_safe(q{SELECT rl_batch_held('back', 100, '1 hour')});
	my $peek_b = $sb->query_safe(q{SELECT remaining FROM rl_peek('back', 100, '1 hour')});
	my $hdr = $sb->query_safe(q{SELECT rl_headers(p)->>'RateLimit' FROM rl_peek('back', 100, '1 hour') p});
	# rl_attempt_all on the other server, over 'back' and a key of another
	# slot, for one unit more than that server's peek says is left: the
	# batch's entry counts there as any entry does (rolled back, so that a
	# machine too slow to ask while the batch lives leaves no units of its
	# own on the key)
	my $all = $sb->query_safe(qq{BEGIN;
		SELECT allowed FROM rl_attempt_all(ARRAY['back', '$other'], ARRAY[100, 100]::bigint[],
		ARRAY['1 hour', '1 hour']::interval[], ARRAY[@{[ $peek_b + 1 ]}, 1]::bigint[],
		refund_on_abort => true);
		ROLLBACK;});
	my $live_at = time - $t0;
	# what the key's master holds: the batch's entry stays in the log (its
	# rest goes back through the ledger), so it can be read after the batch
	my $m = holder('back') or die 'the key is nowhere';
	my @e = log_entries($m, 'back');
	my $counted = 0;
	$counted += $_->[1] for @e;
	cmp_ok(scalar(grep { $_->[1] > 1 } @e), '>=', 1, "its master's log holds a batch ($counted units in all)");
	cmp_ok($live_at, '<', $d, sprintf('the checks of a live batch ran while it lived (%.3f s of %.3f s)', $live_at, $d));
	is($held, $counted - 5, "rl_batch_held on the server holding the batch: its unused units ($held)");
	is($peek_b, 100 - $counted, "rl_peek on the other server counts the batch's units as used ($counted)");
	my ($r_hdr) = $hdr =~ /;r=(\d+)/;
	cmp_ok($r_hdr // 999, '<=', 100 - $counted, "rl_headers on the other server promises none of them ($hdr)");
	is($all, 'f', "rl_attempt_all over two slots counts the batch's entry: one unit more than the rest is denied");
	is($sb->query_safe(q{SELECT rl_batch_held('back', 100, '1 hour')}), '0', 'rl_batch_held on the other server: none');

	$watch->finish;
	chomp(my $back = $back_out);
	is($back_err, '', 'the watch ran');
	isnt($back, '', "the unused units went back to the key's master, with no call on the key");
	$back = ($back || 9e9) - $t0;
	note(sprintf('unused units back after %.3f s (d = %.3f s; the batch made within %.3f s)', $back, $d, $made_by));
	cmp_ok($back, '<=', $made_by + $d + 0.2,
		sprintf('they were back within d + 0.2 s of the batch (%.3f s, the batch made within %.3f s)', $back, $made_by));
	cmp_ok($back, '>=', $d, sprintf('and not before the batch ended (%.3f s)', $back));
	is(net_units(holder('back'), 'back'), 5, "the log on the key's master counts the 5 used");
	SlidewinTest::wait_for('the batch to be freed',
		sub { $sa->query_safe(q{SELECT rl_batch_held('back', 100, '1 hour')}) eq '0' }, 5);
	pass('once given back, the batch holds nothing');

	# rl_reset ends the server's batches of the key (a long d: only the
	# reset can end them)
	$sa->query_safe("SET slidewin.local_batch_time = '5s'");
	is($sa->query_safe(q{SELECT count(*) FROM generate_series(1, 5) g WHERE rl_allow('rst', 100 + 0 * g, '1 hour')}),
		'5', 'five calls on another key, the last ones from a batch that lives 5 s');
	cmp_ok($sa->query_safe(q{SELECT rl_batch_held('rst', 100, '1 hour')}), '>', 0, 'a batch holds units');
	$a_node->safe_psql('postgres', q{SELECT rl_reset('rst')});
	SlidewinTest::wait_for('the reset batch to be freed',
		sub { $sa->query_safe(q{SELECT rl_batch_held('rst', 100, '1 hour')}) eq '0' }, 2);
	pass('rl_reset ended the batch: it holds nothing, well before its 5 s');
	my ($ok, $left) = split /\|/, $sa->query_safe(q{SELECT allowed, remaining FROM rl_attempt('rst', 100, '1 hour')});
	is($ok, 't', 'after rl_reset, the next call is admitted');
	is($b_node->safe_psql('postgres', q{SELECT remaining FROM rl_peek('rst', 100, '1 hour')}), $left,
		'Redis counts what it said, from an empty log');

	is($sa->query_safe(q{SELECT count(*) FROM generate_series(1, 5) g WHERE rl_allow('blk', 100 + 0 * g, '1 hour')}),
		'5', 'five calls on a third key, from a batch');
	$a_node->safe_psql('postgres', q{SELECT rl_block('blk', '1 hour')});
	is($sa->query_safe(q{SELECT allowed FROM rl_attempt('blk', 100, '1 hour')}), 'f',
		'a block from another session denies the next call, batch or not');
	$a_node->safe_psql('postgres', q{SELECT rl_reset('blk'), rl_unblock('blk')});
	$sa->quit;
	$sb->quit;
}

# ---------------------------------------------------------------------
# 4. A limit that binds: 8 clients on each server, one key
# ---------------------------------------------------------------------
sub fullest_window
{
	my ($k, $win) = @_;
	return SlidewinTest::taken_fullest([ $a_node, $b_node ], $k, $win);
}

{
	my ($lim, $win) = (40, 0.2);
	SlidewinTest::pgbench_on_each("\\set s random(1, 20)\n\\sleep :s ms\nSELECT take('bind', $lim, '200 ms');\n",
		'-c slidewin.local_batch=10 -c slidewin.local_batch_time=30', [ '-T', '2' ], $a_node, $b_node);
	my ($max, $n) = fullest_window('bind', $win);
	note("binding limit: $n admitted on both servers; the fullest window of 200 ms holds $max");
	cmp_ok($n, '>', 3 * $lim, "the limit bound, and was filled again and again ($n admitted)");
	cmp_ok($max, '<=', $lim, "no window of 200 ms holds more than $lim admissions ($max)");
	for my $node ($a_node, $b_node)
	{
		cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM adm WHERE k = 'bind'}), '>', 0,
			$node->name . ' admitted some');
	}
}

# ---------------------------------------------------------------------
# 5. The key's slot moves while a batch is live
# ---------------------------------------------------------------------
{
	my $k  = 'mv';
	my $sa = $a_node->background_psql('postgres');
	my $sb = $b_node->background_psql('postgres');
	$sa->query_safe('SET slidewin.local_batch = 50');
	$sa->query_safe("SET slidewin.local_batch_time = '4s'");
	$sb->query_safe("SET slidewin.command_timeout = '1s'");
	# warm the key up, then empty its log: the next reserve is its first
	# write, as on a key whose window emptied
	is($sa->query_safe(qq{SELECT count(*) FROM generate_series(1, 3) g WHERE rl_allow('$k', 100 + 0 * g, '1 hour')}),
		'3', 'the key warms up');
	$a_node->safe_psql('postgres', qq{SELECT rl_reset('$k')});
	SlidewinTest::wait_for('the reset batch to be freed',
		sub { $sa->query_safe(qq{SELECT rl_batch_held('$k', 100, '1 hour')}) eq '0' }, 5);
	my $t_r = time;
	is($sa->query_safe(qq{SELECT count(*) FROM generate_series(1, 3) g WHERE rl_allow('$k', 100 + 0 * g, '1 hour')}),
		'3', 'three calls, from a batch reserved on the emptied log');
	my $src = holder($k) or die 'the key is nowhere';
	my @e = log_entries($src, $k);
	my $taken = $e[0][1];
	is(scalar @e, 1, 'the log holds one entry: the batch');
	cmp_ok($taken, '>', 3, "of more than the 3 units used ($taken)");
	is(scalar $src->cli('exists', ledgerkey($k)), '1',
		'the reserve kept the ledger beside the log, as an attempt under Cluster does');
	is(scalar $src->cli('exists', blockkey($k)), '1', '... and the block key');

	my ($dst) = grep { $_->port != $src->port } masters();
	my $slot = scalar $src->cli('cluster', 'keyslot', logkey($k));
	my $b_calls = sub {
		return $sb->query_safe(qq{SELECT count(*) FILTER (WHERE (r).allowed AND (r).store = 'redis')
			FROM generate_series(1, 5) g, rl_attempt('$k', 100 + 0 * g, '1 hour', 1, 'fallback') r});
	};
	$dst->cli('cluster', 'setslot', $slot, 'importing', node_id($src));
	$src->cli('cluster', 'setslot', $slot, 'migrating', node_id($dst));
	is($b_calls->(), '5', 'slot migrating: the other server\'s calls answered by Redis (no TRYAGAIN)');
	my @keys = split /\n/, scalar $src->cli('cluster', 'getkeysinslot', $slot, 1000);
	my $mig = $src->cli('migrate', '127.0.0.1', $dst->port, '', 0, 5000, 'keys', @keys);
	note("MIGRATE of @keys: $mig");
	is($b_calls->(), '5', 'keys moved (ASK): the other server\'s calls answered by Redis');
	$dst->cli('cluster', 'setslot', $slot, 'node', node_id($dst));
	$_->cli('cluster', 'setslot', $slot, 'node', node_id($dst)) for masters();
	my $moved_at = time;
	cmp_ok($moved_at - $t_r, '<', 4, sprintf('the slot moved while the batch lived (%.2f s after its reserve)', $moved_at - $t_r));
	my $held = $sa->query_safe(qq{SELECT rl_batch_held('$k', 100, '1 hour')});
	is($held, $taken - 3, "the batch still holds its $held unused units");
	is(net_units($dst, $k), $taken + 10, 'the new owner counts the batch and the 10 other calls');
	my $rej = rejected($src);

	# no call on the key from now on: only the worker's refund
	my $want = 3 + 10;
	SlidewinTest::wait_for('the refund on the new owner', sub { net_units($dst, $k) == $want }, 15);
	my $back = time - $t_r;
	note(sprintf('rest back on the new owner %.2f s after the reserve (d = 4 s)', $back));
	is(net_units($dst, $k), $want, "the log on the new owner ends with exactly the $want units used");
	cmp_ok($back, '>=', 4, 'not before the batch ended');
	cmp_ok(rejected($src) - $rej, '>', 0, 'the worker\'s refund met MOVED on the old owner, and followed it');
	like(scalar $src->cli('exists', logkey($k)), qr/^MOVED $slot /, 'the old owner sends the key on');
	is($b_node->safe_psql('postgres', qq{SELECT 100 - remaining FROM rl_peek('$k', 100, '1 hour')}), $want,
		'rl_peek agrees');
	SlidewinTest::wait_for('the batch to be freed',
		sub { $sa->query_safe(qq{SELECT rl_batch_held('$k', 100, '1 hour')}) eq '0' }, 5);
	pass('the worker freed the batch');
	$sa->quit;
	$sb->quit;
}

unlike(slurp_file($a_node->logfile), qr/PANIC|terminated by signal/, 'no crash');
$a_node->stop;
$b_node->stop;
done_testing();
