# The soak's token_bucket check (SlidewinSoak::token_bucket_over) on made-up
# admissions, with no server: it passes a key that each stretch between data
# losses keeps within one bucket, though one GCRA over all of it stands
# further ahead (a soak failure of this shape, seed 1748441035), and it still
# finds a key that admits more than a bucket holds after a loss.
#
# It starts no server at all: the Valkey pass leaves it out.
# slidewin: starts no Redis server
use strict;
use warnings;

use Test::More;
use SlidewinSoak;

use constant INF => SlidewinSoak::INF;

my $cf = $SlidewinSoak::class{t};    # lim 4 per 8 s: a unit every 2 s, 8 s of burst
is_deeply([ @$cf{qw(lim win)} ], [ 4, 8 ], 'the soak\'s token_bucket rule is the one these cases are built for');

sub adm
{
	my ($at, $store, $cost) = @_;
	return { key => 't:22', party => 'n1', store => $store, ts => $at, cost => $cost // 1, end => INF,
		commit => $at, winid => 0, at => $at, took => 0.01, via => 'single' };
}

# Redis admits the key at its rate from +0: a burst of 4, then a unit every
# 2 s, 8 s ahead at +14. Redis is killed at +16.0 and restarted empty at
# +17.7. Its fresh bucket admits 4 units from +17.8, then the admissions of
# the soak's failure: 12 units from +20.766 to +44.552, within one bucket
# counted from +17.8 (7.4 s ahead at most), but 9.4 s ahead in one GCRA
# since +0 (past the 8 s its bound allows once the loss is 24 s old), whose
# debt from before the loss never ran out at the refill rate.
my @before = ((map { adm(0, 'redis') } 1 .. 4), map { adm(2 * $_, 'redis') } 1 .. 7);
my @after = map { adm($_, 'redis') } 17.8, 18.0, 18.2, 18.4;
my @failure = ((map { adm($_->[0], $_->[1], $_->[2]) }
		[ 20.766, 'fallback' ], [ 22.411, 'redis' ], [ 26.883, 'fallback' ], [ 27.079, 'fallback' ],
		[ 32.398, 'redis', 2 ], [ 34.176, 'redis' ], [ 41.128, 'fallback' ], [ 41.471, 'fallback' ],
		[ 44.005, 'fallback' ], [ 44.552, 'fallback', 2 ]));
my $loss = [ [ 16.0, 17.7 ] ];
my @over = SlidewinSoak::token_bucket_over('t:22', [ @before, @after, @failure ], $loss, $cf, 0.113);
is(scalar @over, 0, 'a loss restarts the bucket: each stretch within one bucket passes')
  or diag(join("\n", map { sprintf('+%.3f: %s, bound %s', $_->{t}, $_->{units}, $_->{bound}) } @over));

# The same admissions with no loss between them are one bucket's, and that
# bucket stands 9.4 s ahead at +44.552: over.
@over = SlidewinSoak::token_bucket_over('t:22', [ @before, @after, @failure ], [], $cf, 0.113);
ok((grep { abs($_->{t} - 44.552) < 1e-9 && abs($_->{n} - 9.448) < 0.01 } @over),
	'without the loss, one GCRA finds the last admission 9.4 s ahead');

# After the loss, 3 units more at +44.6: the stretch since the loss then
# stands past one bucket, and the check finds it, as it finds a burst of 5
# long after a loss.
@over = SlidewinSoak::token_bucket_over('t:22', [ @before, @after, @failure, adm(44.6, 'fallback', 3) ], $loss, $cf, 0.113);
ok((grep { abs($_->{t} - 44.6) < 1e-9 } @over), 'three units more after the loss are over');
@over = SlidewinSoak::token_bucket_over('t:22', [ @before, @after, adm(80, 'redis', 5) ], $loss, $cf, 0.113);
ok((grep { abs($_->{t} - 80) < 1e-9 } @over), 'a burst of 5 after the loss is over');

# The stretch up to the loss is still one bucket: 6 units in the fallback
# store while Redis was down, on top of the 8 s Redis stood ahead, are over
# even with the win of allowance the loss still gives.
@over = SlidewinSoak::token_bucket_over('t:22', [ @before, map { adm(16.5, 'fallback') } 1 .. 6 ], $loss, $cf, 0.113);
ok((grep { abs($_->{t} - 16.5) < 1e-9 } @over), 'the fallback store\'s admissions during the loss count in the bucket before it');

done_testing();
