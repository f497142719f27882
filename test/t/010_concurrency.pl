# Real concurrency: 8 pgbench clients hammer one key with lim = 100 and a long
# window. Exactly 100 calls may be admitted, and Redis holds one member per
# admitted call.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
my $node  = SlidewinTest::new_node('conc', $redis);

$node->safe_psql('postgres',
	'CREATE TABLE admitted (k text, cost int, at timestamptz DEFAULT clock_timestamp())');

# One hot key, cost 1: 8 clients x 250 calls for 100 units.
$node->pgbench(
	'-n -c 8 -j 2 -t 250',
	0,
	[qr{processed: 2000/2000}],
	[qr{^$}],
	'8 clients x 250 calls on one key',
	{
		'010_hot' => q{
			INSERT INTO admitted SELECT 'hot', 1 WHERE rl_allow('tap:hot', 100, '1 hour');
		}
	});
is($node->safe_psql('postgres', "SELECT count(*) FROM admitted WHERE k = 'hot'"),
	'100', 'exactly lim calls admitted on the hot key');
is($redis->cli('zcard', 'slidewin:log:tap:hot'), '100',
	'one sorted-set member per admitted call');
is($node->safe_psql('postgres',
		"SELECT (r).allowed::text || ' ' || (r).remaining FROM rl_peek('tap:hot', 100, '1 hour') r"),
	'false 0', 'peek agrees: nothing left');

# Weighted costs on ten keys at once: per key, admitted cost never exceeds lim,
# and no member is spent on a denied call.
$node->pgbench(
	'-n -c 8 -j 2 -t 300',
	0,
	[qr{processed: 2400/2400}],
	[qr{^$}],
	'8 clients, weighted costs on ten keys',
	{
		'010_weighted' => q{
			\set k random(0, 9)
			\set c random(1, 7)
			INSERT INTO admitted SELECT 'w' || :k, :c WHERE rl_allow('tap:w' || :k, 60, '1 hour', :c);
		}
	});
my $rows = $node->safe_psql('postgres',
	"SELECT k, sum(cost), count(*) FROM admitted WHERE k LIKE 'w%' GROUP BY k ORDER BY k");
my @rows = split /\n/, $rows;
is(scalar @rows, 10, 'all ten keys were used');
foreach my $row (@rows)
{
	my ($k, $sum, $n) = split /\|/, $row;
	cmp_ok($sum, '<=', 60, "key $k: admitted cost $sum within lim 60");
	cmp_ok($sum, '>=', 54, "key $k: admitted cost $sum close to lim (no lost capacity)");
	is($redis->cli('zcard', "slidewin:log:tap:$k"), $n,
		"key $k: $n admitted calls, $n members");
	my $peek = $node->safe_psql('postgres',
		"SELECT (r).remaining FROM rl_peek('tap:$k', 60, '1 hour') r");
	is($peek, 60 - $sum, "key $k: peek remaining matches what was admitted");
}

done_testing();
