# SlidewinExample: what the TAP tests of examples/ share (130_example_express,
# 131_example_fastapi).
#
# Each test starts its own Redis and PostgreSQL node (SlidewinTest) and a
# PgBouncer in transaction mode in front of it, copies the example into a
# temporary directory, and then:
#
#   use SlidewinExample;
#   # npm ci in a copy of examples/express, in the background: structured-headers
#   SlidewinExample::install_node_modules(SlidewinExample::copy_example('express'));
#   my $dir = SlidewinExample::copy_example('fastapi');
#   my @cmd = ('/usr/bin/python3', 'app.py');
#   SlidewinExample::check_readme($node, $dir, 8000);       # the README's port
#   SlidewinExample::check_refusals($node, $dir, \@cmd);
#   my $pgb = SlidewinExample::start_pgbouncer($node);
#   my $app = SlidewinExample::start_app($pgb, $dir, \@cmd, { ... });
#   SlidewinExample::check_app($node, $redis, $app);        # through PgBouncer
#   SlidewinExample::stop_app($app);
#
# check_app sends 200 requests, 25 at a time, to GET /api/hello for one
# tenant with lim 3 and a window of an hour and checks the answers against
# rl_peek, then the item route, then a failing statement under keep-alive
# and pipelined clients. Every answer's RateLimit and RateLimit-Policy fields
# are parsed as Structured Field Values by test/node/ratelimit_fields.js
# (npm's structured-headers, a devDependency of examples/express), so
# install_node_modules must have been called first (the first parse waits
# for it).
#
# The app is started without RL_KEY_PREFIX: the key is "<example>:<tenant>"
# and the policy "<example>", the defaults of each example.
#
# An app or PgBouncer that is still running when the script ends (a failed
# check dies first) is killed by an END block here.
#
# The requests go through curl's --parallel (one process, up to N transfers
# at once, reusing a connection once its transfer is over: keep-alive), with
# the response headers read from --write-out's %{header_json}.

package SlidewinExample;

use strict;
use warnings;

use Carp;
use File::Copy;
use IO::Select;
use IO::Socket::INET;
use IPC::Run;
use JSON::PP;
use POSIX qw(ceil);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;
use SlidewinTest;

# What the tests configure: the limit and window the app is given.
our $LIMIT       = 3;
our $WINDOW      = '1 hour';
our $WINDOW_SECS = 3600;

# The rows of the items table the item route reads (check_app creates it).
our %ITEMS = (1 => 'anvil', 2 => 'bucket', 3 => 'crowbar');

my @apps;
my @bouncers;
my %example_of;    # copy's directory -> example's name
my $node_modules;  # where structured-headers is, once installed

# copy_example($name): a copy of examples/$name (its files, not installed
# dependencies or caches) in a temporary directory this script owns, so
# that installing dependencies writes nothing into the checkout.
sub copy_example
{
	my ($name) = @_;
	my $src = SlidewinTest::src_dir() . "/examples/$name";
	croak "no example $src" unless -d $src;
	my $dir = PostgreSQL::Test::Utils::tempdir("example_$name");
	opendir(my $dh, $src) or croak "$src: $!";
	for my $f (readdir $dh)
	{
		next if $f =~ /^(\.\.?|node_modules|__pycache__)$/;
		next unless -f "$src/$f";
		copy("$src/$f", "$dir/$f") or croak "copy $src/$f: $!";
	}
	closedir $dh;
	$example_of{$dir} = $name;
	return $dir;
}

# run_in($dir, $cmd, $what, $secs [, \%env]): run $cmd in $dir with
# %env added to the environment; dies with its output unless it exits 0
# within $secs. Returns its output.
sub run_in
{
	my ($dir, $cmd, $what, $secs, $env) = @_;
	my $out = '';
	local %ENV = (%ENV, %{ $env // {} });
	my $ok = eval {
		IPC::Run::run($cmd, '<', \undef, '>&', \$out,
			init => sub { chdir $dir or die "chdir $dir: $!" },
			IPC::Run::timeout($secs));
	};
	croak "$what failed" . ($@ ? " ($@)" : " (exit status " . ($? >> 8) . ')') . ":\n$out"
	  unless $ok;
	return $out;
}

# install_node_modules($dir): start `npm ci` in a copy of examples/express,
# dev dependencies included: exactly what package-lock.json says, or a
# failure if it disagrees with package.json. Its cache goes in the copy too,
# unless SLIDEWIN_NPM_CACHE names one that the whole test run shares (then
# what is there already is not fetched again: --prefer-offline).
# It runs while the caller does other things, until
# node_modules_installed() waits for it; its node_modules is then where
# test/node/ratelimit_fields.js finds structured-headers.
my $npm;
sub install_node_modules
{
	my ($dir) = @_;
	my $out = '';
	my $shared = $ENV{SLIDEWIN_NPM_CACHE};
	$shared = undef if defined $shared && !-d $shared;
	local %ENV = (%ENV, npm_config_cache => $shared // "$dir/.npm", npm_config_update_notifier => 'false');
	my $h = IPC::Run::start([ 'npm', 'ci', '--include=dev', '--no-audit', '--no-fund', '--loglevel=error',
			($shared ? ('--prefer-offline') : ()) ],
		'<', \undef, '>&', \$out, init => sub { chdir $dir or die "chdir $dir: $!" },
		IPC::Run::timeout(180));
	$npm = { h => $h, out => \$out, dir => $dir, t0 => time };
	return;
}

sub node_modules_installed
{
	croak 'install_node_modules first' unless $npm;
	return if defined $node_modules;
	my $ok = eval { $npm->{h}->finish };
	croak 'npm ci failed' . ($@ ? " ($@)" : ' (exit status ' . ($? >> 8) . ')') . ":\n${ $npm->{out} }"
	  unless $ok;
	my $dir = $npm->{dir};
	ok(-f "$dir/node_modules/structured-headers/package.json",
		'npm ci installed the dependencies and structured-headers from the lockfile (in '
		  . (time - $npm->{t0}) . ' s)');
	$node_modules = "$dir/node_modules";
	return;
}

# pgbouncer_binary(): Debian's pgbouncer (PATH or /usr/sbin) and its version
sub pgbouncer_binary
{
	my $bin = (grep { -x } map { "$_/pgbouncer" } split(/:/, $ENV{PATH}), '/usr/sbin')[0];
	# Missing, the test fails rather than skips: make deps installs it.
	croak 'pgbouncer not found in PATH or /usr/sbin (make deps installs it)' unless defined $bin;
	my ($version) = `$bin --version` =~ /PgBouncer (\d+\.\d+)/;
	croak "cannot read pgbouncer's version from $bin --version" unless defined $version;
	return ($bin, $version);
}

# start_pgbouncer($node): PgBouncer in transaction mode in front of $node's
# database postgres, 2 server connections for the app's pool of 10, so that
# one client connection's statements run on either. It keeps no named
# prepared statements: 1.18 (Debian 12) cannot, and from 1.21 on
# max_prepared_statements is set to 0, so every version behaves as 1.18
# does. Returns { host, port, version } once it accepts connections.
sub start_pgbouncer
{
	my ($node) = @_;
	my ($bin, $version) = pgbouncer_binary();
	my ($major, $minor) = split /\./, $version;
	my $tracks_prepared = $major > 1 || ($major == 1 && $minor >= 21);
	my $user = $node->safe_psql('postgres', 'SELECT current_user');
	my $dir = PostgreSQL::Test::Utils::tempdir('pgbouncer');
	my $port = SlidewinTest::free_port();
	open my $ul, '>', "$dir/userlist.txt" or croak $!;
	print $ul qq{"$user" ""\n};
	close $ul;
	open my $ini, '>', "$dir/pgbouncer.ini" or croak $!;
	print $ini join("\n",
		'[databases]',
		'postgres = host=' . $node->host . ' port=' . $node->port . ' dbname=postgres',
		'[pgbouncer]',
		'listen_addr = 127.0.0.1',
		"listen_port = $port",
		'unix_socket_dir =',
		'auth_type = trust',
		"auth_file = $dir/userlist.txt",
		'pool_mode = transaction',
		'default_pool_size = 2',
		'min_pool_size = 0',
		'reserve_pool_size = 0',
		'max_client_conn = 100',
		'ignore_startup_parameters = extra_float_digits',
		'log_connections = 0',
		'log_disconnections = 0',
		"logfile = $dir/pgbouncer.log",
		"pidfile = $dir/pgbouncer.pid",
		($tracks_prepared ? ('max_prepared_statements = 0') : ()),
		'');
	close $ini;
	# Output to files: a pipe nobody reads would fill and stop PgBouncer.
	my $h = IPC::Run::start([ $bin, "$dir/pgbouncer.ini" ],
		'<', \undef, '>', "$dir/pgbouncer.out", '2>', "$dir/pgbouncer.err");
	push @bouncers, $h;
	SlidewinTest::wait_for("PgBouncer $version to listen on port $port", sub {
		croak "pgbouncer exited:\n" . slurp_file("$dir/pgbouncer.err") unless $h->pumpable;
		return listening($port);
	}, 30);
	note("PgBouncer $version at $bin on port $port, transaction mode, 2 server connections"
		  . ($tracks_prepared ? ', max_prepared_statements = 0' : ''));
	return { host => '127.0.0.1', port => $port, version => $version, user => $user };
}

# listening($port): something other than this connection itself listens on
# 127.0.0.1:$port. A port in the kernel's ephemeral range (the matrix's
# suites use such ranges) can be connected to with itself as the source port
# (a TCP simultaneous open): the connect succeeds with nobody listening, and
# a readiness check believed an app that had not started yet (sid's Valkey
# pass, TAP 131: 200 requests refused, the app's log still empty).
sub listening
{
	my ($port) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
		Proto => 'tcp', Timeout => 1);
	return 0 unless $s;
	my $self = $s->sockport == $port;
	close $s;
	return $self ? 0 : 1;
}

# pg_env($target): the PG* variables that name $target, a node (the database
# postgres as the bootstrap superuser) or what start_pgbouncer returned
sub pg_env
{
	my ($target) = @_;
	return ref $target eq 'HASH'
	  ? (PGHOST => $target->{host}, PGPORT => $target->{port}, PGUSER => $target->{user},
		PGDATABASE => 'postgres')
	  : (PGHOST => $target->host, PGPORT => $target->port,
		PGUSER => scalar(getpwuid($<)), PGDATABASE => 'postgres');
}

# start_app($target, $dir, \@cmd [, \%env]): start the example in $dir on a
# free port, connected to $target (see pg_env), with RL_LIMIT and RL_WINDOW
# as above and %env added; returns once it accepts connections on its port
# (dies, with its output, if it exits first or takes more than 30 s).
sub start_app
{
	my ($target, $dir, $cmd, $env) = @_;
	my $port = SlidewinTest::free_port();
	my $log  = "$dir/app.log";
	my $name = $example_of{$dir} // croak "$dir is not a copy_example";
	local %ENV = (
		%ENV, pg_env($target),
		HOST      => '127.0.0.1',
		PORT      => $port,
		RL_LIMIT  => $LIMIT,
		RL_WINDOW => $WINDOW,
		%{ $env // {} });
	delete $ENV{RL_KEY_PREFIX};
	note("starting @$cmd in $dir on port $port");
	my $h = IPC::Run::start($cmd, '<', \undef, '>', $log, '2>&1',
		init => sub { chdir $dir or die "chdir $dir: $!" });
	my $app = { h => $h, port => $port, dir => $dir, log => $log, name => "@$cmd",
		key_prefix => "$name:", policy => $name };
	push @apps, $app;
	SlidewinTest::wait_for("@$cmd to listen on port $port", sub {
		croak "@$cmd exited before it listened:\n" . slurp_file($log) unless $h->pumpable;
		return listening($port);
	}, 30);
	return $app;
}

# stop_app($app): SIGTERM, as a service manager would stop it; SIGKILL if it
# is still there after 10 s. Returns whether it went on SIGTERM.
sub stop_app
{
	my ($app) = @_;
	my $h = $app->{h};
	return 1 unless $h->pumpable;
	$h->signal('TERM');
	my $gone = eval { $h->finish(IPC::Run::timeout(10)); 1 };
	$h->kill_kill unless $gone;
	@apps = grep { $_ != $app } @apps;
	return $gone ? 1 : 0;
}

END
{
	my $code = $?;
	for my $app (@apps)
	{
		eval { $app->{h}->kill_kill if $app->{h}->pumpable; 1 }
		  or diag("END: could not stop $app->{name}: $@");
	}
	for my $h (@bouncers)
	{
		eval { $h->kill_kill if $h->pumpable; 1 } or diag("END: could not stop pgbouncer: $@");
	}
	$? = $code;
}

# parse_fields(\@answers, $what): every RateLimit and RateLimit-Policy field
# of the answers parsed by test/node/ratelimit_fields.js, one test that
# passes only if each parses as draft -11 says. Each answer gets rl (its
# RateLimit member of the app's policy: name, r, t) and rlp (its
# RateLimit-Policy member: name, q, w), when it has the field.
sub parse_fields
{
	my ($app, $answers, $what) = @_;
	node_modules_installed();
	my @in = map {
		my $h = $_->{headers};
		+{ map { defined $h->{$_} ? ($_ => $h->{$_}) : () } qw(ratelimit ratelimit-policy) }
	} @$answers;
	my $fields = 0;
	$fields += scalar(keys %$_) for @in;
	my ($out, $err) = ('', '');
	my $script = SlidewinTest::src_dir() . '/test/node/ratelimit_fields.js';
	IPC::Run::run([ 'node', $script, $node_modules ], '<', \encode_json(\@in),
		'>', \$out, '2>', \$err, IPC::Run::timeout(60));
	my $status = $? >> 8;
	ok($status == 0 && $err eq '',
		"$what: each of the $fields RateLimit and RateLimit-Policy fields of "
		  . scalar(@$answers) . ' answers parses as an SFV List of draft -11')
	  or diag("ratelimit_fields.js (exit status $status): $err");
	my $parsed = eval { decode_json($out) } // croak "ratelimit_fields.js wrote no JSON: $out $err";
	croak 'ratelimit_fields.js answered for ' . scalar(@$parsed) . ' answers' if @$parsed != @$answers;
	for my $i (0 .. $#$answers)
	{
		my ($rl)  = grep { $_->{name} eq $app->{policy} } @{ $parsed->[$i]{ratelimit} // [] };
		my ($rlp) = grep { $_->{name} eq $app->{policy} } @{ $parsed->[$i]{policy}    // [] };
		$answers->[$i]{rl}  = $rl;
		$answers->[$i]{rlp} = $rlp;
	}
	return;
}

# requests($app, $n, $parallel, \@headers [, $path [, $query]]): $n GET
# $path (default /api/hello), at most $parallel at once, each with the
# request headers @headers. Returns one hash per answer, in the order sent:
# see send.
sub requests
{
	my ($app, $n, $parallel, $headers, $path, $query) = @_;
	return send_all($app, [ map { { path => $path, headers => $headers, query => $query } } 1 .. $n ],
		$parallel);
}

# send_all($app, \@requests, $parallel): each request a GET of
# { path (default /api/hello), headers (a list), query }, at most $parallel
# at once (with 1, one after another in order), all by one curl. Returns one
# hash per answer, in the order sent: status ('000' when no answer came: a
# reset or a timeout), error (curl's), reused (the transfer reused a
# kept-alive connection), headers (names lowercased, each a single value;
# RateLimit fields sent on several lines joined by ", " as RFC 9110 says),
# body, and rl and rlp (parse_fields, which runs on them all).
sub send_all
{
	my ($app, $reqs, $parallel) = @_;
	my $n = @$reqs;
	my $dir = PostgreSQL::Test::Utils::tempdir('requests');
	open my $cfg, '>', "$dir/curl.cfg" or croak $!;
	my %paths;
	for my $i (1 .. $n)
	{
		my $req = $reqs->[ $i - 1 ];
		my $path = $req->{path} // '/api/hello';
		$paths{$path}++;
		my $sep = defined $req->{query} ? '&' : '?';
		print $cfg "next\n" if $i > 1;
		print $cfg qq{url = "http://127.0.0.1:$app->{port}$path} . ($req->{query} // '') . qq{${sep}n=$i"\n};
		print $cfg qq{output = "$dir/body.$i"\n};
		print $cfg qq{header = "$_"\n} for @{ $req->{headers} // [] };
		print $cfg qq{max-time = 30\n};
		print $cfg qq{write-out = "\\n@@@ %{http_code} %{num_connects} %{url_effective}\\n%{errormsg}\\n%{header_json}\\n"\n};
	}
	close $cfg;
	my ($out, $err) = ('', '');
	my @cmd = ('curl', '-sS', '--no-progress-meter', '--parallel', '--parallel-immediate',
		'--parallel-max', $parallel, '-K', "$dir/curl.cfg");
	# curl exits non-zero when a transfer failed: that answer is a 000
	IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(120));
	my @answers;
	for my $part (split /^@@@ /m, $out)
	{
		next unless $part =~ /^(\d{3}) (\d+) \S*[?&]n=(\d+)\n(.*?)\n(.*)\z/s;
		my ($status, $connects, $i, $error, $json) = ($1, $2, $3, $4, $5);
		my $raw = $json =~ /\S/ ? decode_json($json) : {};
		my %h;
		for my $name (keys %$raw)
		{
			my $v = $raw->{$name};
			croak "header $name sent " . scalar(@$v) . ' times'
			  if @$v != 1 && $name !~ /^ratelimit(-policy)?$/i;
			$h{ lc $name } = join(', ', @$v);
		}
		$answers[ $i - 1 ] = { status => $status, headers => \%h, error => $error,
			reused => $connects == 0 && $status ne '000',
			body => -f "$dir/body.$i" ? slurp_file("$dir/body.$i") : '' };
	}
	croak "curl answered " . scalar(grep { defined } @answers) . " of $n requests:\n$err"
	  if scalar(grep { defined } @answers) != $n;
	parse_fields($app, \@answers, "$n GET " . join(' and ', sort keys %paths)
		  . ($parallel > 1 ? ", $parallel at a time" : ', one after another'));
	return \@answers;
}

# pipelined($app, $conns, $per_conn, \@headers): $conns connections at once,
# each sending $per_conn GET /api/hello in one write (HTTP/1.1 pipelining,
# the last with "Connection: close") and reading until the app closes it.
# Returns (statuses of the answers read, in order, over all connections;
# the errors met, such as a reset). A server that closes a connection after
# an answer, while requests it has not read are waiting, makes the kernel
# send a reset, and the client sees fewer answers than it sent requests.
sub pipelined
{
	my ($app, $conns, $per_conn, $headers) = @_;
	my (@socks, %buf, @errors);
	for my $c (1 .. $conns)
	{
		my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $app->{port},
			Proto => 'tcp', Timeout => 5) or croak "connect: $!";
		my $req = '';
		for my $i (1 .. $per_conn)
		{
			$req .= "GET /api/hello?c=$c&n=$i HTTP/1.1\r\nHost: 127.0.0.1\r\n"
			  . join('', map { "$_\r\n" } @$headers)
			  . ($i == $per_conn ? "Connection: close\r\n" : '') . "\r\n";
		}
		print $s $req or croak "write: $!";
		push @socks, $s;
		$buf{$s} = '';
	}
	my $sel = IO::Select->new(@socks);
	my $deadline = Time::HiRes::time() + 30;
	while ($sel->count && Time::HiRes::time() < $deadline)
	{
		for my $s ($sel->can_read(1))
		{
			my $n = sysread($s, my $chunk, 65536);
			if (!defined $n) { push @errors, "read: $!"; }
			elsif ($n > 0) { $buf{$s} .= $chunk; next; }
			$sel->remove($s);
			close $s;
		}
	}
	push @errors, $sel->count . ' connections still open after 30 s' if $sel->count;
	# each answer: status line, headers, and a body of Content-Length bytes
	my @statuses;
	for my $s (@socks)
	{
		my $b = $buf{$s};
		while ($b =~ s{\AHTTP/1\.1 (\d{3}) [^\r\n]*\r\n(.*?)\r\n\r\n}{}s)
		{
			my ($status, $head) = ($1, $2);
			my ($len) = $head =~ /^content-length:\s*(\d+)/mi;
			push @errors, "an answer without Content-Length: $head" unless defined $len;
			substr($b, 0, $len // 0, '');
			push @statuses, $status;
		}
		push @errors, "left unparsed: $b" if $b ne '';
	}
	return (\@statuses, \@errors);
}

sub count_where
{
	my ($cond, $list) = @_;
	return scalar grep { $cond->($_) } @$list;
}

sub statuses
{
	my ($answers) = @_;
	my %by;
	$by{ $_->{status} }++ for @$answers;
	my ($error) = map { $_->{error} } grep { $_->{status} eq '000' } @$answers;
	return join(', ', map { "$_ x $by{$_}" } sort keys %by) . (defined $error ? " (curl: $error)" : '');
}

# further_admissions_agree(\@answers): in answers to calls sent one after
# another, each answer's RateLimit r is the number of later answers that
# were admitted (the calls being lim + 1 or more, the count runs out).
sub further_admissions_agree
{
	my ($answers) = @_;
	my @bad;
	for my $i (0 .. $#$answers)
	{
		my $later = count_where(sub { $_[0]{status} != 429 }, [ @$answers[ $i + 1 .. $#$answers ] ]);
		my $r = $answers->[$i]{rl} ? $answers->[$i]{rl}{r} : 'none';
		push @bad, "answer " . ($i + 1) . " says r=$r, $later admitted after it" if $r ne $later;
	}
	return @bad;
}

# check_refusals($node, $dir, \@cmd): settings that would fail every
# request keep the app from starting, with the reason.
sub check_refusals
{
	my ($node, $dir, $cmd) = @_;
	my @cases = (
		[ { RL_WINDOW => '1 minut' }, qr/RL_WINDOW='1 minut' is not a PostgreSQL interval/,
			"a window that is no interval ('1 minut')" ],
		[ { RL_WINDOW => '0 seconds' }, qr/slidewin refuses RL_LIMIT=3 RL_WINDOW='0 seconds'/,
			"a window slidewin refuses ('0 seconds')" ],
		[ { RL_LIMIT => '0' }, qr/RL_LIMIT must be a positive whole number, not '0'/, 'RL_LIMIT=0' ],
		[ { PGDATABASE => 'template1' }, qr/CREATE EXTENSION slidewin/,
			'a database without slidewin' ]);
	for my $case (@cases)
	{
		my ($env, $want, $what) = @$case;
		my $out = '';
		local %ENV = (%ENV, pg_env($node), HOST => '127.0.0.1', PORT => SlidewinTest::free_port(),
			RL_LIMIT => $LIMIT, RL_WINDOW => $WINDOW, %$env);
		my $exited = eval {
			IPC::Run::run($cmd, '<', \undef, '>&', \$out,
				init => sub { chdir $dir or die "chdir $dir: $!" }, IPC::Run::timeout(30));
			1;
		};
		my $status = $exited ? $? >> 8 : 'none (still running after 30 s)';
		ok($exited && $status != 0 && $out =~ $want,
			"$what: the app refuses to start, exit status $status, and says why")
		  or diag("output: $out");
		note("it said: $out");
	}
	return;
}

# check_readme($node, $dir, $app_port): the commands of the example's
# README.md, run as a reader would run them, against $node (which must
# preload slidewin and listen on 127.0.0.1, as the README sets up), and
# their output compared with what the README shows. A shell block is run
# when an HTML comment marks it:
#
#   <!-- test: system -->  installs packages or changes the system's
#                          PostgreSQL: not run; the test's own servers are
#                          set up the same way (preloaded, slidewin.redis_url
#                          naming the test's Redis), and its dependencies
#                          installed (npm ci, make deps)
#   <!-- test: db -->      run by bash, with PGHOST, PGPORT and PGUSER naming
#                          $node and its superuser, and a shell function
#                          runuser that runs `runuser -u postgres -- CMD` as
#                          CMD: in the test, the node's superuser is the user
#                          the test runs as
#   <!-- test: app -->     started in the background, the README's port of
#                          the app replaced by $app_port, with PGPORT naming
#                          $node (the README leaves it at 5432)
#   <!-- test: curl -->    run by bash, with the app's port replaced, and its
#                          output compared with the next fenced block
#
# Output compared, trailing white space aside: lines of a block without an
# HTTP status line must be equal. For an answer shown by `curl -i`, the status line and the body must
# be equal, and each header line shown must be in the answer with the same
# value (names compared without case), except that a date and
# X-RateLimit-Reset may have any value, and Retry-After and RateLimit's t may
# be up to 5 s below the value shown (the seconds a reader spends between the
# calls). A line "..." stands for headers not shown; without it, the answer
# must have no header the README does not show.
sub check_readme
{
	my ($node, $dir, $readme_port) = @_;
	my $text = slurp_file("$dir/README.md");
	my @blocks;
	while ($text =~ /<!-- test: (\w+) -->\n```[a-z]*\n(.*?)```\n/gs)
	{
		my ($kind, $code) = ($1, $2);
		my $expected;
		($expected) = substr($text, pos($text)) =~ /\A\s*```[a-z]*\n(.*?)```\n/s if $kind eq 'curl';
		croak "README.md: a curl block without the output that follows it" if $kind eq 'curl' && !defined $expected;
		push @blocks, { kind => $kind, code => $code, expected => $expected };
	}
	my %n;
	$n{ $_->{kind} }++ for @blocks;
	ok($n{system} && $n{db} && $n{app} && $n{curl},
		'README.md has marked blocks: ' . join(', ', map { "$n{$_} $_" } sort keys %n));
	my $port = SlidewinTest::free_port();
	my $user = $node->safe_psql('postgres', 'SELECT current_user');
	local %ENV = (%ENV, PGHOST => '127.0.0.1', PGPORT => $node->port);
	my $shim = 'runuser() { [ "$1 $2 $3" = "-u postgres --" ] || { echo "runuser $*: not as in the README" >&2; return 99; }; shift 3; PGUSER=' . $user . ' "$@"; }' . "\n";
	my $app;
	for my $b (@blocks)
	{
		(my $code = $b->{code}) =~ s/\b$readme_port\b/$port/g;
		my $first = (split /\n/, $b->{code})[0];
		if ($b->{kind} eq 'db')
		{
			my $out = run_in($dir, [ 'bash', '-e', '-c', $shim . $code ], "README: $first", 60);
			pass("README's block runs: $first");
		}
		elsif ($b->{kind} eq 'app')
		{
			my $log = "$dir/readme-app.log";
			# bash -c runs a single command by exec: the app is its child, not bash's
			my $h = IPC::Run::start([ 'bash', '-c', $code ], '<', \undef, '>', $log, '2>&1',
				init => sub { chdir $dir or die "chdir $dir: $!" });
			$app = { h => $h, port => $port, dir => $dir, log => $log, name => "README's app" };
			push @apps, $app;
			SlidewinTest::wait_for("the README's app to listen on port $port", sub {
				croak "the README's app exited before it listened:\n" . slurp_file($log) unless $h->pumpable;
				return listening($port);
			}, 30);
			pass("README's app starts: $first");
		}
		elsif ($b->{kind} eq 'curl')
		{
			croak 'README.md: a curl block before the app block' unless $app;
			my $out = run_in($dir, [ 'bash', '-e', '-c', $code ], "README: $first", 60);
			my @diff = compare_output($out, $b->{expected});
			is(join("\n", @diff), '', "README's output as shown: $first")
			  or diag("shown:\n$b->{expected}\ngot:\n$out");
		}
	}
	ok(stop_app($app), "the README's app stops on SIGTERM") if $app;
	return;
}

# compare_output($got, $shown): the differences, as check_readme says
sub compare_output
{
	my ($got, $shown) = @_;
	$got =~ s/\r\n/\n/g;
	# curl -i ends with the body, which has no newline of its own
	s/\s+\z// for $got, $shown;
	return ($got eq $shown ? () : ('output differs')) unless $shown =~ m{\AHTTP/};
	my ($ghead, $gbody) = split /\n\n/, $got, 2;
	my ($shead, $sbody) = split /\n\n/, $shown, 2;
	my @diff;
	push @diff, "body: got '" . ($gbody // '') . "'" if ($gbody // '') ne ($sbody // '');
	my ($gstatus, @glines) = split /\n/, $ghead;
	my ($sstatus, @slines) = split /\n/, $shead;
	push @diff, "status line: got '$gstatus'" if $gstatus ne $sstatus;
	my %gh = map { /^([^:]+):\s*(.*)$/ ? (lc $1 => $2) : () } @glines;
	my $more = grep { $_ eq '...' } @slines;
	my %seen;
	for my $line (grep { $_ ne '...' } @slines)
	{
		my ($name, $want) = $line =~ /^([^:]+):\s*(.*)$/ or do { push @diff, "not a header: $line"; next };
		$name = lc $name;
		$seen{$name} = 1;
		my $have = $gh{$name};
		if (!defined $have) { push @diff, "no $name"; next }
		next if $name eq 'date' || $name eq 'x-ratelimit-reset';
		my $ok;
		if ($name eq 'retry-after')
		{
			$ok = $have =~ /^\d+$/ && $have <= $want && $have >= $want - 5;
		}
		elsif ($name eq 'ratelimit')
		{
			my ($hpre, $ht, $hpost) = $have =~ /^(.*;t=)(\d+)(.*)$/;
			my ($wpre, $wt, $wpost) = $want =~ /^(.*;t=)(\d+)(.*)$/;
			$ok = defined $ht && defined $wt ? "$hpre$hpost" eq "$wpre$wpost" && $ht <= $wt && $ht >= $wt - 5
			  : $have eq $want;
		}
		else
		{
			$ok = $have eq $want;
		}
		push @diff, "$name: got '$have'" unless $ok;
	}
	push @diff, map { "$_ not shown" } grep { !$seen{$_} } sort keys %gh unless $more;
	return @diff;
}

# check_app($node, $redis, $app): the example's answers, checked.
sub check_app
{
	my ($node, $redis, $app) = @_;
	my $tenant = 't1';
	my $key    = $app->{key_prefix} . $tenant;
	my $policy = $app->{policy};
	my $rl_fields = qr/^(ratelimit-policy|ratelimit|x-ratelimit-limit|x-ratelimit-remaining|x-ratelimit-reset|retry-after)$/;

	# --- 200 requests, 25 at a time, one tenant ---------------------------
	my $t0 = Time::HiRes::time();
	my $answers = requests($app, 200, 25, ["X-Tenant: $tenant"]);
	my $t1 = Time::HiRes::time();
	note(sprintf('200 requests, 25 at a time, in %.2f s', $t1 - $t0));
	my @ok     = grep { $_->{status} == 200 } @$answers;
	my @denied = grep { $_->{status} == 429 } @$answers;
	is(scalar(@ok), $LIMIT, "exactly lim ($LIMIT) of 200 answered 200")
	  or diag('statuses: ' . statuses($answers));
	is(scalar(@denied), 200 - $LIMIT, 'and ' . (200 - $LIMIT) . ' answered 429')
	  or diag('statuses: ' . statuses($answers) . "\napp log:\n" . slurp_file($app->{log}));

	# what rl_peek says of the key afterwards, and when it said it
	my ($remaining, $reset_epoch, $retry_secs, $peek_lim, $peek_win_secs, $peek_at) =
	  split /\|/, $node->safe_psql('postgres', qq{
		SELECT remaining, extract(epoch FROM reset_at), extract(epoch FROM retry_after),
		       lim, ceil(extract(epoch FROM win))::bigint, extract(epoch FROM clock_timestamp())
		  FROM rl_peek('$key', $LIMIT, '$WINDOW')});
	note("rl_peek('$key'): remaining $remaining, reset_at $reset_epoch, retry_after $retry_secs s");
	is("$remaining $peek_lim $peek_win_secs", "0 $LIMIT $WINDOW_SECS",
		"rl_peek afterwards on the app's own key ($key): nothing left of lim 3 in the hour");
	is($redis->cli('zcard', "slidewin:log:$key"), $LIMIT, 'Redis holds one entry per 200');

	# --- headers on every answer ------------------------------------------
	my @every = qw(ratelimit-policy ratelimit x-ratelimit-limit x-ratelimit-remaining x-ratelimit-reset);
	for my $f (@every)
	{
		is(count_where(sub { defined $_[0]{headers}{$f} }, $answers), 200, "$f on all 200 answers");
	}
	is(count_where(sub { ($_[0]{headers}{'x-ratelimit-limit'} // '') eq $LIMIT }, $answers), 200,
		"X-RateLimit-Limit is lim ($LIMIT) on every answer");
	is(count_where(sub { $_[0]{rlp} && $_[0]{rlp}{q} == $LIMIT && ($_[0]{rlp}{w} // -1) == $WINDOW_SECS },
		$answers), 200,
		qq{RateLimit-Policy has policy "$policy" with q=$LIMIT and w=$WINDOW_SECS on every answer});

	# --- the 429s -----------------------------------------------------------
	my $reset = ceil($reset_epoch - 1e-9);
	my @bad_retry = grep { ($_->{headers}{'retry-after'} // '') !~ /^[1-9][0-9]*$/ } @denied;
	is(scalar(@bad_retry), 0, 'a Retry-After of a positive whole number of seconds on every 429')
	  or diag('for example: ' . ($bad_retry[0]{headers}{'retry-after'} // 'none'));
	# Retry-After counts to when the oldest unit leaves the window; rl_peek,
	# asked after the last answer, counts to the same moment.
	my $retry_peek = ceil($retry_secs - 1e-9);
	my $slack = ceil($peek_at - $t0) + 1;
	is(count_where(sub {
		my $r = $_[0]{headers}{'retry-after'} // -1;
		$r >= $retry_peek && $r <= $retry_peek + $slack && $r <= $WINDOW_SECS
	}, \@denied), scalar(@denied),
		"Retry-After of every 429 agrees with rl_peek's retry_after ($retry_peek s, give or take the $slack s the requests took)");
	is(count_where(sub { ($_[0]{headers}{'x-ratelimit-remaining'} // '') eq $remaining }, \@denied),
		scalar(@denied), "X-RateLimit-Remaining of every 429 is rl_peek's remaining ($remaining)");
	is(count_where(sub { abs(($_[0]{headers}{'x-ratelimit-reset'} // 0) - $reset) <= 1 }, \@denied),
		scalar(@denied), "X-RateLimit-Reset of every 429 is rl_peek's reset_at ($reset) within a second");
	is(count_where(sub { $_[0]{rl} && $_[0]{rl}{r} == 0 && ($_[0]{rl}{t} // 0) >= 1 }, \@denied),
		scalar(@denied), qq{RateLimit of every 429 has "$policy" with r=0 and t >= 1});
	is(count_where(sub { $_[0]{body} =~ /\Q$key\E/ || length($_[0]{body}) > 200 }, $answers), 0,
		'no answer names the key, and every body is short');

	# --- the 200s -----------------------------------------------------------
	is(count_where(sub { defined $_[0]{headers}{'retry-after'} }, \@ok), 0, 'no Retry-After on a 200');
	# r of an admission is how many more were admitted after it, whichever
	# order they came in: lim - 1 down to 0, one each
	is(join(',', sort map { $_->{rl} ? $_->{rl}{r} : 'none' } @ok), join(',', 0 .. $LIMIT - 1),
		"RateLimit r of the 200s: " . join(', ', reverse 0 .. $LIMIT - 1)
		  . ', one each: each the number of admissions after it');
	is(count_where(sub { $_[0]{rl} && $_[0]{rl}{r} eq $_[0]{headers}{'x-ratelimit-remaining'} }, \@ok),
		scalar(@ok), 'RateLimit r of every 200 is its X-RateLimit-Remaining');
	my ($last) = grep { ($_->{headers}{'x-ratelimit-remaining'} // '') eq '0' } @ok;
	ok($last && abs($last->{headers}{'x-ratelimit-reset'} - $reset) <= 1,
		"X-RateLimit-Reset of the last admission is rl_peek's reset_at ($reset) within a second");

	# --- the item route: the limit and the row in one statement -------------
	$node->safe_psql('postgres', 'CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL); '
		  . 'INSERT INTO items VALUES ' . join(', ', map { "($_, '$ITEMS{$_}')" } sort keys %ITEMS));
	my @seq = @{ requests($app, $LIMIT + 2, 1, ['X-Tenant: seq'], '/api/items/2') };
	is(join(' ', map { $_->{status} } @seq), join(' ', (200) x $LIMIT, 429, 429),
		'GET /api/items/2, ' . ($LIMIT + 2) . ' times one after another: lim 200s, then 429s');
	is(count_where(sub { $_[0]{body} eq qq{{"id":2,"name":"$ITEMS{2}"}} }, [ @seq[ 0 .. $LIMIT - 1 ] ]),
		$LIMIT, "each 200 carries the row: {\"id\":2,\"name\":\"$ITEMS{2}\"}");
	my $name2 = $ITEMS{2};
	is(count_where(sub { $_[0]{body} =~ /\Q$name2\E/ }, [ @seq[ $LIMIT .. $#seq ] ]), 0,
		'no 429 carries it');
	is(join('; ', further_admissions_agree(\@seq)), '',
		"RateLimit r of each answer is the number of admissions the test saw after it");
	my ($missing, $found, $other, $by_query, $nobody) = @{ send_all($app, [
		{ headers => ['X-Tenant: items'], path => '/api/items/999' },
		{ headers => ['X-Tenant: items'], path => '/api/items/3' },
		{ headers => ['X-Tenant: t2'] },
		{ query => '?tenant=t3' },
		{} ], 1) };
	is($missing->{status} . ' ' . ($missing->{rl} ? $missing->{rl}{r} : 'none'), '404 ' . ($LIMIT - 1),
		'a missing item: 404, with the RateLimit of the unit it spent (r = lim - 1)');
	is("$found->{status} $found->{body}", qq{200 {"id":3,"name":"$ITEMS{3}"}}, 'another item: 200 and its row');

	# --- another tenant, a missing tenant -----------------------------------
	is($other->{status} . ' ' . ($other->{headers}{'x-ratelimit-remaining'} // 'none'),
		'200 ' . ($LIMIT - 1), 'another tenant has a quota of its own: 200, remaining lim - 1');
	is($by_query->{status}, 200, 'the tenant can come as ?tenant= too');
	is($nobody->{status}, 400, 'no tenant: 400');
	is(scalar(grep { /$rl_fields/ } keys %{ $nobody->{headers} }), 0,
		'and no rate-limit headers, since nothing was counted');

	# --- a failing statement: 500, short, nothing leaked --------------------
	# 100 requests, 10 at a time, over kept-alive connections: each must be a
	# whole 500, none a reset.
	$node->safe_psql('postgres', 'DROP EXTENSION slidewin');
	my $failed = requests($app, 100, 10, ["X-Tenant: $tenant"]);
	is(count_where(sub { $_[0]{status} == 500 }, $failed), 100,
		'a failing statement (the extension dropped): 100 requests, 10 at a time, 100 answers of 500')
	  or diag('statuses: ' . statuses($failed));
	my $reused = count_where(sub { $_[0]{reused} }, $failed);
	ok($reused >= 50, "and the client kept its connections alive: $reused of 100 on a reused connection");
	is(count_where(sub { length($_[0]{body}) < 100 && $_[0]{body} !~ /rl_attempt|\Q$key\E|$tenant/ }, $failed),
		100, "each with a short body that names neither function, key nor tenant: $failed->[0]{body}");
	is(count_where(sub { scalar(grep { /$rl_fields/ } keys %{ $_[0]{headers} }) }, $failed), 0,
		'and no rate-limit headers');
	my ($pstatuses, $perrors) = pipelined($app, 10, 10, ["X-Tenant: $tenant"]);
	my %pby;
	$pby{$_}++ for @$pstatuses;
	is(join(', ', map { "$_ x $pby{$_}" } sort keys %pby) . (@$perrors ? " ($perrors->[0])" : ''), '500 x 100',
		'and 10 connections that send 10 requests each at once (pipelined) get 10 answers of 500 each, no reset');
	ok(eval { SlidewinTest::wait_for("the error in the app's log",
		sub { slurp_file($app->{log}) =~ /rl_attempt/ }, 10) }, "the error went to the app's log instead");
	$node->safe_psql('postgres', 'CREATE EXTENSION slidewin');
	my ($again) = @{ requests($app, 1, 1, ['X-Tenant: t4']) };
	is($again->{status}, 200, 'the app serves again once the extension is back');
	return;
}

1;
