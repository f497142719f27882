# rl_headers(rows, names [, pks]) (1.12), the header fields of a call over
# several keys, read by an independent parser: each RateLimit and
# RateLimit-Policy field of real admissions and denials of rl_attempt_all
# is parsed as RFC 9651 Lists by test/node/ratelimit_fields.js (npm's
# structured-headers, a devDependency of examples/express, installed by
# `npm ci` from its lockfile, as TAP 130 does), and must hold:
#  - one member per key, in the order given, each under its own name, with
#    the key's lim as q, its window as w, and as r what rl_attempt_all_rows
#    said of the key (after an admission, rl_peek says the same);
#  - on a denial, Retry-After the longest wait of the keys, every t no
#    later than it, and the keys that had room left uncharged;
#  - partition keys (pk) as byte sequences, on the policies given one.
# The regression test headers checks the same function's exact output and
# its refusals; this checks that a client can read what it emits.
use strict;
use warnings;

use IPC::Run;
use JSON::PP;
use POSIX qw(ceil);
use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;
use SlidewinExample;

for my $tool (qw(node npm))
{
	ok(scalar(grep { -x "$_/$tool" } split /:/, $ENV{PATH}), "$tool is installed")
	  or BAIL_OUT("$tool is missing: run make deps");
}

# npm ci runs while the servers start
my $dir = SlidewinExample::copy_example('express');
SlidewinExample::install_node_modules($dir);

my $redis = SlidewinTest::start_redis();
my $node  = SlidewinTest::new_node('hdrall', $redis);

my @names = ('per-ip', 'per-route', 'plan');
my @keys  = ('ip:203.0.113.7', 'route:/search:key:42', 'plan:key:42');
my @lims  = (5, 2, 100);
# Windows of minutes, not seconds: the calls run on the test clock, but
# Redis expires a key in real time, after its window; a route window of 10 s
# once ran out between the calls of a run on a loaded machine (the route had
# 2 units again where it had 0).
my @wins  = (3600, 600, 86400);
my $arrays = sprintf(q{ARRAY['%s'], ARRAY[%s], ARRAY[%s]::interval[]},
	join(q{', '}, @keys), join(', ', @lims), join(', ', map { "'$_ seconds'" } @wins));

# call($now, $costs, $pks): one rl_attempt_all_rows at test time $now; its
# rows (key, allowed, remaining, retry_after in seconds) and rl_headers of
# them, in one statement
sub call
{
	my ($now, $costs, $pks) = @_;
	my $extra = defined $pks ? ", $pks" : '';
	my $json = $node->safe_psql('postgres', qq{
		SET slidewin.test_now = '$now';
		SELECT json_build_object(
		         'rows', json_agg(json_build_object('key', a.key, 'allowed', a.allowed,
		                   'remaining', a.remaining,
		                   'retry', extract(epoch FROM a.retry_after)) ORDER BY a.ordinality),
		         'headers', rl_headers(array_agg(a ORDER BY a.ordinality),
		                               ARRAY['@{[ join(q{', '}, @names) ]}']$extra))
		  FROM rl_attempt_all_rows($arrays, ARRAY[$costs]) WITH ORDINALITY AS a;
	});
	return decode_json($json);
}

sub peek
{
	my ($now) = @_;
	return [ map {
		$node->safe_psql('postgres', qq{SET slidewin.test_now = '$now';
			SELECT (rl_peek('$keys[$_]', $lims[$_], '$wins[$_] seconds')).remaining})
	} 0 .. $#keys ];
}

my @calls;
# admitted, twice: the route then has no room left
push @calls, call('2031-03-01 14:00:00+00', '1, 1, 1');
push @calls, call('2031-03-01 14:00:03+00', '1, 1, 1');
is_deeply(peek('2031-03-01 14:00:03+00'), [ map { $_->{remaining} } @{ $calls[-1]{rows} } ],
	'after an admission, each key has the units left that its RateLimit member will say');
# denied by the route alone, with partition keys on two policies
push @calls, call('2031-03-01 14:00:04+00', '1, 1, 1', q{ARRAY[NULL, '\x0102', '\xff']::bytea[]});
# denied by the route and the plan (99 of 100 a day asked): the plan's wait
push @calls, call('2031-03-01 14:00:05+00', '1, 1, 99');
is_deeply(peek('2031-03-01 14:00:05+00'), [ 3, 0, 98 ],
	'the denials charged no key: the address and the plan kept their units');
# admitted again once the route's first unit has left
push @calls, call('2031-03-01 14:10:00+00', '1, 1, 1');

SlidewinExample::node_modules_installed();
my @in = map { { 'ratelimit' => $_->{headers}{RateLimit},
		'ratelimit-policy' => $_->{headers}{'RateLimit-Policy'} } } @calls;
my ($out, $err) = ('', '');
IPC::Run::run([ 'node', SlidewinTest::src_dir() . '/test/node/ratelimit_fields.js',
		"$dir/node_modules" ], '<', \encode_json(\@in), '>', \$out, '2>', \$err,
	IPC::Run::timeout(60));
is($? >> 8, 0, 'every RateLimit and RateLimit-Policy field of ' . scalar(@calls)
	  . ' calls parses as an SFV List of draft -11') or diag($err);
my $parsed = decode_json($out);

for my $i (0 .. $#calls)
{
	my ($c, $p) = ($calls[$i], $parsed->[$i]);
	my $what    = "call " . ($i + 1);
	my $allowed = !grep { !$_->{allowed} } @{ $c->{rows} };
	is_deeply([ map { [ $_->{name}, $_->{q}, $_->{w} ] } @{ $p->{policy} } ],
		[ map { [ $names[$_], $lims[$_], $wins[$_] ] } 0 .. $#names ],
		"$what: RateLimit-Policy lists every key's policy, in order, with its q and w");
	is_deeply([ map { [ $_->{name}, $_->{r} ] } @{ $p->{ratelimit} } ],
		[ map { [ $names[$_], $c->{rows}[$_]{remaining} ] } 0 .. $#names ],
		"$what: RateLimit gives each key's r, as rl_attempt_all_rows said it");
	unlike(encode_json($c->{headers}), qr/\Q$_\E/, "$what: no header names the key $_")
	  for @keys;
	if ($allowed)
	{
		ok(!exists $c->{headers}{'Retry-After'}, "$what: admitted, no Retry-After");
		next;
	}
	my $longest = 0;
	$longest = $_->{retry} > $longest ? $_->{retry} : $longest for @{ $c->{rows} };
	is($c->{headers}{'Retry-After'}, ceil($longest),
		"$what: denied, Retry-After is the longest wait of the keys ($longest s)");
	ok(!grep({ $_->{t} > $c->{headers}{'Retry-After'} } @{ $p->{ratelimit} }),
		"$what: no t is later than Retry-After");
}
is_deeply([ map { $_->{pk} } @{ $parsed->[2]{policy} } ], [ undef, 'AQI=', '/w==' ],
	'partition keys are byte sequences, on the policies given one');
is($calls[3]{headers}{'Retry-After'}, 86395,
	'two keys deny: Retry-After is the plan\'s wait, not the route\'s (the first to deny)');

done_testing();
