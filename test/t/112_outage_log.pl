# An outage in the server log, once per server (outage_log.c):
#  - 20 backends meeting a dead Redis log ONE warning between them, naming
#    the target (host:port) and the cause, never the URL's password;
#  - with slidewin.outage_log_interval = 1s it is repeated while the outage
#    lasts, but at most once per second;
#  - when Redis answers again, ONE line says how long it lasted and what
#    answered the calls meanwhile (fallback store, allow, deny, error);
#  - rl_stats.redis_unreachable_since is set during the outage, NULL after.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use Time::Local qw(timegm);
use Socket;
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
# A port that stays dead: bound here and never listened on, so that
# connections are refused and no other test's server can take it meanwhile.
socket(my $dead_sock, PF_INET, SOCK_STREAM, getprotobyname('tcp')) or die "socket: $!";
bind($dead_sock, pack_sockaddr_in(0, inet_aton('127.0.0.1'))) or die "bind: $!";
my ($dead) = unpack_sockaddr_in(getsockname($dead_sock));
my $secret = 'Pw4outageXyz';
my $node = SlidewinTest::new_node('outlog', undef,
	[ "shared_preload_libraries = 'slidewin'", 'max_connections = 40',
	  "slidewin.redis_url = 'redis://app:$secret\@127.0.0.1:$dead'",
	  'slidewin.redis_retry_interval = 0', "slidewin.outage_log_interval = '10min'",
	  # When Redis answers again, each of the 20 clients' first call carries
	  # the fallback store's ~7,000 admissions of the key into it (carry.c),
	  # all at once on one Redis: here a script of that carry waited up to
	  # 115 ms for its turn, and in CI one took over the default 100 ms, so
	  # its call failed over and a real, second outage of 2 ms was logged.
	  # This file is about the log, not that wait: a dead port refuses at
	  # once, so the longer timeout costs the outage part nothing.
	  "slidewin.command_timeout = '2s'",
	  "log_timezone = 'UTC'" ]);

sub sql { return $node->safe_psql('postgres', $_[0]) }

sub log_since
{
	my ($offset) = @_;
	my $all = slurp_file($node->logfile);
	return substr($all, $offset);
}

is(sql('SELECT redis_unreachable_since IS NULL FROM rl_stats'), 't',
	'before any call, Redis is not known to be unreachable');

# --- one warning for 20 backends ------------------------------------------
my $start = -s $node->logfile;
$node->pgbench(
	'-n -c 20 -j 2 -t 20',
	0,
	[qr{processed: 400/400}],
	[qr{^$}],
	'20 clients x 20 calls against a dead port',
	{ '112_dead' => q{SELECT rl_allow('ol:k', 1000000, '1 hour');} });
my $log = log_since($start);
my @first = ($log =~ /WARNING:  slidewin cannot reach Redis at ([^\n]*)/g);
is(scalar(@first), 1, 'one warning for the whole server, not one per backend')
  or diag(join("\n", @first));
like($first[0] // '', qr/^127\.0\.0\.1:$dead: \S.*/,
	'it names the target (host:port) and the cause');
unlike(slurp_file($node->logfile), qr/\Q$secret\E|app:/,
	'the URL\'s user and password are not logged');
unlike($log, qr/still cannot reach/, 'not repeated within the interval');
like(sql('SELECT redis_unreachable_since FROM rl_stats'), qr/^\d{4}-/,
	'rl_stats says since when Redis has been unreachable');
is(sql(q{SELECT redis_unreachable_since <= now() AND redis_unreachable_since > now() - '1 min'::interval FROM rl_stats}),
	't', 'since the outage began');

# The failure policy's answers, counted in the line at the end.
sql(q{SELECT rl_allow('ol:a' || n, 5, '1 hour', on_redis_error => 'allow') FROM generate_series(1, 3) n});
sql(q{SELECT rl_allow('ol:d' || n, 5, '1 hour', on_redis_error => 'deny') FROM generate_series(1, 2) n});
my ($rc) = $node->psql('postgres', q{SELECT rl_allow('ol:e', 5, '1 hour', on_redis_error => 'error')});
isnt($rc, 0, 'the error policy raises');

# --- repeated at most once per interval -------------------------------------
$start = -s $node->logfile;
sql(q{ALTER SYSTEM SET slidewin.outage_log_interval = '1s'});
$node->reload;
my $t0 = Time::HiRes::time();
$node->pgbench(
	'-n -c 4 -j 2 -T 4',
	0,
	[qr{processed: \d+}],
	[qr{^$}],
	'4 clients keep calling for 4 s',
	{ '112_repeat' => q{SELECT rl_allow('ol:k', 1000000, '1 hour');} });
my $elapsed = Time::HiRes::time() - $t0;
$log = log_since($start);
my @stamps;
while ($log =~ /^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{3}) UTC \[\d+\] \S* ?WARNING:  slidewin still cannot reach Redis at 127\.0\.0\.1:$dead: /mg)
{
	push @stamps, timegm($6, $5, $4, $3, $2 - 1, $1) + $7 / 1000;
}
cmp_ok(scalar(@stamps), '>=', 2, 'the warning is repeated while the outage lasts');
cmp_ok(scalar(@stamps), '<=', int($elapsed) + 1, 'at most once per second');
my $closest = 1e9;
for my $i (1 .. $#stamps)
{
	my $gap = $stamps[$i] - $stamps[$i - 1];
	$closest = $gap if $gap < $closest;
}
# A line's time is when it was written, a little after the backend claimed
# the repeat (the compare-and-swap in outage_log.c): on a loaded machine a
# backend can be descheduled in between, so two lines can be closer than
# the interval by that delay. Two backends that both repeated the same
# interval would write within milliseconds of each other.
cmp_ok($closest, '>=', 0.5, 'no two repeats within one interval') if @stamps > 1;
like($log, qr/DETAIL:  Unreachable since \d{4}-[^;]*; \d+ calls have failed over since then\./,
	'a repeat says since when, and how many calls failed over');

# --- one line when Redis answers again --------------------------------------
my $fallback_calls = sql('SELECT fallback_calls FROM rl_stats');
sql(q{ALTER SYSTEM SET slidewin.outage_log_interval = '10min'});
sql("ALTER SYSTEM SET slidewin.redis_url = 'redis://127.0.0.1:" . $redis->port . "'");
$node->reload;
# A backend forked before the postmaster has read the file would still call
# the dead port: wait until a new connection sees the new URL.
SlidewinTest::wait_for('the reload',
	sub { sql('SHOW slidewin.redis_url') eq 'redis://127.0.0.1:' . $redis->port });
$start = -s $node->logfile;
$node->pgbench(
	'-n -c 20 -j 2 -t 10',
	0,
	[qr{processed: 200/200}],
	[qr{^$}],
	'20 clients x 10 calls once Redis answers',
	{ '112_live' => q{SELECT rl_allow('ol:k', 1000000, '1 hour');} });
$log = log_since($start);
my @back = ($log =~ /LOG:  slidewin reaches Redis at ([^\n]*)/g);
is(scalar(@back), 1, 'one line when Redis answers again, for the whole server')
  or diag(join("\n", @back));
like($back[0] // '', qr/^127\.0\.0\.1:\d+ again after \d+\.\d{3} s unreachable$/,
	'it says how long Redis was unreachable');
my ($counted) = ($log =~ /DETAIL:  Since \d{4}-[^:]*:[^:]*:[^:]*: (\d+) calls answered by the fallback store, 3 allowed and 2 denied by the failure policy, 1 raised an error, 0 denied by a denial Redis gave earlier\./);
ok(defined $counted, 'it says what answered the calls meanwhile: 3 allowed, 2 denied, 1 error')
  or diag($log =~ /(DETAIL:  Since[^\n]*)/);
# rl_stats counts a call once it is answered; the line counts every call
# that failed over (TODO: find the few calls the two disagree on).
cmp_ok($counted // 0, '>=', $fallback_calls,
	"and every fallback call rl_stats counted ($fallback_calls)");
is(sql('SELECT redis_unreachable_since IS NULL FROM rl_stats'), 't',
	'rl_stats: reachable again');
ok($log !~ /cannot reach Redis/, 'no warning once Redis answers')
  or diag(join("\n", $log =~ /^(.*(?:WARNING|DETAIL):  .*)$/mg));

$node->stop;
done_testing();
