# Carrying one key's fallback admissions back into Redis, by many backends
# at once (carry.c, "Carriers of one key take turns"):
#  1. a carry whose transaction stays open has sent every row: the next
#     call of the key sends none of them again, though their deletion is
#     not committed yet;
#  2. but a fallback admission committed since that carry began is carried
#     by the next call, before Redis decides it;
#  3. 20 clients whose first calls after an outage all carry one key of
#     20,000 rows send them about once between them, not once each, and
#     Redis's log ends up holding every admission exactly once.
# What is counted is scripts Redis ran (INFO commandstats), not time.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Socket;
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
# A port that stays dead: bound here and never listened on, so that no other
# server can take it meanwhile (as in TAP 112).
socket(my $dead_sock, PF_INET, SOCK_STREAM, getprotobyname('tcp')) or die "socket: $!";
bind($dead_sock, pack_sockaddr_in(0, inet_aton('127.0.0.1'))) or die "bind: $!";
my ($dead) = unpack_sockaddr_in(getsockname($dead_sock));
my $node = SlidewinTest::new_node('turns', $redis,
	[ "shared_preload_libraries = 'slidewin'", 'max_connections = 40',
	  'slidewin.redis_retry_interval = 0',
	  # one carry script takes 64 rows of a log of thousands: well within
	  # this, on a slow machine too, so that no carry fails over
	  "slidewin.command_timeout = '2s'" ]);

sub sql { return $node->safe_psql('postgres', $_[0]) }

# fill($key, $n): $n fallback admissions of $key, Redis unreachable for the
# session that makes them.
sub fill
{
	my ($key, $n) = @_;
	return sql(qq{SET slidewin.redis_url = 'redis://127.0.0.1:$dead';
		SELECT count(*) FILTER (WHERE rl_allow('$key', 1000000, '1 hour')) FROM generate_series(1, $n)});
}

sub redis_log_size
{
	my ($key) = @_;
	return scalar $redis->cli('ZCARD', "slidewin:log:$key");
}

sub rows_waiting
{
	my ($key) = @_;
	return sql("SELECT count(*) FROM rl_fallback_carry WHERE key = 'slidewin:$key'");
}

# The stored key's form, checked once: the tests below count its rows.
my $n1 = 3000;
is(fill('turn:a', $n1), $n1, "$n1 fallback admissions of one key");
is(rows_waiting('turn:a'), $n1, 'each waits to be carried back');

# --- 1. the next call sends nothing the open carry sent -------------------
my $a = $node->background_psql('postgres', on_error_stop => 0);
my $s0 = $redis->scripts_run;
$a->query_safe('BEGIN');
is($a->query_safe(q{SELECT rl_allow('turn:a', 1000000, '1 hour')}), 't',
	'(1) the first call after the outage, its transaction left open');
my $s1 = $redis->scripts_run;
cmp_ok($s1 - $s0, '>=', int($n1 / 64),
	'(1) it carried the rows, in scripts of at most 64 (' . ($s1 - $s0) . ' scripts)');
is(redis_log_size('turn:a'), $n1 + 1, '(1) Redis holds them all and the call');
is(sql(q{SELECT rl_allow('turn:a', 1000000, '1 hour')}), 't', '(1) another call of the key');
my $s2 = $redis->scripts_run;
is($s2 - $s1, 1, '(1) it ran one script, its own: none of the rows was sent again');
is(redis_log_size('turn:a'), $n1 + 2, '(1) and Redis counted it');

# --- 2. a fallback admission committed since is carried -------------------
is(fill('turn:a', 1), 1, '(2) one more fallback admission of the key, committed');
is(sql(q{SELECT rl_allow('turn:a', 1000000, '1 hour')}), 't', '(2) the next call');
is(redis_log_size('turn:a'), $n1 + 4,
	'(2) carried that admission before Redis decided: the log holds it and the call');
is($a->query_safe('COMMIT'), '', '(1) the open transaction commits');
$a->quit;
is(rows_waiting('turn:a'), 0, 'no row waits any more');

# --- 3. 20 clients at once ----------------------------------------------------
my $n2 = 20000;
is(fill('turn:b', $n2), $n2, "(3) $n2 fallback admissions of another key");
$s0 = $redis->scripts_run;
$node->pgbench(
	'-n -c 20 -j 2 -t 5',
	0,
	[qr{processed: 100/100}],
	[qr{^$}],
	'(3) 20 clients x 5 calls of the key once Redis answers',
	{ '058_burst' => q{SELECT rl_allow('turn:b', 1000000, '1 hour');} });
my $scripts = $redis->scripts_run - $s0;
# Once: about n2 / 64 scripts of rows and 100 calls. Each client sending
# the rows itself, 20 times that.
my $once = int(($n2 + 63) / 64) + 100;
cmp_ok($scripts, '<=', 2 * $once,
	"(3) the rows were sent about once between the clients: $scripts scripts (once: $once)");
is(redis_log_size('turn:b'), $n2 + 100, '(3) Redis holds every admission once, and every call');
is(rows_waiting('turn:b'), 0, '(3) no row waits any more');

$node->stop;
done_testing();
