# rl_refund(key, ticket) under real concurrency, in both stores: 8 pgbench
# clients admit weighted calls on one key and give half of their admissions
# back at once; then 8 clients hand every remaining ticket in at the same
# time. Whatever the interleaving:
#  - every ticket is given back exactly once (its first refund says true,
#    every other false);
#  - the units in the window are exactly those admitted and not given back,
#    never more than the limit;
#  - once everything is given back, the key is empty again.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
# What is tested is which tickets are given back, not timeouts: Redis gets
# 2 s to connect and to answer, so that a machine loaded elsewhere cannot
# send a call of the Redis half to the fallback store (the Redis half
# checks that Redis answered every call).
my $node  = SlidewinTest::new_node('tickets', $redis,
	[ "slidewin.connect_timeout = '2s'", "slidewin.command_timeout = '2s'" ]);

foreach my $store ('redis', 'fallback')
{
	my $set = $store eq 'fallback'
	  ? q{SET slidewin.redis_url = 'redis://127.0.0.1:1'; SET slidewin.redis_retry_interval = 0;}
	  : '';
	my $key = "tk:$store";
	$node->safe_psql('postgres', qq{
		CREATE TABLE calls_$store (cost int, allowed bool, ticket text, refunded bool, store text);
		CREATE TABLE refunds_$store (ticket text, given bool);
		ALTER DATABASE postgres RESET ALL;
	});
	$node->safe_psql('postgres',
		"ALTER DATABASE postgres SET slidewin.redis_url = 'redis://127.0.0.1:1'")
	  if $store eq 'fallback';

	$node->pgbench(
		'-n -c 8 -j 2 -t 150',
		0,
		[qr{processed: 1200/1200}],
		[qr{^$}],
		"$store: 8 clients admit and give half back",
		{
			"055_$store" => qq{
				\\set c random(1, 3)
				INSERT INTO calls_$store
				SELECT :c, (r).allowed, (r).ticket,
				       CASE WHEN (r).allowed AND random() < 0.5 THEN rl_refund('$key', (r).ticket) END,
				       (r).store
				  FROM rl_attempt('$key', 40, '1 hour', :c) r;
			}
		});
	my ($admitted, $given, $live, $tickets, $refund_false) = split /\|/,
	  $node->safe_psql('postgres', qq{
		SELECT sum(cost) FILTER (WHERE allowed),
		       sum(cost) FILTER (WHERE refunded),
		       sum(cost) FILTER (WHERE allowed AND refunded IS NULL),
		       count(*) FILTER (WHERE allowed AND ticket IS NOT NULL) = count(*) FILTER (WHERE allowed),
		       count(*) FILTER (WHERE refunded = false)
		  FROM calls_$store});
	note("$store: $admitted units admitted, $given given back, $live live");
	is($node->safe_psql('postgres', "SELECT string_agg(DISTINCT store, ',') FROM calls_$store"),
		$store, "$store: every call was answered by the $store store");
	cmp_ok($given, '>', 0, "$store: some admissions were given back");
	cmp_ok($admitted, '>', 40, "$store: given-back units were admitted again");
	is($tickets, 't', "$store: every admission has a ticket");
	is($refund_false, 0, "$store: every first refund gave back");
	cmp_ok($live, '<=', 40, "$store: live units within the limit");
	my $remaining = $node->safe_psql('postgres',
		qq{$set SELECT (r).remaining FROM rl_peek('$key', 40, '1 hour') r});
	is($remaining, 40 - $live, "$store: the window holds exactly the units not given back");

	# Every remaining ticket, handed in by 8 clients at once.
	$node->pgbench(
		'-n -c 8 -j 2 -t 1',
		0,
		[qr{processed: 8/8}],
		[qr{^$}],
		"$store: 8 clients hand in every ticket at once",
		{
			"055_${store}_all" => qq{
				INSERT INTO refunds_$store
				SELECT ticket, rl_refund('$key', ticket)
				  FROM calls_$store WHERE allowed AND refunded IS NULL ORDER BY random();
			}
		});
	is($node->safe_psql('postgres', qq{
		SELECT count(*) FROM (SELECT ticket FROM refunds_$store GROUP BY ticket
		                       HAVING count(*) FILTER (WHERE given) <> 1 OR count(*) <> 8) x}),
		'0', "$store: each ticket given back by exactly one of its 8 refunds");
	is($node->safe_psql('postgres',
		qq{$set SELECT (r).remaining FROM rl_peek('$key', 40, '1 hour') r}),
		'40', "$store: everything given back, the key is empty");
	$node->safe_psql('postgres', 'ALTER DATABASE postgres RESET ALL');
}

done_testing();
