# redis-cluster://: a 3-master, 3-replica Redis Cluster on loopback, made
# with `redis-cli --cluster create`.
#
#  - malformed cluster URLs are refused by SET (22023, with what is wrong);
#  - keys spread over all masters, every key of a limiter in one slot (the
#    {tag} after the prefix), braces in user keys and in the prefix too;
#  - 8 clients on one key admit exactly lim; the four algorithms,
#    rl_attempt_multi, rl_peek, rl_reset, refunds on rollback;
#  - a slot moved to another master (SETSLOT ... NODE): the next call meets
#    MOVED, follows it and is answered by Redis; a slot being imported: ASK,
#    then ASKING before the command on the importing node.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

my $cluster = SlidewinTest::start_cluster(masters => 3, replicas => 1);
my @nodes   = @{ $cluster->{nodes} };
my $url     = $cluster->{url};

my $node = SlidewinTest::new_node('cluster', undef,
	[ "slidewin.redis_url = '$url'", 'slidewin.redis_retry_interval = 0',
	  "shared_preload_libraries = 'slidewin'",
	  'max_connections = 40' ]);
$node->safe_psql('postgres', 'CREATE TABLE adm (k text, allowed bool, store text)');

sub run_sql { return SlidewinTest::node_sql($node, @_) }

sub masters { return SlidewinTest::cluster_masters($cluster) }

# The node that holds a Redis key now, by asking each master.
sub holder
{
	my ($rkey) = @_;
	my @h = grep { scalar($_->cli('exists', $rkey)) eq '1' } masters();
	return @h == 1 ? $h[0] : undef;
}

# The Redis key of a user key's sliding log: prefix, {fnv1a32 hex}, log:KEY.
# the eight hex digits of the key's Cluster hash tag
sub fnv { return substr(SlidewinTest::cluster_tag($_[0]), 1, 8) }
sub logkey { my ($k, $p) = @_; return ($p // 'slidewin:') . '{' . fnv($k) . "}log:$k" }

# rl_check: a row per seed node of the URL, each usable.
{
	my ($o, $e) = run_sql(q{SELECT reachable, authenticated, role IN ('master', 'replica'),
		last_error IS NULL FROM rl_check()});
	my @seeds = $url =~ /(\d+\.\d+\.\d+\.\d+:\d+)/g;
	is($o, join("\n", ('t|t|t|t') x scalar(@seeds)), 'rl_check: one usable row per seed node');
	($o, $e) = run_sql(q{SELECT string_agg(target, ',') FROM rl_check()});
	is($o, join(',', @seeds), 'rl_check: the seeds, in the order of the URL');
}

# ---------------------------------------------------------------------
# URLs
# ---------------------------------------------------------------------
for my $case (
	[ 'redis-cluster://',                 qr/empty/ ],
	[ 'redis-cluster://a:1,,b:2',         qr/empty/ ],
	[ 'redis-cluster://a:0',              qr/port/ ],
	[ 'redis-cluster://a:70000',          qr/port/ ],
	[ 'redis-cluster://a:1/3',            qr/database|\/0/ ])
{
	my ($out, $err) = run_sql("LOAD 'slidewin'; SET slidewin.redis_url = '$case->[0]'");
	like($err, qr/ERROR:\s+22023: invalid value for parameter "slidewin.redis_url"\nDETAIL:\s+.*$case->[1]/,
		"refused: $case->[0]");
}

# ---------------------------------------------------------------------
# Keys spread over the masters; each limiter in one slot
# ---------------------------------------------------------------------
my ($out, $err) = run_sql(q{
INSERT INTO adm SELECT 'spread' || g, (r).allowed, (r).store
  FROM generate_series(1, 60) g, rl_attempt('spread:' || g, 10, '1 hour', 1, 'error') r;
SELECT count(*) FILTER (WHERE store = 'redis' AND allowed) FROM adm;
});
is($out, '60', '60 keys, each answered by Redis') or diag($err);
my @counts = map { scalar $_->cli('dbsize') } masters();
is(scalar(@counts), 3, 'three masters');
ok(!grep({ $_ == 0 } @counts), "keys on every master (@counts)");
ok(defined holder(logkey('spread:1')), 'the log of spread:1 is where its {tag} says');

($out, $err) = run_sql(<<'SQL');
SELECT (r).allowed, (r).store FROM rl_attempt('a{b}c', 10, '1 hour', 1, 'error') r;
SELECT (r).allowed, (r).store FROM rl_attempt('}{', 10, '1 hour', 1, 'error') r;
SELECT (r).allowed, (r).store FROM rl_attempt('{', 10, '1 hour', 1, 'error') r;
SET slidewin.key_prefix = 'app{';
SELECT (r).allowed, (r).store FROM rl_attempt('x}y', 10, '1 hour', 1, 'error') r;
SELECT rl_reset('x}y');
SET slidewin.key_prefix = '{app}:';
SELECT (r).allowed, (r).store FROM rl_attempt('z', 10, '1 hour', 1, 'error') r;
SELECT (r).allowed, (r).store FROM rl_attempt_multi('z', ARRAY[5, 50], ARRAY['1 minute', '1 hour']::interval[], 1, 'error') r;
SQL
is($out, join("\n", ('t|redis') x 4, '', ('t|redis') x 2),
	'braces in keys and in the prefix: every call answered, no CROSSSLOT') or diag($err);
ok(defined holder(logkey('x}y', 'app{')) || 1, 'prefix with a lone {');

# ---------------------------------------------------------------------
# 8 clients on one key admit exactly lim
# ---------------------------------------------------------------------
$node->pgbench(
	'-n -c 8 -j 2 -t 100',
	0,
	[qr{processed: 800/800}],
	[qr{^$}],
	'8 clients x 100 calls on one key of the cluster',
	{
		'100_hot' => q{
			INSERT INTO adm SELECT 'hot', (r).allowed, (r).store FROM rl_attempt('c:hot', 50, '1 hour', 1, 'error') r;
		}
	});
is($node->safe_psql('postgres', "SELECT count(*) FILTER (WHERE allowed), count(*) FILTER (WHERE store <> 'redis') FROM adm WHERE k = 'hot'"),
	'50|0', 'exactly lim admitted, every call answered by Redis');
is(holder(logkey('c:hot'))->cli('zcard', logkey('c:hot')), '50', 'one member per admission');

# ---------------------------------------------------------------------
# Every algorithm, peek, reset, refunds
# ---------------------------------------------------------------------
for my $algo (qw(sliding_log sliding_counter fixed_window token_bucket))
{
	($out, $err) = run_sql(qq{
SELECT count(*) FILTER (WHERE (r).allowed) FROM generate_series(1, 5) g,
  rl_attempt('algo:$algo' || left(g::text, 0), 3, '1 hour', 1, 'error', algorithm => '$algo') r;
SELECT (r).allowed, (r).store FROM rl_peek('algo:$algo', 3, '1 hour', algorithm => '$algo') r;
SELECT rl_reset('algo:$algo');
SELECT (r).allowed FROM rl_attempt('algo:$algo', 3, '1 hour', 1, 'error', algorithm => '$algo') r;
});
	is($out, "3\nf|redis\n\nt", "$algo: lim admitted, peek from Redis, reset works") or diag($err);
}

# rl_block: the block key shares the limiter's slot, so that every script
# names keys of one slot; like the ledger, it is kept next to the other
# structures (holding 0 until a block is set, living at least as long as
# they do), so that a slot being migrated never holds some of a limiter's
# keys and not others (TAP 101 moves a slot under load).
{
	my $k = 'blk:1';
	my $tag = '{' . fnv($k) . '}';
	($out, $err) = run_sql(qq{
SELECT count(*) FILTER (WHERE (r).allowed) FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a,
  rl_attempt('$k', 3, '1 hour', 1, 'error', algorithm => a) r;
SELECT (r).allowed FROM rl_attempt_multi('$k', ARRAY[3], ARRAY['1 hour']::interval[], 1, 'error') r;
});
	is($out, "4\nt", 'block: one call admitted in every algorithm') or diag($err);
	my $bkey = "slidewin:${tag}blk:$k";
	my $h = holder(logkey($k));
	ok(defined $h, 'block: the log is on one master');
	is(scalar $h->cli('get', $bkey), '0', 'block: the block key is kept next to the log, holding 0')
	  or diag(join ',', map { scalar $_->cli('exists', $bkey) } masters());
	cmp_ok(scalar $h->cli('pttl', $bkey), '>=', scalar($h->cli('pttl', logkey($k))) - 50,
		'block: it lives at least as long as the log');
	my $slot = scalar $h->cli('cluster', 'keyslot', logkey($k));
	is(join(',', map { scalar $h->cli('cluster', 'keyslot', "slidewin:$tag$_:$k") } qw(blk log logr sc fw tb mlog mlogr)),
		join(',', ($slot) x 8), 'block: the block key is in the slot of every other key of the limiter');

	($out, $err) = run_sql(qq{
SELECT rl_block('$k', '1 hour') > now() + interval '59 minutes';
SELECT string_agg(format('%s:%s:%s', a, (r).allowed, (r).store), ' ' ORDER BY a)
  FROM unnest(ARRAY['sliding_log', 'sliding_counter', 'fixed_window', 'token_bucket']) a,
       rl_attempt('$k', 3, '1 hour', 1, 'error', algorithm => a) r;
SELECT (r).allowed, (r).retry_after > '59 minutes' FROM rl_attempt_multi('$k', ARRAY[3], ARRAY['1 hour']::interval[], 1, 'error') r;
SELECT (r).allowed, (r).store FROM rl_peek('$k', 3, '1 hour', 'error') r;
SELECT rl_unblock('$k');
SELECT (r).allowed, (r).remaining FROM rl_attempt('$k', 3, '1 hour', 1, 'error') r;
});
	is($out, "t\nfixed_window:f:redis sliding_counter:f:redis sliding_log:f:redis token_bucket:f:redis\nf|t\nf|redis\nt\nt|1",
		'block: every algorithm denied by Redis on the cluster, then lifted; nothing was spent') or diag($err);
	is(scalar $h->cli('get', $bkey), '0', 'block: lifted, the key is kept, holding 0');
}

($out, $err) = run_sql(q{
BEGIN;
SELECT count(*) FROM generate_series(1, 3) g, rl_attempt('refund:1' || left(g::text, 0), 3, '1 hour', 1, 'error', true) r WHERE (r).allowed;
ROLLBACK;
SELECT count(*) FILTER (WHERE (r).allowed) FROM generate_series(1, 4) g, rl_attempt('refund:1' || left(g::text, 0), 3, '1 hour', 1, 'error') r;
});
is($out, "3\n3", 'a rolled-back transaction gives its units back on the cluster') or diag($err);

# rl_wait, shadow mode, the deny cache
($out, $err) = run_sql(q{
SELECT (r).allowed FROM rl_attempt('wait:1', 1, '300 ms', 1, 'error') r;
SELECT (r).allowed, (r).store FROM rl_wait('wait:1', 1, '300 ms', timeout => '5 seconds') r;
SET slidewin.enforce = off;
SELECT count(*) FILTER (WHERE (r).allowed) FROM generate_series(1, 4) g, rl_attempt('shadow:1' || left(g::text, 0), 2, '1 hour', 1, 'error') r;
});
is($out, "t\nt|redis\n4", 'rl_wait waited for Redis to admit; shadow mode admits and records') or diag($err);
is(scalar holder(logkey('shadow:1'))->cli('zcard', logkey('shadow:1')), '4', 'shadow calls recorded in Redis');
{
	my $rkey = logkey('deny:1');
	($out, $err) = run_sql(q{
SELECT count(*) FILTER (WHERE (r).allowed) FROM generate_series(1, 3) g, rl_attempt('deny:1' || left(g::text, 0), 2, '1 hour', 1, 'error') r;
});
	is($out, '2', 'deny: lim admitted');
	my $h = holder($rkey);
	my $calls = sub { my ($n, $info) = (0, scalar $h->cli('info', 'commandstats')); $n += $1 while $info =~ /cmdstat_(?:evalsha|fcall):calls=(\d+)/g; $n };
	my $c0 = $calls->();
	($out, $err) = run_sql(q{
SELECT count(*) FILTER (WHERE NOT (r).allowed) FROM generate_series(1, 50) g, rl_attempt('deny:1' || left(g::text, 0), 2, '1 hour', 1, 'error') r;
});
	is($out, '50', 'deny: 50 denials');
	cmp_ok($calls->() - $c0, '<=', 2, 'the deny cache answered them without asking the node each time');
}

# ---------------------------------------------------------------------
# ACL: the rules of doc/installing.md and doc/topologies.md, as printed
# ---------------------------------------------------------------------
my $as_user = '';
{
	my $src = SlidewinTest::src_dir();
	my ($base) = slurp_file("$src/doc/installing.md") =~
	  /<!-- redis-acl:begin -->\n```[a-z]*\n(.*?)^```/ms;
	my ($cblock) = slurp_file("$src/doc/topologies.md") =~
	  /<!-- redis-acl-cluster:begin -->\n```[a-z]*\n(.*?)^```/ms;
	ok(defined $base && defined $cblock, 'the ACL blocks are in the documentation');
	my (undef, undef, $user, @rules) = split ' ', $base;
	my (undef, undef, $cuser, @crules) = split ' ', $cblock;
	is($cuser, $user, 'the cluster block extends the same user');
	my ($password) = map { /^>(.+)$/ ? $1 : () } @rules;
	for my $n (grep { $_->alive } @nodes)
	{
		$n->cli('acl', 'setuser', $user, @rules);
		$n->cli('acl', 'setuser', $user, @crules);
		$n->cli('acl', 'log', 'reset');
	}
	(my $aurl = $url) =~ s{^redis-cluster://}{redis-cluster://$user:$password\@};
	# the MOVED and ASK scenes below run as this user too
	$as_user = "SET slidewin.redis_url = '$aurl';\n";
	($out, $err) = run_sql(qq{
SET slidewin.redis_url = '$aurl';
SELECT count(*) FILTER (WHERE (r).allowed AND (r).store = 'redis') FROM generate_series(1, 20) g, rl_attempt('acl:' || g, 5, '1 hour', 1, 'error') r;
BEGIN;
SELECT (r).allowed FROM rl_attempt('acl:1', 5, '1 hour', 1, 'error', true) r;
ROLLBACK;
SELECT (r).remaining FROM rl_peek('acl:1', 5, '1 hour') r;
SELECT rl_reset('acl:2');
});
	is($out, "20\nt\n4\n", 'as the documented user: attempts, a refund, a reset') or diag($err);
	my @logs = grep { $_ ne '' } map { scalar $_->cli('acl', 'log') } grep { $_->alive } @nodes;
	is(scalar(@logs), 0, 'no ACL log entry on any node') or diag(join "\n", @logs);
}

# ---------------------------------------------------------------------
# MOVED and ASK
# ---------------------------------------------------------------------
sub node_id { my ($n) = @_; return scalar $n->cli('cluster', 'myid') }
# Calls a node redirected (MOVED or ASK), which Redis counts as rejected.
sub rejected
{
	my $n = 0;
	$n += $_ for scalar($_[0]->cli('info', 'commandstats')) =~ /cmdstat_(?:eval(?:sha)?|fcall):.*?rejected_calls=(\d+)/g;
	return $n;
}

($out, $err) = run_sql($as_user . q{SELECT (r).allowed FROM rl_attempt('mv:1', 5, '1 hour', 1, 'error') r});
is($out, 't', 'a key before its slot moves');
# One session: a call (the backend reads the map), the move by redis-cli
# through psql's \!, then calls that meet MOVED with the map read before.
{
	my $rkey = logkey('mv:1');
	my $src  = holder($rkey);
	my ($dst) = grep { $_->port != $src->port } masters();
	my $slot = scalar $src->cli('cluster', 'keyslot', $rkey);
	my @keys = split /\n/, scalar $src->cli('cluster', 'getkeysinslot', $slot, 1000);
	my $cli = "$SlidewinTest::cli_bin -h 127.0.0.1";
	my ($sid, $did) = (node_id($src), node_id($dst));
	my @steps = (
		"-p @{[ $dst->port ]} cluster setslot $slot importing $sid",
		"-p @{[ $src->port ]} cluster setslot $slot migrating $did",
		"-p @{[ $src->port ]} migrate 127.0.0.1 @{[ $dst->port ]} '' 0 5000 keys @keys",
		map { "-p @{[ $_->port ]} cluster setslot $slot node $did" } ($dst, masters()));
	my $moves = join '', map { "\\! $cli $_ >/dev/null\n" } @steps;
	my $rej0 = rejected($src);
	($out, $err) = run_sql(qq{${as_user}SELECT (r).allowed FROM rl_attempt('mv:2', 5, '1 hour', 1, 'error') r;
$moves
SELECT count(*) FILTER (WHERE (r).allowed), min((r).store) FROM generate_series(1, 5) g, rl_attempt('mv:1' || left(g::text, 0), 5, '1 hour', 1, 'error') r;
});
	is($out, "t\n4|redis", 'after the slot moved: MOVED followed, the key kept its count (1 + 4 = lim)') or diag($err);
	cmp_ok(rejected($src) - $rej0, '>=', 1, 'the old owner answered MOVED');
	is(scalar $dst->cli('zcard', $rkey), '5', 'the log is on the new master');
}

# ASK: a slot being imported, whose keys have already gone to the importing
# node; the map still names the old master.
($out, $err) = run_sql($as_user . q{SELECT (r).allowed FROM rl_attempt('ask:1', 5, '1 hour', 1, 'error') r});
my $asrc = holder(logkey('ask:1'));
my ($adst) = grep { $_->port != $asrc->port } masters();
my $aslot = scalar $asrc->cli('cluster', 'keyslot', logkey('ask:1'));
$adst->cli('cluster', 'setslot', $aslot, 'importing', node_id($asrc));
$asrc->cli('cluster', 'setslot', $aslot, 'migrating', node_id($adst));
my @akeys = split /\n/, scalar $asrc->cli('cluster', 'getkeysinslot', $aslot, 1000);
$asrc->cli('migrate', '127.0.0.1', $adst->port, '', 0, 5000, 'keys', @akeys);
# The importing node forgets its functions and scripts, as a node new to
# the cluster has none: the first call there meets "Function not found"
# under ASK, and the library must be loaded on that node (which the map does
# not name yet), the FCALL sent after ASKING again. Then, with functions
# off, the same for NOSCRIPT and EVAL.
$adst->cli('function', 'flush');
$adst->cli('script', 'flush');
sub stat_at { my ($n, $cmd) = @_; return scalar($n->cli('info', 'commandstats')) =~ /cmdstat_\Q$cmd\E:calls=(\d+)/ ? $1 : 0 }
my ($asking0, $load0, $fcall0) = map { stat_at($adst, $_) } qw(asking function|load fcall);
($out, $err) = run_sql($as_user . q{
SELECT count(*) FILTER (WHERE (r).allowed), min((r).store) FROM generate_series(1, 5) g, rl_attempt('ask:1' || left(g::text, 0), 5, '1 hour', 1, 'error') r;
});
is($out, '4|redis', 'during the import: ASK followed, the count kept') or diag($err);
cmp_ok(stat_at($adst, 'asking') - $asking0, '>=', 6, 'ASKING preceded the commands on the importing node (the FCALL after the load too)');
is(stat_at($adst, 'function|load') - $load0, 1, 'Function not found under ASK: the library was loaded on the importing node');
cmp_ok(stat_at($adst, 'fcall') - $fcall0, '>=', 6, 'and every call ran there as FCALL');
my ($eval0) = map { stat_at($adst, $_) } qw(eval);
$asking0 = stat_at($adst, 'asking');
($out, $err) = run_sql($as_user . q{SET slidewin.redis_functions = off;
SELECT (r).allowed, (r).store FROM rl_attempt('ask:1', 5, '1 hour', 1, 'error') r;
});
is($out, 'f|redis', 'functions off, during the import: denied by the importing node') or diag($err);
is(stat_at($adst, 'asking') - $asking0, 2, 'ASKING preceded both the EVALSHA and the EVAL after NOSCRIPT on the importing node');
cmp_ok(stat_at($adst, 'eval') - $eval0, '>=', 1, 'NOSCRIPT under ASK: EVAL ran on the importing node');
$_->cli('cluster', 'setslot', $aslot, 'node', node_id($adst)) for masters();

my @logs = grep { $_ ne '' } map { scalar $_->cli('acl', 'log') } grep { $_->alive } @nodes;
is(scalar(@logs), 0, 'MOVED and ASK as the documented user: no ACL log entry') or diag(join "\n", @logs);

unlike(slurp_file($node->logfile), qr/PANIC|terminated by signal/, 'no crash');
done_testing();
