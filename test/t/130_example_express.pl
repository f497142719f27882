# examples/express, the express + node-postgres example, as a user would run
# it: its dependencies installed by `npm ci` from the committed
# package-lock.json into a copy of the example, then `node app.js`.
#  - the commands of its README.md, run as marked there against the node
#    (SlidewinExample::check_readme), and their output as the README shows;
#  - settings that would fail every request (a window that is no interval, or
#    one slidewin refuses, RL_LIMIT=0, a database without slidewin) keep it
#    from starting, with the reason;
#  - through PgBouncer in transaction mode (SlidewinExample::start_pgbouncer),
#    SlidewinExample::check_app sends 200 requests, 25 at a time, against
#    lim 3 with a window of an hour, and checks exactly 3 answers of 200 and
#    197 of 429, a Retry-After on every 429, and that the headers of
#    rl_headers agree with rl_peek on the key "express:t1" afterwards; every
#    RateLimit and RateLimit-Policy field parses as draft -11's SFV Lists, and
#    each r is the number of admissions seen after it; the item route
#    (the limit and the row in one statement: 200 with the row, 404, 429
#    without it); another tenant, a missing tenant (400); and a failing
#    statement under keep-alive clients (100 answers of 500, no reset).
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;
use SlidewinExample;

# make test installs nodejs, npm and pgbouncer (test/deps.sh): a missing one fails.
for my $tool (qw(node npm curl))
{
	ok(scalar(grep { -x "$_/$tool" } split /:/, $ENV{PATH}), "$tool is installed")
	  or BAIL_OUT("$tool is missing: run make deps");
}
note('node ' . `node --version` . 'npm ' . `npm --version`);

# npm ci runs while the servers start
my $dir = SlidewinExample::copy_example('express');
SlidewinExample::install_node_modules($dir);

my $redis = SlidewinTest::start_redis();
# Redis is given 1 s to answer (not the default 100 ms): the burst's first
# calls under the sanitizers ran past 100 ms, fell back, and this server's
# fallback store admitted lim of its own.
# Preloaded and on 127.0.0.1, as the README sets up PostgreSQL.
my $node  = SlidewinTest::new_node('express', $redis, [ "slidewin.command_timeout = '1s'",
		"shared_preload_libraries = 'slidewin'", "listen_addresses = '127.0.0.1'" ]);

SlidewinExample::node_modules_installed();
my @cmd = ('node', 'app.js');

SlidewinExample::check_readme($node, $dir, 3000);
SlidewinExample::check_refusals($node, $dir, \@cmd);

my $pgb = SlidewinExample::start_pgbouncer($node);
my $app = SlidewinExample::start_app($pgb, $dir, \@cmd);
SlidewinExample::check_app($node, $redis, $app);
ok(SlidewinExample::stop_app($app), 'the app stops on SIGTERM');

done_testing();
