# examples/fastapi, the FastAPI + psycopg 3 example, with Debian's
# python3-fastapi, uvicorn, python3-psycopg and python3-psycopg-pool (so
# nothing to install: Debian's python3, not another one on PATH), run as
# `python3 app.py`.
#  - the commands of its README.md, run as marked there against the node
#    (SlidewinExample::check_readme), and their output as the README shows;
#  - settings that would fail every request (a window that is no interval, or
#    one slidewin refuses, RL_LIMIT=0, a database without slidewin) keep it
#    from starting, with the reason;
#  - through PgBouncer in transaction mode without prepared statements
#    (SlidewinExample::start_pgbouncer), with PG_PREPARE_THRESHOLD=none,
#    SlidewinExample::check_app sends 200 requests, 25 at a time, against
#    lim 3 with a window of an hour, and checks exactly 3 answers of 200 and
#    197 of 429 (psycopg's own prepared statements would fail some), a
#    Retry-After on every 429, and that the headers of rl_headers agree with
#    rl_peek on the key "fastapi:t1" afterwards; every RateLimit and
#    RateLimit-Policy field parses as draft -11's SFV Lists (parsed by npm's
#    structured-headers, installed from examples/express's lockfile), and
#    each r is the number of admissions seen after it; the item route (the
#    limit and the row in one statement: 200 with the row, 404, 429 without
#    it); another tenant, a missing tenant (400); and a failing statement
#    under keep-alive clients (100 answers of 500, no reset).
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
for my $tool (qw(node npm curl))
{
	ok(scalar(grep { -x "$_/$tool" } split /:/, $ENV{PATH}), "$tool is installed")
	  or BAIL_OUT("$tool is missing: run make deps");
}

# the SFV parser of the header checks, installed while the servers start
SlidewinExample::install_node_modules(SlidewinExample::copy_example('express'));

my $redis = SlidewinTest::start_redis();
# Redis is given 1 s to answer (not the default 100 ms): the burst's first
# calls under the sanitizers ran past 100 ms, fell back, and this server's
# fallback store admitted lim of its own.
# Preloaded and on 127.0.0.1, as the README sets up PostgreSQL.
my $node  = SlidewinTest::new_node('fastapi', $redis, [ "slidewin.command_timeout = '1s'",
		"shared_preload_libraries = 'slidewin'", "listen_addresses = '127.0.0.1'" ]);

my $dir = SlidewinExample::copy_example('fastapi');
my @cmd = ($python, 'app.py');

SlidewinExample::check_readme($node, $dir, 8000);
SlidewinExample::check_refusals($node, $dir, \@cmd);

my $pgb = SlidewinExample::start_pgbouncer($node);
my $app = SlidewinExample::start_app($pgb, $dir, \@cmd, { PG_PREPARE_THRESHOLD => 'none' });
SlidewinExample::check_app($node, $redis, $app);
ok(SlidewinExample::stop_app($app), 'the app stops on SIGTERM');

done_testing();
