# slidewin behind PgBouncer in transaction mode (Debian's pgbouncer, from
# PATH or /usr/sbin): 50 clients share 4 server connections.
#  - counting is exact: 50 clients x 20 calls on one key with lim 100 admit
#    exactly 100, over at most 4 backends, and Redis sees at most 4
#    connections (one per server connection, not per client);
#  - a rolled-back row quota with refund_on_abort gives every unit back;
#  - SET LOCAL stays inside its transaction: four clients, one on each server
#    connection, turn slidewin.enforce off and slidewin.error_style to
#    postgrest with SET LOCAL and commit, and none of 500 later calls of other
#    clients is admitted past its limit or spelled in the wrong style;
#  - a SET without LOCAL leaks: one client's enforce = off and another's
#    error_style = postgrest reach some of 500 later calls of other clients
#    (the number is noted and quoted in doc/poolers.md), always those that
#    landed on that client's server connection;
#  - named prepared statements (pgbench -M prepared): before PgBouncer 1.21
#    they fail in transaction mode; from 1.21 on, with
#    max_prepared_statements, they work and count exactly.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

my $pgbouncer_bin = (grep { -x } map { "$_/pgbouncer" } split(/:/, $ENV{PATH}), '/usr/sbin')[0];
# Missing, the test fails rather than skips: make deps installs it.
die 'pgbouncer not found in PATH or /usr/sbin (make deps installs it)'
  unless defined $pgbouncer_bin;
my ($pgb_version) = `$pgbouncer_bin --version` =~ /PgBouncer (\d+\.\d+)/;
die "cannot read pgbouncer's version from $pgbouncer_bin --version" unless defined $pgb_version;
my ($pgb_major, $pgb_minor) = split /\./, $pgb_version;
my $pgb_has_prepared = $pgb_major > 1 || ($pgb_major == 1 && $pgb_minor >= 21);
note("PgBouncer $pgb_version at $pgbouncer_bin");

my $redis = SlidewinTest::start_redis();
my $node = SlidewinTest::new_node('pgbouncer', $redis,
	[ "shared_preload_libraries = 'slidewin'", 'max_connections = 20' ]);
my $user = $node->safe_psql('postgres', 'SELECT current_user');

# --- PgBouncer: transaction mode, 4 server connections ------------------------
my $dir = PostgreSQL::Test::Utils::tempdir('pgbouncer');
my $pport = SlidewinTest::free_port();
open my $ul, '>', "$dir/userlist.txt" or die $!;
print $ul qq{"$user" ""\n};
close $ul;
open my $ini, '>', "$dir/pgbouncer.ini" or die $!;
print $ini join("\n",
	'[databases]',
	'postgres = host=' . $node->host . ' port=' . $node->port . ' dbname=postgres',
	'[pgbouncer]',
	'listen_addr = 127.0.0.1',
	"listen_port = $pport",
	'unix_socket_dir =',
	'auth_type = trust',
	"auth_file = $dir/userlist.txt",
	'pool_mode = transaction',
	'default_pool_size = 4',
	'min_pool_size = 0',
	'reserve_pool_size = 0',
	'max_client_conn = 100',
	# idle server connections are handed out in turn, so that the pool's
	# four are all used once they are open (LIFO reuse served 1,000 quick
	# calls on one of them in sid's CI)
	'server_round_robin = 1',
	'ignore_startup_parameters = extra_float_digits',
	'log_connections = 0',
	'log_disconnections = 0',
	"logfile = $dir/pgbouncer.log",
	"pidfile = $dir/pgbouncer.pid",
	($pgb_has_prepared ? ('max_prepared_statements = 100') : ()),
	'');
close $ini;

# Output to files: a pipe nobody reads would fill and stop PgBouncer.
my $pgb = IPC::Run::start([ $pgbouncer_bin, "$dir/pgbouncer.ini" ],
	'<', \undef, '>', "$dir/pgbouncer.out", '2>', "$dir/pgbouncer.err");
END
{
	my $code = $?;
	$pgb->kill_kill if $pgb && $pgb->pumpable;
	$? = $code;
}

# psql through the pooler; dies on error; trimmed stdout.
sub pq
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'psql', '-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1',
			'-h', '127.0.0.1', '-p', $pport, '-U', $user, '-d', 'postgres', '-c', $sql ],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "psql through pgbouncer failed: $sql\n$err";
	$out =~ s/\s+\z//;
	return $out;
}

# A psql session through the pooler that stays open; feed it with ->send.
sub pq_session
{
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start([ 'psql', '-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1',
			'-h', '127.0.0.1', '-p', $pport, '-U', $user, '-d', 'postgres' ],
		'<', \$in, '>', \$out, '2>', \$err);
	return { h => $h, in => \$in, out => \$out, err => \$err };
}

sub send_sql
{
	my ($s, $sql) = @_;
	${ $s->{in} } .= "$sql\n";
	$s->{h}->pump_nb;
	return;
}

sub close_session
{
	my ($s) = @_;
	${ $s->{in} } .= "\\q\n";
	$s->{h}->finish;
	(my $out = ${ $s->{out} }) =~ s/\s+\z//;
	return $out;
}

# pgbench through the pooler, simple query protocol unless told; returns
# (transactions processed, exit status, output).
my $script_n = 0;
sub pgbench_pooled
{
	my ($opts, $script) = @_;
	my $file = "$dir/script" . $script_n++ . '.sql';
	open my $fh, '>', $file or die $!;
	print $fh $script;
	close $fh;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'pgbench', '-n', @$opts, '-h', '127.0.0.1', '-p', $pport, '-U', $user,
			'-f', $file, 'postgres' ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
	my $status = $? >> 8;
	my ($done) = $out =~ /number of transactions actually processed: (\d+)/;
	return ($done // 0, $status, "$out$err");
}

# Backends that PgBouncer opened (every session but this one's).
sub pooled_backends
{
	my ($where) = @_;
	return $node->safe_psql('postgres', qq{SELECT count(*) FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() $where});
}

# Four sessions, each in a transaction at once, so that each holds one of the
# pool's four server connections: $sql runs in each, then all commit. Returns
# each session's output.
sub on_every_connection
{
	my ($sql) = @_;
	my @s = map { pq_session() } 1 .. 4;
	send_sql($_, "BEGIN; $sql") for @s;
	SlidewinTest::wait_for('four transactions open through the pooler',
		sub { $_->{h}->pump_nb for @s; pooled_backends(q{AND state = 'idle in transaction'}) == 4 });
	send_sql($_, 'COMMIT;') for @s;
	return map { close_session($_) } @s;
}

SlidewinTest::wait_for('pgbouncer to accept connections', sub {
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'psql', '-X', '-A', '-t', '-h', '127.0.0.1', '-p', $pport, '-U', $user,
			'-d', 'postgres', '-c', 'SELECT 1' ], '<', \undef, '>', \$out, '2>', \$err);
	die "pgbouncer exited:\n" . slurp_file("$dir/pgbouncer.err") unless $pgb->pumpable;
	return $out =~ /^1$/m;
}, 20);

$node->safe_psql('postgres', q{
	CREATE TABLE calls (run text, pid int, allowed boolean, style text);
	CREATE TABLE items (id int, tenant text);
	CREATE TRIGGER quota BEFORE INSERT ON items FOR EACH ROW
	  EXECUTE FUNCTION rl_trigger('tenant', '10', '1 hour', '1', 'refund_on_abort');
	-- how a denial of rl_enforce is spelled: RL429 or PGRST (admitted: not denied)
	CREATE FUNCTION denial_style(k text) RETURNS text LANGUAGE plpgsql AS $$
	BEGIN
	  PERFORM rl_enforce(k, 1, '1 hour');
	  RETURN 'admitted';
	EXCEPTION WHEN OTHERS THEN
	  RETURN SQLSTATE;
	END $$;});

# --- exact counts: 50 clients, 4 server connections -------------------------
# The pool's four server connections are opened first (PgBouncer opens them
# only as clients wait, which quick calls may never make it do).
on_every_connection('SELECT 1;');
my ($done, $status, $out) = pgbench_pooled([ '-M', 'simple', '-c', '50', '-j', '2', '-t', '20' ],
	q{INSERT INTO calls SELECT 'count', pg_backend_pid(), rl_allow('pgb:hot', 100, '1 hour');});
is("$done $status", '1000 0', '50 clients x 20 calls through the pooler, none failed')
  or diag($out);
my ($n, $admitted, $pids) = split /\|/, $node->safe_psql('postgres',
	q{SELECT count(*), count(*) FILTER (WHERE allowed), count(DISTINCT pid) FROM calls WHERE run = 'count'});
is("$n $admitted", '1000 100', 'exactly lim (100) of 1000 calls admitted');
is($redis->cli('zcard', 'slidewin:log:pgb:hot'), '100', 'one Redis entry per admitted call');
cmp_ok($pids, '<=', 4, "the 50 clients ran on $pids backends (pool_size 4)");
cmp_ok($pids, '>=', 2, 'and on more than one (the pool was shared)');
my $redis_clients = grep { !/cmd=client\|list/ && /\S/ } split /\n/, $redis->cli('client', 'list');
note("Redis connections after 50 pooled clients: $redis_clients");
cmp_ok($redis_clients, '<=', 4, "Redis holds $redis_clients connections: at most one per server connection");
cmp_ok($redis_clients, '>=', 1, 'and at least one');

# --- concurrency slots: 50 clients, max 3 -----------------------------------
# A slot lives as long as its transaction, which transaction pooling keeps on
# one server connection: exact through the pooler. Spans are recorded after
# each transaction.
$node->safe_psql('postgres', 'CREATE TABLE spans (t1 float8, t2 float8)');
($done, $status, $out) = pgbench_pooled([ '-M', 'simple', '-c', '50', '-j', '2', '-t', '10' ], q{
	\set ms random(5, 20)
	BEGIN;
	SELECT acquired::int AS ok FROM rl_acquire('pgb:slots', 3, '1 minute', '5 seconds') \gset
	SELECT extract(epoch FROM clock_timestamp()) AS t1 \gset
	\sleep :ms ms
	SELECT extract(epoch FROM clock_timestamp()) AS t2 \gset
	COMMIT;
	INSERT INTO spans SELECT :t1, :t2 WHERE :ok = 1;});
is("$done $status", '500 0', 'slots: 50 clients x 10 transactions through the pooler') or diag($out);
my @spans = grep { $_ ne '' } split /\n/, $node->safe_psql('postgres', 'SELECT t1, t2 FROM spans');
note(scalar(@spans) . ' holdings through the pooler, deepest overlap ' . SlidewinTest::max_overlap(@spans));
cmp_ok(scalar(@spans), '>=', 450, 'nearly every transaction got a slot within 5 s');
is(SlidewinTest::max_overlap(@spans), 3, 'never more than 3 holders at once through the pooler (and 3 reached)');
is($node->safe_psql('postgres', q{SELECT rl_holders('pgb:slots')}), '0', 'every slot released');

# --- refunds of a rolled-back trigger quota ---------------------------------
my $refunds0 = $node->safe_psql('postgres', 'SELECT refunds FROM rl_stats');
($done, $status, $out) = pgbench_pooled([ '-M', 'simple', '-c', '50', '-j', '2', '-t', '10' ], q{
	BEGIN;
	INSERT INTO items VALUES (:client_id, 'r');
	ROLLBACK;});
# lim 10 with 500 inserts: without refunds the eleventh would be denied
is("$done $status", '500 0', 'refunds: 500 rolled-back inserts on a quota of 10, none denied')
  or diag($out);
# Each backend confirms its last refunds at its next call: make one on each
# of the four, which also reads each backend's own counter.
my @refunded = on_every_connection('SELECT refunded FROM rl_backend_stats();');
my $sum = 0;
$sum += $_ for @refunded;
note('refunds confirmed per pooled backend: ' . join(', ', @refunded));
is($sum, 500, 'refunds: the four backends\' own counters add up to 500 (rl_backend_stats is per backend)');
cmp_ok((sort { $b <=> $a } @refunded)[0], '<', 500, 'refunds: no one backend saw them all');
is(pq(q{SELECT remaining FROM rl_peek('public.items:r', 10, '1 hour')}), '10',
	'refunds: every unit is back');
is($node->safe_psql('postgres', 'SELECT refunds FROM rl_stats') - $refunds0, 500,
	'refunds: rl_stats counts 500 refunds (summed over the pooled backends)');
is($node->safe_psql('postgres', 'SELECT refunds_dropped FROM rl_stats'), '0',
	'refunds: none dropped');

# --- named prepared statements ----------------------------------------------
# (No colon in the key: pgbench would read ':prep' as a variable.)
($done, $status, $out) = pgbench_pooled([ '-M', 'prepared', '-c', '50', '-j', '2', '-t', '10' ],
	q{SELECT rl_allow('pgb-prep', 1000000, '1 hour');});
if ($pgb_has_prepared)
{
	is("$done $status", '500 0',
		"prepared: PgBouncer $pgb_version with max_prepared_statements runs 500 prepared calls")
	  or diag($out);
	is($redis->cli('zcard', 'slidewin:log:pgb-prep'), '500', 'prepared: each counted once');
}
else
{
	my ($why) = $out =~ /(ERROR:[^\n]*)/;
	note("pgbench -M prepared through PgBouncer $pgb_version: $done of 500 processed, exit $status: "
		  . ($why // 'no error shown'));
	# Whether they collide depends on which client lands on which server
	# connection first (one CI run saw 0 of 500 run, another 500): what
	# holds either way is that every call that ran was counted once.
	is($redis->cli('zcard', 'slidewin:log:pgb-prep'), $done,
		"prepared: before 1.21, each of the $done of 500 calls that ran was counted once");
}

# Exhausted keys, for the leak checks: a call on them is admitted only with
# enforce = off, and rl_enforce's denial shows its style.
pq(q{SELECT rl_attempt('leak:full', 1, '1 hour'), rl_attempt('leak:style', 1, '1 hour')});
sub observe
{
	my ($run) = @_;
	return qq{INSERT INTO calls SELECT '$run', pg_backend_pid(),
		(rl_attempt('leak:full', 1, '1 hour')).allowed, denial_style('leak:style');};
}

# --- SET LOCAL stays in its transaction -------------------------------------
my @inside = on_every_connection(
	q{SET LOCAL slidewin.enforce = off; SET LOCAL slidewin.error_style = postgrest;
	  SELECT 'in:' || (rl_attempt('leak:full', 1, '1 hour')).allowed
	    || ':' || current_setting('slidewin.error_style');});
is(join(',', @inside), join(',', ('in:true:postgrest') x 4),
	'SET LOCAL: inside each of the four transactions, enforce is off and the style postgrest');
($done, $status, $out) = pgbench_pooled(
	[ '-M', 'simple', '-c', '50', '-j', '2', '-t', '10' ], observe('local'));
is("$done $status", '500 0', 'SET LOCAL: 500 calls of 50 other clients') or diag($out);
my ($leak_enforce, $leak_style) = split /\|/, $node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE allowed), count(*) FILTER (WHERE style <> 'RL429')
	  FROM calls WHERE run = 'local'});
is($leak_enforce, '0', 'SET LOCAL: no later call of another client is admitted past its limit');
is($leak_style, '0', 'SET LOCAL: every later rl_enforce on an exhausted key is denied, spelled RL429');

# --- a SET without LOCAL leaks ----------------------------------------------
# One client turns enforce off, another sets the PostgREST style, each with a
# plain SET in a transaction it commits; the two hold different server
# connections (both transactions are open at once).
my $a = pq_session();
my $b = pq_session();
send_sql($a, 'BEGIN; SET slidewin.enforce = off;');
send_sql($b, 'BEGIN; SET slidewin.error_style = postgrest;');
SlidewinTest::wait_for('two transactions open through the pooler',
	sub { $_->{h}->pump_nb for $a, $b; pooled_backends(q{AND state = 'idle in transaction'}) == 2 });
send_sql($_, 'COMMIT;') for $a, $b;
close_session($_) for $a, $b;
($done, $status, $out) = pgbench_pooled(
	[ '-M', 'simple', '-c', '50', '-j', '2', '-t', '10' ], observe('bare'));
is("$done $status", '500 0', 'bare SET: 500 calls of 50 other clients') or diag($out);
my ($bare_enforce, $bare_enforce_pids, $bare_style, $bare_style_pids, $bare_pids) =
  split /\|/, $node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE allowed), count(DISTINCT pid) FILTER (WHERE allowed),
	       count(*) FILTER (WHERE style = 'PGRST'), count(DISTINCT pid) FILTER (WHERE style = 'PGRST'),
	       count(DISTINCT pid)
	  FROM calls WHERE run = 'bare'});
diag("measured leak of a plain SET through PgBouncer $pgb_version (transaction mode, pool_size 4): "
	  . "enforce = off reached $bare_enforce of 500 other clients' calls, "
	  . "error_style = postgrest $bare_style of 500 ($bare_pids backends served them)");
cmp_ok($bare_enforce, '>', 0, "bare SET: enforce = off admitted $bare_enforce of 500 other clients' calls");
is($bare_enforce_pids, '1', 'bare SET: all of them on the one server connection that ran the SET');
cmp_ok($bare_style, '>', 0, "bare SET: $bare_style of 500 other clients' denials came back as PGRST");
is($bare_style_pids, '1', 'bare SET: all of them on the other client\'s server connection');

# --- stop ---------------------------------------------------------------------
$pgb->signal('TERM');
$pgb->finish;
$pgb = undef;
unlike(slurp_file("$dir/pgbouncer.log"), qr/FATAL|PANIC/, 'pgbouncer logged no FATAL');

done_testing();
