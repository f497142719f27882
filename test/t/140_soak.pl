# The randomized exactness soak (issue 35), short: SOAK_SECONDS of load
# (default 55, so that the file ends within 90 s with the servers' start-up),
# the same code as `make soak` (test/perl/SlidewinSoak.pm, where the mix, the
# faults and the checks are described). SOAK_SEED replays a run's choices.
use strict;
use warnings;

use Test::More;
use SlidewinSoak;

SlidewinSoak::run(seconds => $ENV{SOAK_SECONDS} || 55);
done_testing();
