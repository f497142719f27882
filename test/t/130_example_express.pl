# examples/express, the express + node-postgres example, as a user would run
# it: its dependencies installed by `npm ci` from the committed
# package-lock.json into a copy of the example, then `node app.js` against a
# node of its own. SlidewinExample::check_app sends 200 requests, 25 at a
# time, against lim 3 with a window of an hour, and checks exactly 3 answers
# of 200 and 197 of 429, a Retry-After on every 429, and that the headers of
# rl_headers agree with rl_peek on the key afterwards; also another tenant, a
# missing tenant (400) and a failing statement (500, short, nothing leaked).
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;
use SlidewinExample;

# make test installs nodejs and npm (test/deps.sh): a missing one fails.
for my $tool (qw(node npm curl))
{
	ok(scalar(grep { -x "$_/$tool" } split /:/, $ENV{PATH}), "$tool is installed")
	  or BAIL_OUT("$tool is missing: run make deps");
}
note('node ' . `node --version` . 'npm ' . `npm --version`);

my $redis = SlidewinTest::start_redis();
# Redis is given 1 s to answer (not the default 100 ms): the burst's first
# calls under the sanitizers ran past 100 ms, fell back, and this server's
# fallback store (not preloaded, so not seeded) admitted lim of its own.
my $node  = SlidewinTest::new_node('express', $redis, [ "slidewin.command_timeout = '1s'" ]);

my $dir = SlidewinExample::copy_example('express');
# npm ci: exactly what package-lock.json says, or a failure if it disagrees
# with package.json. Its cache goes in the copy too.
my $t0 = time;
SlidewinExample::run_in($dir, [ 'npm', 'ci', '--no-audit', '--no-fund', '--loglevel=error' ],
	'npm ci', 180, { npm_config_cache => "$dir/.npm", npm_config_update_notifier => 'false' });
ok(-f "$dir/node_modules/express/package.json" && -f "$dir/node_modules/pg/package.json",
	'npm ci installed express and pg from the lockfile (' . (time - $t0) . ' s)');

my $app = SlidewinExample::start_app($node, $dir, [ 'node', 'app.js' ]);
SlidewinExample::check_app($node, $redis, $app);
ok(SlidewinExample::stop_app($app), 'the app stops on SIGTERM');

done_testing();
