# examples/fastapi, the FastAPI + psycopg 3 example, with Debian's
# python3-fastapi, uvicorn, python3-psycopg and python3-psycopg-pool (so
# nothing to install: Debian's python3, not another one on PATH), run as
# `python3 app.py` against a node of its own. SlidewinExample::check_app sends
# 200 requests, 25 at a time, against lim 3 with a window of an hour, and
# checks exactly 3 answers of 200 and 197 of 429, a Retry-After on every 429,
# and that the headers of rl_headers agree with rl_peek on the key
# afterwards; also another tenant, a missing tenant (400) and a failing
# statement (500, short, nothing leaked).
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;
use SlidewinExample;

my $python = '/usr/bin/python3';
# make test installs them (test/deps.sh): a missing one fails.
my ($out, $err) = ('', '');
my $have = -x $python && IPC::Run::run([ $python, '-c',
		'import fastapi, uvicorn, psycopg, psycopg_pool; '
		  . 'print("fastapi", fastapi.__version__, "uvicorn", uvicorn.__version__, '
		  . '"psycopg", psycopg.__version__, "psycopg_pool", psycopg_pool.__version__)' ],
	'<', \undef, '>', \$out, '2>', \$err);
ok($have, "Debian's python3 has fastapi, uvicorn, psycopg and psycopg_pool")
  or BAIL_OUT("missing Python packages: run make deps\n$err");
note($out);
ok(scalar(grep { -x "$_/curl" } split /:/, $ENV{PATH}), 'curl is installed')
  or BAIL_OUT('curl is missing: run make deps');

my $redis = SlidewinTest::start_redis();
# Redis is given 1 s to answer (not the default 100 ms): the burst's first
# calls under the sanitizers ran past 100 ms, fell back, and this server's
# fallback store (not preloaded, so not seeded) admitted lim of its own.
my $node  = SlidewinTest::new_node('fastapi', $redis, [ "slidewin.command_timeout = '1s'" ]);

my $dir = SlidewinExample::copy_example('fastapi');
my $app = SlidewinExample::start_app($node, $dir, [ $python, 'app.py' ]);
SlidewinExample::check_app($node, $redis, $app);
ok(SlidewinExample::stop_app($app), 'the app stops on SIGTERM');

done_testing();
