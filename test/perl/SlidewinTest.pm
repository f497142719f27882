# SlidewinTest: helpers for slidewin's TAP scripts (test/t/*.pl).
#
# A script starts its own Redis servers and PostgreSQL nodes; it does not use
# the servers that run_all.sh started for pg_regress.  Everything this module
# starts is killed when the script ends, on success or failure, and also when
# the script is stopped by SIGTERM or SIGINT (a harness timeout, ^C).
#
#   use SlidewinTest;
#   my $redis = SlidewinTest::start_redis();
#   my $node  = SlidewinTest::new_node('main', $redis);
#   is($redis->cli('ping'), 'PONG');
#   $redis->kill9;   # Redis vanishes without a goodbye
#   $redis->restart; # same port, same directory, empty data set
#
# Redis objects (SlidewinTest::Redis) have these methods:
#   port, dir, pid, url      where it runs
#   set_password($pw)        the password cli() uses from now on (after
#                            CONFIG SET requirepass)
#   cli(@args)               run redis-cli against it; returns trimmed stdout
#                            (in list context: stdout, stderr, exit status)
#   cli_bg(@args)            start redis-cli without waiting; returns an
#                            IPC::Run harness (call ->finish on it), and in
#                            list context also refs to its stdout and stderr
#   alive                    the process exists
#   stop                     SHUTDOWN NOSAVE, and wait for the process to go
#   kill9                    SIGKILL, and wait for the process to go
#   restart                  stop if running, then start on the same port/dir
#   freeze, thaw             SIGSTOP / SIGCONT: a server that hangs
#   pause_ms($ms)            CLIENT PAUSE $ms: commands stall for $ms
#   debug_sleep_bg($secs)    DEBUG SLEEP in the background: Redis is busy
#
# The repository root is in $ENV{SLIDEWIN_SRC}; see SlidewinTest::src_dir.
#
# For run_all.sh's checks (see each function):
#   allow_log_line($node, $text)   a crash line this script causes on purpose
#   asan_options(@opts)            sanitizer options for the nodes started next
#   check_server_maps($node)       done by new_node: the node runs under the
#                                  server wrapper (the sanitize pass)
# Ports: free_port honours SLIDEWIN_PORT_RANGE (Redis and fake servers only).
#
# Also: make_ca/make_leaf (throwaway certificates), start_sentinel and
# sentinel_cli (Redis Sentinel, plain or TLS), start_cluster and
# cluster_masters and cluster_tag (Redis Cluster), wait_for (poll a
# condition), fullest_window (the fullest window of timed admissions).

package SlidewinTest;

use strict;
use IO::Socket::INET;
use warnings;

use Carp;
use Exporter 'import';
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

# Seconds on a clock that never steps (the wall clock of a virtual machine
# can), for the deadlines of the waits below.
sub _mono { return Time::HiRes::clock_gettime(Time::HiRes::CLOCK_MONOTONIC()) }

our @EXPORT_OK =
  qw(start_redis new_node src_dir allow_log_line asan_options check_server_maps
	 session_sql node_sql sqlstate);

my @all_redis;

# The server under test: redis-server, or $SLIDEWIN_REDIS_SERVER (valkey-server).
our $server_bin = $ENV{SLIDEWIN_REDIS_SERVER} || 'redis-server';
our $cli_bin = $ENV{SLIDEWIN_REDIS_CLI} || ($server_bin =~ s/-server$/-cli/r);

# A port for a Redis or fake server.  By default PostgreSQL::Test's own
# get_free_port (PostgreSQL 15 keeps it in Cluster; later releases moved it to
# Utils), which draws from 10200-32767.  With SLIDEWIN_PORT_RANGE=LO-HI (as
# in test/lib.sh) the port is drawn from that range instead.  Either way it is
# reserved in the shared port lock directory (PG_TEST_PORT_DIR), so parallel
# scripts do not collide.  The ports of PostgreSQL nodes always come from
# Cluster's own range: SLIDEWIN_PORT_RANGE does not cover them.
sub free_port
{
	my $range = $ENV{SLIDEWIN_PORT_RANGE};
	if (!defined $range || $range eq '')
	{
		my $f = PostgreSQL::Test::Utils->can('get_free_port')
		  // \&PostgreSQL::Test::Cluster::get_free_port;
		return $f->();
	}
	my ($lo, $hi) = $range =~ /^(\d{1,5})-(\d{1,5})$/;
	croak "SLIDEWIN_PORT_RANGE=$range: expected LO-HI with 1024 <= LO <= HI <= 65535"
	  unless defined $hi && $lo >= 1024 && $lo <= $hi && $hi <= 65535;
	my $reserve = PostgreSQL::Test::Cluster->can('_reserve_port')
	  // PostgreSQL::Test::Utils->can('_reserve_port');
	for (1 .. 500)
	{
		my $port = $lo + int(rand($hi - $lo + 1));
		next unless _can_bind($port);
		next if $reserve && !$reserve->($port);
		return $port;
	}
	croak "no free port in SLIDEWIN_PORT_RANGE=$range after 500 tries";
}

sub _can_bind
{
	my ($port) = @_;
	require Socket;
	socket(my $sock, Socket::PF_INET(), Socket::SOCK_STREAM(), 0) or return 0;
	setsockopt($sock, Socket::SOL_SOCKET(), Socket::SO_REUSEADDR(), pack('l', 1));
	my $ok = bind($sock, Socket::pack_sockaddr_in($port, Socket::inet_aton('127.0.0.1')));
	close($sock);
	return $ok ? 1 : 0;
}

sub src_dir
{
	return $ENV{SLIDEWIN_SRC}
	  // croak 'SLIDEWIN_SRC is not set (run through test/run_all.sh)';
}

# start_redis(%opts): a fresh Redis on 127.0.0.1 with no persistence.
#   port     => fixed port (default: a free one)
#   args     => [ extra redis-server arguments, e.g. '--maxmemory', '1mb' ]
#   password => the default user's password (requirepass); cli() uses it
#   tls      => { cert, key, ca [, auth_clients => 'yes'|'no'|'optional',
#                 client_cert, client_key] }: TLS only, on the port (the
#                 plain port is off); cli() speaks TLS with ca (and the
#                 client pair, when the server asks for one)
sub start_redis
{
	my (%opts) = @_;
	my $self = bless {
		port     => $opts{port} // free_port(),
		dir      => PostgreSQL::Test::Utils::tempdir('redis'),
		args     => $opts{args} // [],
		password => $opts{password},
		tls      => $opts{tls},
		pid      => undef,
	}, 'SlidewinTest::Redis';
	push @all_redis, $self;
	$self->_launch;
	return $self;
}

# new_node($name, $redis [, $extra_conf [, \%init_opts]]): an initialised,
# started node with slidewin.redis_url pointing at $redis (a
# SlidewinTest::Redis or a port; undef for none) and the extension created in
# database postgres.  $extra_conf is a string or an array ref of
# postgresql.conf lines; %init_opts go to Cluster's init (allows_streaming).
sub new_node
{
	my ($name, $redis, $extra_conf, $init_opts) = @_;
	my $port = ref $redis ? $redis->port : $redis;

	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $init_opts // {} });

	my $conf = '';
	$conf .= "slidewin.redis_url = 'redis://127.0.0.1:$port'\n"
	  if defined $port;
	if (defined $extra_conf)
	{
		$conf .= join("\n", ref $extra_conf ? @$extra_conf : ($extra_conf))
		  . "\n";
	}
	$node->append_conf('postgresql.conf', $conf) if $conf ne '';

	$node->start;
	check_server_maps($node);
	$node->safe_psql('postgres', 'CREATE EXTENSION slidewin');
	return $node;
}

# check_server_maps($node): when SLIDEWIN_SERVER_MUST_MAP is set (the
# sanitizer pass sets it to the ASan runtime's file name), die unless the
# node's postmaster has a file of that name mapped, so that a node the server
# wrapper did not reach cannot pass a sanitizer run unchecked.
sub check_server_maps
{
	my ($node) = @_;
	my $want = $ENV{SLIDEWIN_SERVER_MUST_MAP};
	return if !defined $want || $want eq '';
	my $pidfile = $node->data_dir . '/postmaster.pid';
	my ($pid) = (PostgreSQL::Test::Utils::slurp_file($pidfile) =~ /^(\d+)/);
	croak "no postmaster pid in $pidfile" unless $pid;
	my $maps = PostgreSQL::Test::Utils::slurp_file("/proc/$pid/maps");
	croak "node " . $node->name . " (postmaster $pid) does not map $want: "
	  . 'SLIDEWIN_SERVER_WRAPPER did not reach it'
	  unless index($maps, $want) >= 0;
	return;
}

# allow_log_line($node, $text): run_all.sh scans every node's log for crashes
# ("terminated by signal", "PANIC:"); a script that causes one on purpose
# declares each such line here, once per occurrence it expects, before or after
# causing it.  $text is a fixed string that must appear in the line (make it
# narrow: name the pid).  Only these two kinds of line can be allowed this way;
# sanitizer reports never can.  The declarations go to a file next to the log
# ($node->logfile . '.allow'), one per line.
sub allow_log_line
{
	my ($node, $text) = @_;
	croak 'allow_log_line: empty or multi-line text' if $text eq '' || $text =~ /\n/;
	open(my $fh, '>>', $node->logfile . '.allow')
	  or croak 'cannot write ' . $node->logfile . ".allow: $!";
	print $fh "$text\n";
	close($fh);
	return;
}

# asan_options(@opts): sanitizer options (ASAN_OPTIONS entries, such as
# 'quarantine_size_mb=0') for the servers this script starts from now on.
# Without the sanitizer they change nothing.  They are appended both to
# ASAN_OPTIONS and to any ASAN_OPTIONS= inside SLIDEWIN_SERVER_WRAPPER, so they
# win whichever of the two carries the rest.
sub asan_options
{
	my (@opts) = @_;
	my $add = join(':', @opts);
	$ENV{ASAN_OPTIONS} =
	  join(':', grep { defined && $_ ne '' } $ENV{ASAN_OPTIONS}, $add);
	$ENV{SLIDEWIN_SERVER_WRAPPER} =~ s/\bASAN_OPTIONS=(\S*)/ASAN_OPTIONS=$1:$add/
	  if defined $ENV{SLIDEWIN_SERVER_WRAPPER};
	return;
}

# Redis 7 refuses DEBUG unless this is set; older servers reject the option.
sub _debug_args
{
	my $version = `$server_bin --version`;
	return ($version =~ /v=(\d+)\./ && $1 >= 7)
	  ? ('--enable-debug-command', 'yes')
	  : ();
}


# ---------------------------------------------------------------------
# Throwaway certificates, made by openssl at test time
# ---------------------------------------------------------------------

sub _openssl
{
	my @cmd = ('openssl', @_);
	my ($out, $err);
	IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err)
	  or croak "@cmd failed: $err";
	return;
}

# make_ca($dir [, $name]): a self-signed CA in $dir/$name.crt and .key
# (name: "ca"); returns the certificate's path. Keys are EC P-256, made in
# milliseconds: an RSA key's prime search took seconds on a busy machine.
sub make_ca
{
	my ($dir, $name) = @_;
	$name //= 'ca';
	_openssl(qw(req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2),
		'-subj', "/CN=slidewin-test-$name",
		'-keyout', "$dir/$name.key", '-out', "$dir/$name.crt");
	return "$dir/$name.crt";
}

# Whether this openssl's x509 takes -not_after (3.4 and later).
sub _openssl_has_not_after
{
	my $help = `openssl x509 -help 2>&1`;
	return $help =~ /-not_after/;
}

# make_leaf($dir, $name, $san, $days): a certificate for subjectAltName $san
# (e.g. 'DNS:localhost,IP:127.0.0.1') signed by the CA in $dir/ca.*, valid
# for $days days (negative: expired). Returns the certificate and key paths.
sub make_leaf
{
	my ($dir, $name, $san, $days) = @_;
	_openssl(qw(req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes), '-subj', "/CN=$name",
		'-keyout', "$dir/$name.key", '-out', "$dir/$name.csr");
	open my $fh, '>', "$dir/$name.ext" or croak $!;
	print $fh "subjectAltName=$san\n";
	close $fh;
	my @validity = ('-days', $days);
	if ($days < 0 && _openssl_has_not_after())
	{
		# OpenSSL 3.4 and later refuse a negative -days ("end date before
		# start date"); they take the dates themselves instead.
		my $stamp = sub {
			my @t = gmtime(time + $_[0] * 86400);
			return sprintf('%04d%02d%02d%02d%02d%02dZ',
				$t[5] + 1900, $t[4] + 1, @t[3, 2, 1, 0]);
		};
		@validity = ('-not_before', $stamp->($days - 1), '-not_after', $stamp->($days));
	}
	_openssl(qw(x509 -req -CAcreateserial), @validity,
		'-in', "$dir/$name.csr", '-CA', "$dir/ca.crt", '-CAkey', "$dir/ca.key",
		'-extfile', "$dir/$name.ext", '-out', "$dir/$name.crt");
	chmod 0600, "$dir/$name.key";
	return ("$dir/$name.crt", "$dir/$name.key");
}

# ---------------------------------------------------------------------
# Sentinels
# ---------------------------------------------------------------------

my @all_sentinels;

# start_sentinel(master => PORT, %opts): redis-server --sentinel (or
# valkey-server) watching the master "mymaster" at 127.0.0.1:PORT, with a
# config file in a directory of its own. Returns { port, dir, pid, tls }.
#   quorum => N          (default 2)
#   tls    => { cert, key, ca }: TLS only, to clients and to the servers
#   conf   => [ lines ]  more sentinel.conf lines
sub start_sentinel
{
	my (%opts) = @_;
	my $port = free_port();
	my $dir  = PostgreSQL::Test::Utils::tempdir('sentinel');
	my $t    = $opts{tls};
	my @tls  = $t
	  ? ('port 0', "tls-port $port", "tls-cert-file $t->{cert}",
		"tls-key-file $t->{key}", "tls-ca-cert-file $t->{ca}",
		'tls-auth-clients no', 'tls-replication yes')
	  : ("port $port");
	open my $fh, '>', "$dir/sentinel.conf" or croak $!;
	print $fh join "\n", @tls,
	  'bind 127.0.0.1', 'daemonize yes',
	  "pidfile $dir/sentinel.pid", "logfile $dir/sentinel.log", "dir $dir",
	  "sentinel monitor mymaster 127.0.0.1 $opts{master} " . ($opts{quorum} // 2),
	  'sentinel down-after-milliseconds mymaster 1000',
	  'sentinel failover-timeout mymaster 10000',
	  'sentinel parallel-syncs mymaster 1', @{ $opts{conf} // [] }, '';
	close $fh;
	_may_start_server();
	system($server_bin, "$dir/sentinel.conf", '--sentinel') == 0
	  or croak 'sentinel did not start';
	my $s = { port => $port, dir => $dir, tls => $t };
	for (1 .. 100)
	{
		if (-s "$dir/sentinel.pid")
		{
			$s->{pid} = 0 + PostgreSQL::Test::Utils::slurp_file("$dir/sentinel.pid");
			last;
		}
		usleep(50_000);
	}
	croak "sentinel on port $port wrote no pid file" unless $s->{pid};
	push @all_sentinels, $s;
	return $s;
}

# sentinel_cli($s, @args): redis-cli against a sentinel; trimmed stdout.
sub sentinel_cli
{
	my ($s, @args) = @_;
	my ($out, $err) = ('', '');
	my @tls = $s->{tls} ? ('--tls', '--insecure') : ();
	IPC::Run::run([ $cli_bin, '-h', '127.0.0.1', '-p', $s->{port}, @tls, @args ],
		'<', \undef, '>', \$out, '2>', \$err);
	$out =~ s/\s+\z//;
	return $out;
}

# max_overlap(@spans): how many of the spans ("t1|t2", epoch seconds) are
# open at once at most. At equal times an end comes before a start, so
# spans that only touch do not overlap.
sub max_overlap
{
	my @ev;
	for my $row (@_)
	{
		my ($t1, $t2) = split /\|/, $row;
		push @ev, [ $t1, 1 ], [ $t2, -1 ];
	}
	my ($d, $max) = (0, 0);
	for my $e (sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] } @ev)
	{
		$d += $e->[1];
		$max = $d if $d > $max;
	}
	return $max;
}

# aligned_window($span, $min): a window length in seconds, a whole number of
# hours and at least $min, whose aligned window (fixed_window's and
# sliding_counter's, at multiples of the length since the Unix epoch) that
# holds the present also holds the next $span seconds. A test whose calls
# must all fall in one window (so that a key's count is every admission)
# takes it rather than a day, which a run near midnight UTC would cross.
sub aligned_window
{
	my ($span, $min) = @_;
	my $now = time();
	for (my $w = 3600 * int(($min + 3599) / 3600);; $w += 3600)
	{
		return $w if int($now / $w) == int(($now + $span) / $w);
	}
}

# session_sql($session, $sql): $sql in a background_psql session (which
# keeps going after an error); returns (stdout, stderr, seconds taken), the
# session's stderr emptied for the next call.
sub session_sql
{
	my ($s, $sql) = @_;
	$s->{stderr} = '';
	my $t0 = Time::HiRes::time();
	my $out = $s->query($sql);
	my $dt = Time::HiRes::time() - $t0;
	my $err = $s->{stderr};
	$s->{stderr} = '';
	return ($out, $err, $dt);
}

# node_sql($node, $sql [, on_error_stop => 0|1]): $sql in a new psql with
# VERBOSITY verbose (so that errors carry their SQLSTATE); returns (stdout,
# stderr, seconds taken).
sub node_sql
{
	my ($node, $sql, %opt) = @_;
	my $t0 = Time::HiRes::time();
	my (undef, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		on_error_stop => $opt{on_error_stop} // 1);
	return ($out, $err, Time::HiRes::time() - $t0);
}

# sqlstate($stderr): the SQLSTATE of the first ERROR in verbose psql
# output, or "none (...)" with what was there instead.
sub sqlstate
{
	my ($err) = @_;
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : "none ($err)";
}

# wait_for($what, $cond [, $secs]): poll $cond every 0.1 s; die after $secs
# (default 30). Returns the time it became true.
sub wait_for
{
	my ($what, $cond, $secs) = @_;
	my $t0 = Time::HiRes::time();
	until ($cond->())
	{
		croak "timed out waiting for $what" if Time::HiRes::time() - $t0 > ($secs // 30);
		usleep(100_000);
	}
	return Time::HiRes::time();
}


# ---------------------------------------------------------------------
# Redis Cluster
# ---------------------------------------------------------------------

# start_cluster(masters => 3, replicas => 1, args => [...], tls => {...}): that many
# cluster-enabled servers on loopback, joined by `redis-cli --cluster
# create` (valkey-cli under the Valkey pass), and ready: every node reports
# cluster_state:ok and the same slot map. Returns a hash with
#   nodes   => [ SlidewinTest::Redis ... ]   all of them
#   url     => 'redis-cluster://127.0.0.1:P1,127.0.0.1:P2'  two seeds
#              (rediss-cluster:// with tls: TLS only, the cluster bus too)
sub start_cluster
{
	my (%opts) = @_;
	my $masters  = $opts{masters}  // 3;
	my $replicas = $opts{replicas} // 1;
	my @nodes;
	my $t = $opts{tls};
	for (1 .. $masters * (1 + $replicas))
	{
		# the cluster bus listens 10000 above the node's port
		my $port;
		for (1 .. 200)
		{
			$port = free_port();
			last if $port <= 55535 && _can_bind($port + 10000);
			$port = undef;
		}
		croak 'no port for a cluster node' unless defined $port;
		push @nodes, start_redis(
			port => $port,
			($t ? (tls => $t) : ()),
			args => [
			'--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf',
			'--cluster-node-timeout', $opts{node_timeout} // 2000,
			($t ? ('--tls-cluster', 'yes', '--tls-replication', 'yes') : ()),
			@{ $opts{args} // [] } ]);
	}
	my ($out, $err) = ('', '');
	IPC::Run::run([ $cli_bin, ($t ? ('--tls', '--cacert', $t->{ca}) : ()), '--cluster', 'create',
			(map { '127.0.0.1:' . $_->port } @nodes),
			'--cluster-replicas', $replicas, '--cluster-yes' ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60))
	  or croak "cluster create failed: $out $err";
	wait_for('the cluster to be ready', sub {
		my %maps;
		for my $n (@nodes)
		{
			return 0 unless $n->cli('cluster', 'info') =~ /cluster_state:ok/;
			my $up = () = $n->cli('cluster', 'nodes') =~ / connected\b/g;
			return 0 unless $up == @nodes;
			# the slot map as this node tells it, in a canonical order
			$maps{ join "\n", sort split /\n/, scalar $n->cli('cluster', 'slots') } = 1;
		}
		return keys %maps == 1;
	}, 60);
	return {
		nodes => \@nodes,
		url   => ($t ? 'rediss' : 'redis') . '-cluster://' . join(',', map { '127.0.0.1:' . $_->port } @nodes[ 0 .. 1 ]),
	};
}

# cluster_masters($cluster): the nodes that are masters now.
sub cluster_masters
{
	my ($c) = @_;
	return grep { $_->alive && scalar($_->cli('role')) =~ /^master/ } @{ $c->{nodes} };
}

# cluster_tag($key): the hash tag slidewin puts after the prefix of a key's
# Redis keys under Cluster, '{' and the 32-bit FNV-1a of the key in eight
# hex digits '}' (src/store/redis/store_redis.c), so that a test can name
# the keys of one user key: 'slidewin:' . cluster_tag($k) . "log:$k".
sub cluster_tag
{
	my ($key) = @_;
	my $h = 2166136261;
	for my $b (unpack 'C*', $key)
	{
		$h ^= $b;
		$h = ($h * 16777619) % 4294967296;
	}
	return sprintf '{%08x}', $h;
}

# fullest_window(\@brackets, $win): the most admissions any window of $win
# seconds held, each admission given as [t0, t1], the clock before and after
# its call (its unit was used at some moment between). Each window (t - win,
# t] is taken to end at some call's t1, and an admission counts in it only if
# its whole bracket lies inside, so that no window is over-counted by the
# uncertainty of when a unit was used.
sub fullest_window
{
	my ($c, $win) = @_;
	my @by_end = sort { $a->[1] <=> $b->[1] } @$c;
	my $max = 0;
	for my $i (0 .. $#by_end)
	{
		my $t = $by_end[$i][1];
		my $in = 0;
		for (my $j = $i; $j >= 0; $j--)
		{
			last if $by_end[$j][1] <= $t - $win;
			$in++ if $by_end[$j][0] > $t - $win;
		}
		$max = $in if $in > $max;
	}
	return $max;
}

# bracketed_take($node): in $node's postgres database, the table adm (k, t0,
# t1) and the function take(k, lim, win), which calls rl_allow and, when
# admitted, records the clock read before and after the call: the bracket
# of the moment its unit was used.
sub bracketed_take
{
	my ($node) = @_;
	$node->safe_psql('postgres', 'CREATE UNLOGGED TABLE adm (k text, t0 float8, t1 float8)');
	$node->safe_psql('postgres', q{
		CREATE FUNCTION take(k text, lim bigint, win interval) RETURNS boolean
		LANGUAGE plpgsql AS $$
		DECLARE t0 float8 := extract(epoch FROM clock_timestamp()); ok boolean;
		BEGIN
		  ok := rl_allow(k, lim, win);
		  IF ok THEN
		    INSERT INTO adm VALUES (k, t0, extract(epoch FROM clock_timestamp()));
		  END IF;
		  RETURN ok;
		END $$});
}

# taken_fullest(\@nodes, $key, $win): the fullest window of $win seconds
# over the admissions bracketed_take recorded for $key on all of @nodes,
# and how many there were in all.
sub taken_fullest
{
	my ($nodes, $key, $win) = @_;
	my @c;
	for my $n (@$nodes)
	{
		push @c, [ split /\|/ ]
		  for grep { $_ ne '' } split /\n/, $n->safe_psql('postgres', "SELECT t0, t1 FROM adm WHERE k = '$key'");
	}
	return (fullest_window(\@c, $win), scalar @c);
}

# pgbench_on_each($script_body, $opts, \@run, @nodes): pgbench with the
# script on each of @nodes at once, 8 clients, $opts in PGOPTIONS, for @run
# (['-T', seconds] or ['-t', transactions per client]); one test per node
# that pgbench exited 0, with its output when it did not.
sub pgbench_on_each
{
	my ($script_body, $opts, $run, @nodes) = @_;
	my $dir    = PostgreSQL::Test::Utils::tempdir('pgbench');
	my $script = "$dir/script.sql";
	open(my $fh, '>', $script) or die "cannot write $script: $!";
	print $fh $script_body;
	close $fh;
	local $ENV{PGOPTIONS} = $opts;
	my @bench;
	for my $n (@nodes)
	{
		my ($out, $err) = ('', '');
		my @cmd = ('pgbench', '-n', '-c', '8', '-j', '2', @$run, '-f', $script,
			'-h', $n->host, '-p', $n->port, 'postgres');
		push @bench, { node => $n, out => \$out, err => \$err,
			h => IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err) };
	}
	for my $b (@bench)
	{
		$b->{h}->finish;
		Test::More::is($b->{h}->full_result(0) >> 8, 0, $b->{node}->name . ': pgbench exits 0')
		  or Test::More::diag(${ $b->{out} } . ${ $b->{err} });
	}
	return;
}

# Let END blocks (ours, Cluster's) run when a harness timeout or ^C stops us,
# so no server outlives the script.
$SIG{TERM} = $SIG{INT} = sub {
	diag("killed by SIG$_[0]; stopping servers");
	exit 1;
};

END
{
	my $exit_code = $?;
	foreach my $r (@all_redis)
	{
		# Cleanup, not a test: a server that outlives its SIGKILL here (seen
		# twice in a chroot's PID namespace, all tests passed) is reported,
		# and the exit status stays the tests' own.
		eval { $r->_kill('KILL') if $r->alive; 1 }
		  or diag("END: could not stop a Redis server: $@");
	}
	kill 'KILL', map { $_->{pid} } grep { $_->{pid} } @all_sentinels;
	$? = $exit_code;
}

package SlidewinTest::Redis;

use strict;
use warnings;

use Carp;
use Test::More;
use Time::HiRes qw(usleep);

sub port { return $_[0]->{port} }
sub dir  { return $_[0]->{dir} }
sub pid  { return $_[0]->{pid} }
sub url  { return ($_[0]->{tls} ? 'rediss' : 'redis') . '://127.0.0.1:' . $_[0]->{port} }

# The redis-server arguments that put it on its port: plain, or TLS only.
sub _port_args
{
	my ($self) = @_;
	my $t = $self->{tls};
	return ('--port' => $self->{port}) unless $t;
	return (
		'--port'                => 0,
		'--tls-port'            => $self->{port},
		'--tls-cert-file'       => $t->{cert},
		'--tls-key-file'        => $t->{key},
		'--tls-ca-cert-file'    => $t->{ca},
		'--tls-auth-clients'    => $t->{auth_clients} // 'no');
}

sub _pidfile { return $_[0]->{dir} . '/redis.pid' }

# A TAP file with the line "# slidewin: starts no Redis server" is left out
# of the Valkey pass (test/run_all.sh), where it would run as in the main
# pass; it must then start no server, or that pass would lose a real check.
sub SlidewinTest::_may_start_server
{
	open(my $fh, '<', $0) or return;
	while (<$fh>)
	{
		croak "$0 says \"slidewin: starts no Redis server\" but starts one: remove that line"
		  if $_ eq "# slidewin: starts no Redis server\n";
	}
	return;
}

sub _launch
{
	my ($self) = @_;
	my $dir = $self->{dir};
	SlidewinTest::_may_start_server();
	unlink $self->_pidfile;

	# The password goes in a configuration file, quoted, not on the command
	# line: Valkey 8.1.1 drops a backslash from a command-line value
	# ('first:pw\x' became 'first:pwx'; Valkey 9 and Redis keep it). A
	# workaround in the test harness, not in slidewin.
	my @conf;
	if (defined $self->{password})
	{
		(my $quoted = $self->{password}) =~ s/(["\\])/\\$1/g;
		open my $fh, '>', "$dir/auth.conf" or croak "$dir/auth.conf: $!";
		print $fh "requirepass \"$quoted\"\n";
		close $fh;
		@conf = ("$dir/auth.conf");
	}

	my @cmd = (
		$server_bin,
		@conf,
		$self->_port_args,
		'--bind'       => '127.0.0.1',
		'--daemonize'  => 'yes',
		'--save'       => '',
		'--appendonly' => 'no',
		'--dir'        => $dir,
		'--pidfile'    => $self->_pidfile,
		'--logfile'    => "$dir/redis.log",
		SlidewinTest::_debug_args(),
		@{ $self->{args} });
	note("starting redis on port $self->{port}");
	system(@cmd) == 0 or croak "$server_bin did not launch: @cmd";

	# Wait until the server answering on the port is the one we started.
	my $deadline = SlidewinTest::_mono() + 10;
	while (SlidewinTest::_mono() < $deadline)
	{
		if (-s $self->_pidfile)
		{
			my $pid = PostgreSQL::Test::Utils::slurp_file($self->_pidfile);
			chomp $pid;
			my $info = $self->cli('info', 'server');
			if ($info =~ /^process_id:(\d+)/m && $1 == $pid)
			{
				$self->{pid} = $pid;
				return;
			}
		}
		usleep(50_000);
	}
	my $log =
	  -f "$dir/redis.log"
	  ? PostgreSQL::Test::Utils::slurp_file("$dir/redis.log")
	  : '(no log)';
	croak "redis on port $self->{port} did not come up in 10 s:\n$log";
}

sub set_password { $_[0]->{password} = $_[1]; return; }

sub _auth_args
{
	my ($self) = @_;
	my @a;
	if (my $t = $self->{tls})
	{
		# the test's own control channel: no verification (a server may
		# present an expired or misnamed certificate on purpose)
		push @a, '--tls', '--insecure';
		push @a, '--cert', $t->{client_cert}, '--key', $t->{client_key}
		  if $t->{client_cert};
	}
	push @a, '-a', $self->{password}, '--no-auth-warning'
	  if defined $self->{password};
	return @a;
}

sub cli
{
	my ($self, @args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run(
		[ $cli_bin, '-h', '127.0.0.1', '-p', $self->{port}, $self->_auth_args, @args ],
		'<', \undef, '>', \$out, '2>', \$err);
	my $status = $? >> 8;
	s/\s+\z// for $out, $err;
	return wantarray ? ($out, $err, $status) : $out;
}

# Scripts this Redis has run so far: calls of EVAL, EVALSHA and FCALL, less
# the failed ones (a NOSCRIPT reply ran nothing).
sub scripts_run
{
	my ($self) = @_;
	my $n = 0;
	for my $line (split /\n/, scalar $self->cli('INFO', 'commandstats'))
	{
		$n += $1 - $2
		  if $line =~ /^cmdstat_(?:eval(?:sha)?|fcall):calls=(\d+),.*failed_calls=(\d+)/;
	}
	return $n;
}

sub cli_bg
{
	my ($self, @args) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ $cli_bin, '-h', '127.0.0.1', '-p', $self->{port}, $self->_auth_args, @args ],
		'<', \undef, '>', \$out, '2>', \$err);
	return wantarray ? ($h, \$out, \$err) : $h;
}

# A daemonized Redis is not our child; once dead it may linger as a zombie
# until some init reaps it, so a zombie counts as gone.
sub alive
{
	my ($self) = @_;
	my $pid = $self->{pid};
	return 0 unless defined $pid && kill(0, $pid);
	if (open my $fh, '<', "/proc/$pid/stat")
	{
		my $stat = <$fh> // '';
		close $fh;
		return 0 if $stat =~ /\)\s+[ZX]\s/;
	}
	return 1;
}

sub _wait_gone
{
	my ($self) = @_;
	my $deadline = SlidewinTest::_mono() + 10;
	while ($self->alive && SlidewinTest::_mono() < $deadline)
	{
		usleep(20_000);
	}
	if ($self->alive)
	{
		my $stat = '';
		if (open my $fh, '<', "/proc/$self->{pid}/stat")
		{
			$stat = <$fh> // '';
			close $fh;
		}
		chomp $stat;
		croak "redis pid $self->{pid} still alive after 10 s (/proc/$self->{pid}/stat: $stat)";
	}
	# A process counted gone may still be closing its files: wait until its
	# port refuses connections, so that what follows meets a closed port, not
	# one reset mid-teardown (seen inside test-matrix's PID namespace).
	my $closed_by = SlidewinTest::_mono() + 5;
	while (SlidewinTest::_mono() < $closed_by)
	{
		my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $self->{port},
			Proto => 'tcp', Timeout => 1);
		last unless $s;
		close $s;
		usleep(20_000);
	}
	$self->{pid} = undef;
	return;
}

sub _kill
{
	my ($self, $sig) = @_;
	return unless $self->alive;
	kill('CONT', $self->{pid});    # a frozen server cannot act on TERM
	kill($sig, $self->{pid});
	$self->_wait_gone;
	return;
}

sub stop
{
	my ($self) = @_;
	return unless $self->alive;
	kill('CONT', $self->{pid});
	$self->cli('shutdown', 'nosave');
	$self->_wait_gone;
	return;
}

sub kill9
{
	my ($self) = @_;
	croak 'redis is not running' unless $self->alive;
	note("SIGKILL to redis pid $self->{pid}");
	$self->_kill('KILL');
	return;
}

sub restart
{
	my ($self) = @_;
	$self->stop if $self->alive;
	$self->_launch;
	return;
}

sub freeze
{
	my ($self) = @_;
	croak 'redis is not running' unless $self->alive;
	kill('STOP', $self->{pid});
	return;
}

sub thaw
{
	my ($self) = @_;
	kill('CONT', $self->{pid}) if $self->alive;
	return;
}

sub pause_ms
{
	my ($self, $ms) = @_;
	my $r = $self->cli('client', 'pause', $ms);
	croak "CLIENT PAUSE failed: $r" unless $r eq 'OK';
	return;
}

sub debug_sleep_bg
{
	my ($self, $secs) = @_;
	return $self->cli_bg('debug', 'sleep', $secs);
}

1;
