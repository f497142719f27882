# Sentinel, beyond the failover of 090_sentinel:
#
#  - ROLE: a sentinel that names a replica. slidewin asks ROLE, sees it is not
#    a master and asks the sentinels once more; no script ever reaches the
#    replica. A sentinel that keeps naming a replica fails the call (08001,
#    or the call's policy) after exactly two questions.
#  - READONLY: the master a backend is connected to is demoted (REPLICAOF)
#    and the sentinel names another; the next call meets READONLY on the old
#    connection, asks again at once, and is answered by the new master.
#  - ACL: the rules doc/topologies.md prints for Sentinel (+role on the
#    master, AUTH and SENTINEL GET-MASTER-ADDR-BY-NAME on the sentinel), on a
#    master user made from doc/installing.md's rules and on a real sentinel's
#    default user: enough, and the ACL logs stay empty.
#  - rediss-sentinel://: TLS to a real sentinel that asks for a password and
#    to the master it names; under "full" the master's certificate must name
#    the address the sentinel announces, under "ca" it need not.
#
# The sentinel in the first two parts is a fake (test/perl/fake_redis.pl),
# which names whatever server the test chooses; the servers are real Redis.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use FakeRedis;
use SlidewinTest;

my $master  = SlidewinTest::start_redis();
my $replica = SlidewinTest::start_redis(
	args => [ '--replicaof', '127.0.0.1', $master->port ]);
my $fake = FakeRedis->start;
my $fport = $fake->port;
sub names { return FakeRedis::bulks('127.0.0.1', $_[0]->port) }

my $node = SlidewinTest::new_node('sentinel_roles', undef,
	[ "slidewin.redis_url = 'redis-sentinel://127.0.0.1:$fport/mymaster'",
	  'slidewin.redis_retry_interval = 0' ]);

sub run_sql { return SlidewinTest::node_sql($node, @_) }

# Calls of a script command a server has seen, rejected ones included.
sub script_calls
{
	my ($redis) = @_;
	my $n = 0;
	for ($redis->cli('info', 'commandstats') =~ /^cmdstat_(?:eval(?:sha)?|fcall):(.*)$/mg)
	{
		my %f = map { split /=/ } split /,/;
		$n += ($f{calls} // 0) + ($f{rejected_calls} // 0) + ($f{failed_calls} // 0);
	}
	return $n;
}

SlidewinTest::wait_for('replication',
	sub { $master->cli('info', 'replication') =~ /connected_slaves:1/ });

# ---------------------------------------------------------------------
# ROLE: the sentinel names the replica first, then the master.
# ---------------------------------------------------------------------
$fake->reply('SENTINEL', names($replica), names($master));
$fake->mark;
my ($out, $err) = run_sql(q{SELECT (r).allowed, (r).store FROM rl_attempt('role:1', 10, '1 hour', 1, 'error') r});
is($out, 't|redis', 'the sentinel named a replica first: answered by Redis') or diag($err);
is($master->cli('exists', 'slidewin:log:role:1'), '1', 'on the master');
is($fake->count('SENTINEL'), 2, 'the sentinel was asked twice');
is(script_calls($replica), 0, 'no script call ever reached the replica (ROLE was asked first)');

# It keeps naming the replica: two questions, then the call's policy.
$fake->reply('SENTINEL', names($replica));
$fake->mark;
($out, $err) = run_sql(q{SELECT * FROM rl_attempt('role:2', 10, '1 hour', 1, 'error')});
like($err, qr/ERROR:\s+08001: .*not a master/s, 'a sentinel that names only a replica: 08001');
is($fake->count('SENTINEL'), 2, 'after asking twice, no more');
($out, $err) = run_sql(q{SELECT (r).store FROM rl_attempt('role:2', 10, '1 hour', 1, 'fallback') r});
is($out, 'fallback', 'and a fallback call site gets the fallback');
is(script_calls($replica), 0, 'still no script call on the replica');

# ---------------------------------------------------------------------
# READONLY: the master of a live connection is demoted.
# ---------------------------------------------------------------------
my $old = SlidewinTest::start_redis();
my $new = SlidewinTest::start_redis();
my ($oport, $nport) = ($old->port, $new->port);
my $cli = $SlidewinTest::cli_bin;
# The switch of the sentinel's answer must happen between two calls of one
# session: a control file naming $new is made now and moved into place by
# psql's \! between the calls.
my $control = $fake->{control};
$fake->reply('SENTINEL', names($new));
rename($control, "$control.next") or die $!;
$fake->reply('SENTINEL', names($old));
($out, $err) = run_sql(qq{
SELECT (r).allowed, (r).store FROM rl_attempt('ro:1', 10, '1 hour', 1, 'error') r;
\\! $cli -h 127.0.0.1 -p $oport replicaof 127.0.0.1 $nport >/dev/null
\\! mv $control.next $control
SELECT (r).allowed, (r).store FROM rl_attempt('ro:2', 10, '1 hour', 1, 'error') r;
});
is($out, "t|redis\nt|redis", 'the demoted master said READONLY; the call asked again and was answered')
  or diag($err);
is($new->cli('exists', 'slidewin:log:ro:2'), '1', 'by the new master');
like($old->cli('info', 'errorstats'), qr/^errorstat_READONLY:count=[1-9]/m,
	'the old connection was kept and met READONLY (not a dropped connection)');

# ---------------------------------------------------------------------
# ACL: the rules the documentation prints.
# ---------------------------------------------------------------------
my $src = SlidewinTest::src_dir();
my ($base) = slurp_file("$src/doc/installing.md") =~
  /<!-- redis-acl:begin -->\n```[a-z]*\n(.*?)^```/ms;
my ($sblock) = slurp_file("$src/doc/topologies.md") =~
  /<!-- redis-acl-sentinel:begin -->\n```[a-z]*\n(.*?)^```/ms;
ok(defined $base && defined $sblock, 'the ACL blocks are in the documentation')
  or BAIL_OUT('ACL blocks missing');
my @base = split ' ', $base;
my (undef, undef, $user, @rules) = @base;
my ($password) = map { /^>(.+)$/ ? $1 : () } @rules;
my @cmds = map { [ split ' ' ] } grep { /^ACL SETUSER/i } split /\n/, $sblock;
is(scalar(@cmds), 2, 'two commands for Sentinel: the master user, the sentinel');
my @on_master   = @{ $cmds[0] }[ 2 .. $#{ $cmds[0] } ];
my @on_sentinel = @{ $cmds[1] }[ 2 .. $#{ $cmds[1] } ];
is($on_master[0], $user, 'the master block extends the same user');
my ($spass) = map { /^>(.+)$/ ? $1 : () } @on_sentinel;

my $amaster = SlidewinTest::start_redis();
is(scalar $amaster->cli('acl', 'setuser', $user, @rules), 'OK', 'base rules accepted');
is(scalar $amaster->cli('acl', 'setuser', @on_master), 'OK', 'sentinel rule for the master accepted');
my $sentinel = SlidewinTest::start_sentinel(master => $amaster->port, quorum => 1);
SlidewinTest::wait_for('the sentinel to know the master',
	sub { SlidewinTest::sentinel_cli($sentinel, 'sentinel', 'get-master-addr-by-name', 'mymaster') =~ /\d/ });
# an administrator, to read the sentinel's ACL log once default is restricted
SlidewinTest::sentinel_cli($sentinel, 'acl', 'setuser', 'admin', 'on', '>admin-pw', '+@all');
is(SlidewinTest::sentinel_cli($sentinel, 'acl', 'setuser', @on_sentinel), 'OK',
	'sentinel rule accepted by the sentinel');
my $sport = $sentinel->{port};
($out, $err) = run_sql(qq{
SET slidewin.redis_sentinel_password = '$spass';
SET slidewin.redis_url = 'redis-sentinel://$user:$password\@127.0.0.1:$sport/mymaster';
SELECT (r).allowed, (r).store FROM rl_attempt('acl:1', 10, '1 hour', 1, 'error') r;
SELECT (r).allowed FROM rl_attempt_multi('acl:2', ARRAY[10, 100], ARRAY['1 hour', '1 day']::interval[], 1, 'error') r;
});
like($out, qr/^t\|redis\nt$/, 'the documented rules are enough') or diag($err);
is($amaster->cli('acl', 'log'), '', 'the master ACL log is empty');
is(SlidewinTest::sentinel_cli($sentinel, '--user', 'admin', '--pass', 'admin-pw',
		'--no-auth-warning', 'acl', 'log'), '', 'the sentinel ACL log is empty');
($out, $err) = run_sql(qq{
SET slidewin.redis_url = 'redis-sentinel://$user:$password\@127.0.0.1:$sport/mymaster';
SELECT * FROM rl_attempt('acl:4', 10, '1 hour', 1, 'error');
});
like($err, qr/ERROR:\s+08001: .*sentinel.*(NOAUTH|WRONGPASS|auth)/si,
	'without slidewin.redis_sentinel_password the sentinel refuses: 08001');

# ---------------------------------------------------------------------
# rediss-sentinel://: TLS to the sentinel and to the master.
# ---------------------------------------------------------------------
my $d = PostgreSQL::Test::Utils::tempdir('sentinel_tls');
SlidewinTest::make_ca($d);
my ($mcrt, $mkey) = SlidewinTest::make_leaf($d, 'master', 'DNS:localhost', 2);
my ($scrt, $skey) = SlidewinTest::make_leaf($d, 'sentinel', 'DNS:localhost,IP:127.0.0.1', 2);
my $tmaster = SlidewinTest::start_redis(tls => { cert => $mcrt, key => $mkey, ca => "$d/ca.crt" });
my $tsentinel = SlidewinTest::start_sentinel(
	master => $tmaster->port, quorum => 1,
	tls    => { cert => $scrt, key => $skey, ca => "$d/ca.crt" },
	conf   => [ 'requirepass sentinel-secret' ]);
SlidewinTest::wait_for('the TLS sentinel to know the master',
	sub { SlidewinTest::sentinel_cli($tsentinel, '--pass', 'sentinel-secret', '--no-auth-warning',
			'sentinel', 'get-master-addr-by-name', 'mymaster') =~ /\d/ });
my $tport = $tsentinel->{port};
my $tls_set = qq{
SET slidewin.redis_sentinel_password = 'sentinel-secret';
SET slidewin.redis_tls_ca_file = '$d/ca.crt';
SET slidewin.redis_url = 'rediss-sentinel://localhost:$tport/mymaster';
};
($out, $err) = run_sql(qq{$tls_set
SET slidewin.redis_tls_verify = 'ca';
SELECT (r).allowed, (r).store FROM rl_attempt('tls:1', 10, '1 hour', 1, 'error') r;
});
is($out, 't|redis', 'rediss-sentinel://, verify ca: answered by the TLS master') or diag($err);
is($tmaster->cli('exists', 'slidewin:log:tls:1'), '1', 'on the master the sentinel named');
($out, $err) = run_sql(qq{$tls_set
SET slidewin.redis_tls_verify = 'full';
SELECT * FROM rl_attempt('tls:2', 10, '1 hour', 1, 'error');
});
like($err, qr/ERROR:\s+08001: .*certificate verify failed/s,
	'verify full: the master certificate does not name 127.0.0.1, as announced: refused');
($out, $err) = run_sql(qq{$tls_set
SET slidewin.redis_url = 'redis-sentinel://localhost:$tport/mymaster';
SELECT * FROM rl_attempt('tls:3', 10, '1 hour', 1, 'error');
});
like($err, qr/ERROR:\s+08001: .*at the sentinel localhost:\d+: /s, 'plain text to the TLS sentinel: a connection failure');

unlike(slurp_file($node->logfile), qr/PANIC|terminated by signal/, 'no crash');
done_testing();
