# rediss-cluster://: a 3-master Redis Cluster speaking TLS only (clients and
# the cluster bus), with a throwaway CA made by openssl here.
#
#  - verify full: every node's certificate names 127.0.0.1, the address the
#    cluster announces; keys spread over the masters and a slot moved to
#    another master is followed (MOVED) over TLS;
#  - a certificate from another CA is refused (08001, OpenSSL's reason) and
#    the call's policy applies;
#  - plain text to the TLS nodes is a connection failure.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

my $d = PostgreSQL::Test::Utils::tempdir('cluster_tls');
SlidewinTest::make_ca($d);
SlidewinTest::make_ca($d, 'other');
my ($crt, $key) = SlidewinTest::make_leaf($d, 'node', 'DNS:localhost,IP:127.0.0.1', 2);
my $cluster = SlidewinTest::start_cluster(masters => 3, replicas => 0,
	tls => { cert => $crt, key => $key, ca => "$d/ca.crt" });
my $url = $cluster->{url};
like($url, qr{^rediss-cluster://}, 'a TLS cluster URL');

my $node = SlidewinTest::new_node('cluster_tls', undef,
	[ "slidewin.redis_url = '$url'", "slidewin.redis_tls_ca_file = '$d/ca.crt'",
	  'slidewin.redis_tls_verify = full', 'slidewin.redis_retry_interval = 0' ]);

sub run_sql { return SlidewinTest::node_sql($node, @_) }
sub masters { return SlidewinTest::cluster_masters($cluster) }

my ($out, $err) = run_sql(q{
SELECT count(*) FILTER (WHERE (r).allowed AND (r).store = 'redis') FROM generate_series(1, 60) g, rl_attempt('t:' || g, 5, '1 hour', 1, 'error') r;
});
is($out, '60', 'verify full: 60 keys answered by Redis over TLS') or diag($err);
my @counts = map { scalar $_->cli('dbsize') } masters();
ok(@counts == 3 && !grep({ $_ == 0 } @counts), "keys on every master (@counts)");

# A slot moved while a session holds the map: MOVED over TLS.
my ($src) = grep { scalar($_->cli('dbsize')) > 0 } masters();
my ($dst) = grep { $_->port != $src->port } masters();
my ($k1) = grep { /log:/ } split /\n/, scalar $src->cli('keys', '*log:*');
my ($ukey) = $k1 =~ /log:(.*)$/;
my $slot = scalar $src->cli('cluster', 'keyslot', $k1);
my @keys = split /\n/, scalar $src->cli('cluster', 'getkeysinslot', $slot, 1000);
my $cli = "$SlidewinTest::cli_bin --tls --cacert $d/ca.crt -h 127.0.0.1";
my ($sid, $did) = map { scalar $_->cli('cluster', 'myid') } ($src, $dst);
my $moves = join '', map { "\\! $cli $_ >/dev/null\n" } (
	"-p @{[ $dst->port ]} cluster setslot $slot importing $sid",
	"-p @{[ $src->port ]} cluster setslot $slot migrating $did",
	"-p @{[ $src->port ]} migrate 127.0.0.1 @{[ $dst->port ]} '' 0 5000 keys @keys",
	map { "-p @{[ $_->port ]} cluster setslot $slot node $did" } ($dst, masters()));
($out, $err) = run_sql(qq{SELECT (r).allowed FROM rl_attempt('t:x', 5, '1 hour', 1, 'error') r;
$moves
SELECT (r).allowed, (r).remaining, (r).store FROM rl_attempt('$ukey', 5, '1 hour', 1, 'error') r;
});
is($out, "t\nt|3|redis", "a slot moved: MOVED followed over TLS, the key kept its count") or diag($err);

# Another CA: refused with OpenSSL's reason, and the policy applies.
($out, $err) = run_sql(qq{SET slidewin.redis_tls_ca_file = '$d/other.crt';
SELECT * FROM rl_attempt('t:1', 5, '1 hour', 1, 'error');});
like($err, qr/ERROR:\s+08001: .*certificate verify failed/s, 'an unknown CA: 08001 with the reason');
($out, $err) = run_sql(qq{SET slidewin.redis_tls_ca_file = '$d/other.crt';
SELECT (r).store FROM rl_attempt('t:1', 5, '1 hour', 1, 'fallback') r;});
is($out, 'fallback', 'and a fallback call site gets the fallback');

# Plain text to the TLS nodes.
(my $plain = $url) =~ s{^rediss-}{redis-};
($out, $err) = run_sql(qq{SET slidewin.redis_url = '$plain';
SELECT * FROM rl_attempt('t:1', 5, '1 hour', 1, 'error');});
like($err, qr/ERROR:\s+080\d\d: slidewin could not reach Redis/, 'plain text to the TLS cluster: a connection failure (class 08)');

unlike(slurp_file($node->logfile), qr/PANIC|terminated by signal/, 'no crash');
done_testing();
