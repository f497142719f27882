# Prometheus through Debian's prometheus-postgres-exporter: the real
# exporter, started with the shipped examples/postgres_exporter.yaml against
# a node, serves every rl_stats column as slidewin_<column> and every rule's
# counters as slidewin_rule_<column>{algorithm, lim, win}, with the values
# rl_stats and rl_stats_rules give. Scraped with curl, as Prometheus would.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

my $exporter = '/usr/bin/prometheus-postgres-exporter';
# make test installs it (test/deps.sh): its absence is a failure, not a skip
ok(-x $exporter, 'prometheus-postgres-exporter is installed')
  or BAIL_OUT('prometheus-postgres-exporter is missing: run make deps');

my $redis = SlidewinTest::start_redis();
my $node = SlidewinTest::new_node('exporter', $redis,
	"shared_preload_libraries = 'slidewin'");
sub sql { return $node->safe_psql('postgres', $_[0]) }

# A known mix: 50 calls on lim 20, some shadow-mode calls, another rule.
sql('SELECT rl_stats_reset()');
sql(q{SELECT rl_attempt('ex:a', 20, '1 minute') FROM generate_series(1, 50)});
sql(q{SET slidewin.enforce = off; SELECT rl_attempt('ex:s', 2, '1 hour') FROM generate_series(1, 5)});
sql(q{SELECT rl_attempt('ex:f', 7, '10 seconds', algorithm => 'fixed_window') FROM generate_series(1, 9)});

my $port = SlidewinTest::free_port();
my $queries = SlidewinTest::src_dir() . '/examples/postgres_exporter.yaml';
my $log = PostgreSQL::Test::Utils::tempdir('exporter') . '/exporter.log';
local $ENV{DATA_SOURCE_NAME} = sprintf('host=%s port=%d user=%s dbname=postgres sslmode=disable',
	$node->host, $node->port, scalar getpwuid($<));
my $h = IPC::Run::start([ $exporter, "--extend.query-path=$queries",
		"--web.listen-address=127.0.0.1:$port" ],
	'<', \undef, '>', $log, '2>&1');

sub scrape
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'curl', '-sS', '--max-time', '10', "http://127.0.0.1:$port/metrics" ],
		'>', \$out, '2>', \$err);
	return $out;
}

my $metrics = '';
eval {
	SlidewinTest::wait_for('the exporter to serve slidewin metrics',
		sub { $metrics = scrape(); $metrics =~ /^slidewin_calls[{ ]/m }, 30);
};
if ($@)
{
	diag("exporter log:\n" . slurp_file($log));
	fail('the exporter serves slidewin metrics');
}

# Parse "name{labels} value" lines (the exporter adds a server label).
my %plain;
my @labelled;
for my $line (split /\n/, $metrics)
{
	next if $line =~ /^#/;
	if ($line =~ /^(slidewin_\w+)\{(.*)\}\s+(\S+)$/)
	{
		my ($name, $labels, $value) = ($1, $2, $3);
		my %l = $labels =~ /(\w+)="([^"]*)"/g;
		push @labelled, [ $name, \%l, $value ];
		$plain{$name} = $value unless $name =~ /^slidewin_rule_/;
	}
	elsif ($line =~ /^(slidewin_\w+)\s+(\S+)$/)
	{
		$plain{$1} = $2;
	}
}

# Every rl_stats column, against the view read now (nothing runs meanwhile).
my @cols = qw(calls admitted denied units_admitted deny_cache_hits shadow_denials
  redis_calls fallback_calls policy_answers redis_errors redis_timeouts
  reconnects breaker_trips refunds refunds_dropped);
my @want = split /\|/, sql('SELECT ' . join(', ', @cols)
	  . ', extract(epoch FROM redis_rtt_p50), extract(epoch FROM redis_rtt_p99), extract(epoch FROM stats_reset) FROM rl_stats');
push @cols, qw(redis_rtt_p50 redis_rtt_p99 stats_reset);
is(scalar @want, scalar @cols, 'rl_stats read');
for my $i (0 .. $#cols)
{
	my $name = "slidewin_$cols[$i]";
	ok(defined $plain{$name}, "$name is exported")
	  and cmp_ok(abs($plain{$name} - $want[$i]), '<=', 1e-6 * (1 + abs($want[$i])),
		"$name = $want[$i]");
}
is($plain{slidewin_calls}, 64, 'slidewin_calls is the 64 calls made');
is($plain{slidewin_denied}, 32, 'slidewin_denied: 30 + 2');
is($plain{slidewin_shadow_denials}, 3, 'slidewin_shadow_denials: 3');

# Per rule, labelled.
my %rule;
for my $m (@labelled)
{
	my ($name, $l, $v) = @$m;
	next unless $name =~ /^slidewin_rule_(\w+)$/;
	$rule{"$l->{algorithm}/$l->{lim}/$l->{win}"}{$1} = $v;
}
for my $row (split /\n/, sql(q{SELECT algorithm, lim, trim_scale(extract(epoch FROM win))::text,
		calls, admitted, denied, units_admitted, near_limit, shadow_denials FROM rl_stats_rules}))
{
	my ($alg, $lim, $win, @v) = split /\|/, $row;
	my $got = $rule{"$alg/$lim/$win"};
	ok($got, "rule $alg/$lim/$win is exported with its labels") or next;
	is(join(' ', map { $got->{$_} } qw(calls admitted denied units_admitted near_limit shadow_denials)),
		join(' ', @v), "rule $alg/$lim/$win: the view's counts");
}
is($rule{'sliding_log/20/60'}{denied}, 30, 'slidewin_rule_denied{sliding_log,20,60} = 30');
is($rule{'fixed_window/7/10'}{calls}, 9, 'slidewin_rule_calls{fixed_window,7,10} = 9');

$h->kill_kill;
done_testing();
