# SlidewinExample: what the TAP tests of examples/ share (130_example_express,
# 131_example_fastapi).
#
# Each test starts its own Redis and PostgreSQL node (SlidewinTest), copies
# the example into a temporary directory, starts it on a free loopback port
# with the PG* variables naming the node, and then calls check_app, which
# sends 200 requests, 25 at a time, to GET /api/hello for one tenant with
# lim 3 and a window of an hour, and checks the answers against rl_peek:
#
#   use SlidewinExample;
#   my $dir = SlidewinExample::copy_example('fastapi');
#   my $app = SlidewinExample::start_app($node, $dir, [ '/usr/bin/python3', 'app.py' ]);
#   SlidewinExample::check_app($node, $redis, $app);
#   SlidewinExample::stop_app($app);
#
# An app that is still running when the script ends (a failed check dies
# first) is killed by an END block here.
#
# The requests go through curl's --parallel (one process, up to 25 transfers
# at once, each on a connection of its own), with the response headers read
# from --write-out's %{header_json}.

package SlidewinExample;

use strict;
use warnings;

use Carp;
use File::Copy;
use IO::Socket::INET;
use IPC::Run;
use JSON::PP;
use POSIX qw(ceil);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;
use SlidewinTest;

# What the tests configure: the limit and window the app is given, the key
# prefix it puts before the tenant, and the policy name it passes to
# rl_headers.
our $LIMIT       = 3;
our $WINDOW      = '1 hour';
our $WINDOW_SECS = 3600;
our $KEY_PREFIX  = 'hello:';
our $POLICY      = 'hello';

my @apps;

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

# start_app($node, $dir, \@cmd): start the example in $dir on a free port,
# with the PG* variables naming $node and RL_* as above; returns once it
# accepts connections on its port (dies, with its output, if it exits
# first or takes more than 30 s).
sub start_app
{
	my ($node, $dir, $cmd) = @_;
	my $port = SlidewinTest::free_port();
	my $log  = "$dir/app.log";
	local %ENV = (
		%ENV,
		PGHOST        => $node->host,
		PGPORT        => $node->port,
		PGUSER        => scalar(getpwuid($<)),
		PGDATABASE    => 'postgres',
		HOST          => '127.0.0.1',
		PORT          => $port,
		RL_LIMIT      => $LIMIT,
		RL_WINDOW     => $WINDOW,
		RL_KEY_PREFIX => $KEY_PREFIX);
	note("starting @$cmd in $dir on port $port");
	my $h = IPC::Run::start($cmd, '<', \undef, '>', $log, '2>&1',
		init => sub { chdir $dir or die "chdir $dir: $!" });
	my $app = { h => $h, port => $port, dir => $dir, log => $log, name => "@$cmd" };
	push @apps, $app;
	SlidewinTest::wait_for("@$cmd to listen on port $port", sub {
		croak "@$cmd exited before it listened:\n" . slurp_file($log) unless $h->pumpable;
		my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
			Proto => 'tcp', Timeout => 1);
		return 0 unless $s;
		close $s;
		return 1;
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
	$? = $code;
}

# requests($app, $n, $parallel, \@headers [, $query]): $n GET /api/hello, at
# most $parallel at once, each with the request headers @headers. Returns
# one hash per answer: status, headers (names lowercased, each a single
# value), body.
sub requests
{
	my ($app, $n, $parallel, $headers, $query) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir('requests');
	my $url = "http://127.0.0.1:$app->{port}/api/hello";
	open my $cfg, '>', "$dir/curl.cfg" or croak $!;
	for my $i (1 .. $n)
	{
		my $sep = defined $query ? '&' : '?';
		print $cfg qq{url = "$url} . ($query // '') . qq{${sep}n=$i"\n};
		print $cfg qq{output = "$dir/body.$i"\n};
	}
	close $cfg;
	my ($out, $err) = ('', '');
	my @cmd = ('curl', '-sS', '--no-progress-meter', '--max-time', '30', '--parallel', '--parallel-immediate',
		'--parallel-max', $parallel, (map { ('-H', $_) } @$headers),
		'-w', '\n@@@ %{http_code} %{url_effective}\n%{header_json}\n', '-K', "$dir/curl.cfg");
	IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(120))
	  or croak "curl failed (exit status " . ($? >> 8) . "): $err";
	my @answers;
	for my $part (split /^@@@ /m, $out)
	{
		next unless $part =~ /^(\d{3}) \S*[?&]n=(\d+)\n(.*)\z/s;
		my ($status, $i, $json) = ($1, $2, $3);
		my $raw = decode_json($json);
		my %h;
		for my $name (keys %$raw)
		{
			my $v = $raw->{$name};
			croak "header $name sent " . scalar(@$v) . ' times' if @$v != 1;
			$h{ lc $name } = $v->[0];
		}
		push @answers, { status => $status, headers => \%h,
			body => -f "$dir/body.$i" ? slurp_file("$dir/body.$i") : '' };
	}
	croak "curl answered " . scalar(@answers) . " of $n requests:\n$err" if @answers != $n;
	return \@answers;
}

sub count_where
{
	my ($cond, $list) = @_;
	return scalar grep { $cond->($_) } @$list;
}

# check_app($node, $redis, $app): the example's answers, checked.
sub check_app
{
	my ($node, $redis, $app) = @_;
	my $tenant = 't1';
	my $key    = $KEY_PREFIX . $tenant;
	my $rl_fields = qr/^(ratelimit-policy|ratelimit|x-ratelimit-limit|x-ratelimit-remaining|x-ratelimit-reset|retry-after)$/;

	# --- 200 requests, 25 at a time, one tenant ---------------------------
	my $t0 = Time::HiRes::time();
	my $answers = requests($app, 200, 25, ["X-Tenant: $tenant"]);
	my $t1 = Time::HiRes::time();
	note(sprintf('200 requests, 25 at a time, in %.2f s', $t1 - $t0));
	my @ok     = grep { $_->{status} == 200 } @$answers;
	my @denied = grep { $_->{status} == 429 } @$answers;
	my %by_status;
	$by_status{ $_->{status} }++ for @$answers;
	is(scalar(@ok), $LIMIT, "exactly lim ($LIMIT) of 200 answered 200")
	  or diag('statuses: ' . join(', ', map { "$_ x $by_status{$_}" } sort keys %by_status));
	is(scalar(@denied), 200 - $LIMIT, 'and ' . (200 - $LIMIT) . ' answered 429');

	# what rl_peek says of the key afterwards, and when it said it
	my ($remaining, $reset_epoch, $retry_secs, $peek_lim, $peek_win_secs, $peek_at) =
	  split /\|/, $node->safe_psql('postgres', qq{
		SELECT remaining, extract(epoch FROM reset_at), extract(epoch FROM retry_after),
		       lim, ceil(extract(epoch FROM win))::bigint, extract(epoch FROM clock_timestamp())
		  FROM rl_peek('$key', $LIMIT, '$WINDOW')});
	note("rl_peek('$key'): remaining $remaining, reset_at $reset_epoch, retry_after $retry_secs s");
	is("$remaining $peek_lim $peek_win_secs", "0 $LIMIT $WINDOW_SECS",
		'rl_peek afterwards: nothing left of lim 3 in the hour');
	is($redis->cli('zcard', "slidewin:log:$key"), $LIMIT, 'Redis holds one entry per 200');

	# --- headers on every answer ------------------------------------------
	my @every = qw(ratelimit-policy ratelimit x-ratelimit-limit x-ratelimit-remaining x-ratelimit-reset);
	for my $f (@every)
	{
		is(count_where(sub { defined $_[0]{headers}{$f} }, $answers), 200, "$f on all 200 answers");
	}
	is(count_where(sub { ($_[0]{headers}{'x-ratelimit-limit'} // '') eq $LIMIT }, $answers), 200,
		"X-RateLimit-Limit is lim ($LIMIT) on every answer");
	my $policy = qq{"$POLICY";q=$LIMIT;w=$WINDOW_SECS};
	is(count_where(sub { ($_[0]{headers}{'ratelimit-policy'} // '') eq $policy }, $answers), 200,
		"RateLimit-Policy is $policy on every answer (q = lim, w = the window in seconds)");

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
	# RateLimit: r is what remains, t the seconds from the answer to reset_at
	my $t_lo = $reset - ceil($t1) - 1;
	my $t_hi = $reset - int($t0) + 1;
	is(count_where(sub {
		my ($r, $t) = ($_[0]{headers}{ratelimit} // '') =~ /^"\Q$POLICY\E";r=(\d+);t=(\d+)$/;
		defined $t && $r == $remaining && $t >= $t_lo && $t <= $t_hi
	}, \@denied), scalar(@denied),
		qq{RateLimit of every 429 is "$POLICY";r=$remaining;t=<seconds to reset_at> ($t_lo to $t_hi)});
	is(count_where(sub { $_[0]{body} =~ /\Q$key\E/ || length($_[0]{body}) > 200 }, $answers), 0,
		'no answer names the key, and every body is short');

	# --- the 200s -----------------------------------------------------------
	is(count_where(sub { defined $_[0]{headers}{'retry-after'} }, \@ok), 0, 'no Retry-After on a 200');
	is(join(',', sort map { $_->{headers}{'x-ratelimit-remaining'} // 'none' } @ok),
		join(',', 0 .. $LIMIT - 1),
		'X-RateLimit-Remaining of the 200s: ' . join(', ', reverse 0 .. $LIMIT - 1) . ', one each');
	my ($last) = grep { ($_->{headers}{'x-ratelimit-remaining'} // '') eq '0' } @ok;
	ok($last && abs($last->{headers}{'x-ratelimit-reset'} - $reset) <= 1,
		"X-RateLimit-Reset of the last admission is rl_peek's reset_at ($reset) within a second");
	is(count_where(sub {
		my ($r, $t) = ($_[0]{headers}{ratelimit} // '') =~ /^"\Q$POLICY\E";r=(\d+);t=(\d+)$/;
		defined $t && $r eq $_[0]{headers}{'x-ratelimit-remaining'} && $t >= $t_lo && $t <= $t_hi
	}, \@ok), scalar(@ok), 'RateLimit of every 200 agrees with its X-RateLimit-Remaining and reset');

	# --- another tenant, a missing tenant -----------------------------------
	my ($other) = @{ requests($app, 1, 1, ['X-Tenant: t2']) };
	is($other->{status} . ' ' . ($other->{headers}{'x-ratelimit-remaining'} // 'none'),
		'200 ' . ($LIMIT - 1), 'another tenant has a quota of its own: 200, remaining lim - 1');
	my ($by_query) = @{ requests($app, 1, 1, [], '?tenant=t3') };
	is($by_query->{status}, 200, 'the tenant can come as ?tenant= too');
	my ($nobody) = @{ requests($app, 1, 1, []) };
	is($nobody->{status}, 400, 'no tenant: 400');
	is(scalar(grep { /$rl_fields/ } keys %{ $nobody->{headers} }), 0,
		'and no rate-limit headers, since nothing was counted');

	# --- a failing statement: 500, short, nothing leaked --------------------
	$node->safe_psql('postgres', 'DROP EXTENSION slidewin');
	my ($failed) = @{ requests($app, 1, 1, ["X-Tenant: $tenant"]) };
	is($failed->{status}, 500, 'a failing statement (the extension dropped): 500');
	ok(length($failed->{body}) < 100 && $failed->{body} !~ /rl_attempt|\Q$key\E|$tenant/,
		"with a short body that names neither function, key nor tenant: $failed->{body}");
	is(scalar(grep { /$rl_fields/ } keys %{ $failed->{headers} }), 0, 'and no rate-limit headers');
	# (uvicorn logs it after the answer has gone)
	ok(eval { SlidewinTest::wait_for("the error in the app's log",
		sub { slurp_file($app->{log}) =~ /rl_attempt/ }, 10) }, "the error went to the app's log instead");
	$node->safe_psql('postgres', 'CREATE EXTENSION slidewin');
	my ($again) = @{ requests($app, 1, 1, ['X-Tenant: t4']) };
	is($again->{status}, 200, 'the app serves again once the extension is back');
	return;
}

1;
