# Crashes and restores.
#
#  - kill -9 of a backend in the middle of fallback work (Redis unreachable
#    for it; a transaction holding fallback rows and key locks, inside a
#    long loop of fallback calls) makes the postmaster restart every
#    backend.  After that, both stores answer: Redis still holds its counts,
#    and the fallback store (unlogged) counts from empty.  slidewin's shared
#    memory starts afresh: the known denials are gone, a refund that was in
#    flight at the crash no longer keeps its key out of the deny cache, and
#    the generation numbers work (a reset voids a cached denial).  Each of
#    these is first observed in its pre-crash state, so that a state that
#    survived the crash would show.
#  - pg_dump (custom format) and pg_restore of a database with the extension
#    and quota triggers (row and statement level, one with options) give a
#    database in which the triggers fire and charge the same Redis keys, and
#    the fallback store exists and works.  Restoring the rows charges
#    nothing.
#
# The deliberate kill -9 makes the postmaster log "terminated by signal 9";
# the test declares that one line (SlidewinTest::allow_log_line) so that the
# harness's scan of the server logs accepts it and nothing else.
use strict;
use warnings;

use File::Basename qw(dirname);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
# Denials name their key (slidewin.error_show_key), so that the checks after
# the restore see which quota refused a row.
my $node = SlidewinTest::new_node('crash', $redis,
	[ "shared_preload_libraries = 'slidewin'", 'restart_after_crash = on',
	  'slidewin.error_show_key = on' ]);

# A port where nothing listens: Redis is unreachable for a session that
# sets it.
my $nowhere = 'redis://127.0.0.1:' . PostgreSQL::Test::Cluster::get_free_port();

sub sql { return $node->safe_psql($_[1] // 'postgres', $_[0]) }

# Output of $sql in a new session, and the scripts Redis ran for it.
sub counted
{
	my ($sql) = @_;
	my $before = $redis->scripts_run;
	my $out = sql($sql);
	return ($out, $redis->scripts_run - $before);
}

# Five calls that Redis denies (the key is full at lim 2), in one session.
my $five_denials = q{
	SELECT count(*) FILTER (WHERE NOT allowed) FROM (
	  SELECT (rl_attempt('cr:rf', 2, '1 hour')).allowed FROM generate_series(1, 5) OFFSET 0) s};

# =====================================================================
# Before the crash
# =====================================================================

# Redis counts: 3 of lim 3.
is(sql(q{SELECT count(*) FILTER (WHERE allowed) FROM generate_series(1, 4) g,
          LATERAL rl_attempt('cr:r', 3, '1 hour', 1 + 0 * g) r}),
	'3', 'Redis admits 3 of 4 on lim 3');

# A known denial: Redis denied cr:kd, so a session that cannot reach Redis
# is denied too.
sql(q{SELECT rl_attempt('cr:kd', 2, '1 hour') FROM generate_series(1, 3)});
is(sql(qq{SET slidewin.redis_url = '$nowhere';
          SELECT allowed, store FROM rl_attempt('cr:kd', 2, '1 hour')}),
	'f|fallback', 'before the crash: Redis unreachable, the known denial holds');

# A refund in flight: R rolls back a refundable admission and stays idle, so
# the reply is never read and the key stays out of every deny cache. (Since
# 1.5 ROLLBACK waits slidewin.refund_confirm_timeout for the reply; 0 leaves
# it unread, as a Redis slower than that would.)
my $r = $node->background_psql('postgres', on_error_stop => 0);
$r->query_safe('SET slidewin.refund_confirm_timeout = 0');
$r->query_safe('BEGIN');
$r->query_safe(q{SELECT rl_attempt('cr:rf', 2, '1 hour', refund_on_abort => true)});
$r->query_safe('ROLLBACK');
is(sql(q{SELECT count(*) FILTER (WHERE allowed) FROM generate_series(1, 3) g,
          LATERAL rl_attempt('cr:rf', 2, '1 hour', 1 + 0 * g) r}),
	'2', "the refund reached Redis: 2 of lim 2 admitted");
my ($out, $trips) = counted($five_denials);
is($out, '5', 'cr:rf is full');
is($trips, 5, 'before the crash: with a refund in flight, each of 5 denials asks Redis');

# V: Redis unreachable; 5 committed fallback admissions, then a transaction
# that holds 2 more and the key's lock, and loops over fallback calls on
# 200 other keys until it is killed.
my $v = $node->background_psql('postgres', on_error_stop => 0);
$v->query_safe(qq{SET slidewin.redis_url = '$nowhere'});
is($v->query_safe(q{SELECT count(*) FILTER (WHERE store = 'fallback') FROM generate_series(1, 5) g,
                   LATERAL rl_attempt('cr:fb', 10, '1 hour', 1 + 0 * g) r}),
	'5', 'V: 5 fallback admissions committed');
my $vpid = $v->query_safe('SELECT pg_backend_pid()');
$v->query_safe('BEGIN');
is($v->query_safe(q{SELECT remaining, store FROM rl_attempt('cr:fb', 10, '1 hour', 2)}),
	'3|fallback', 'V: 2 more in an open transaction');
$v->query_until(qr/looping/, q{\echo looping
DO $$
BEGIN
  FOR g IN 1 .. 100000000 LOOP
    PERFORM rl_allow('cr:loop:' || (g % 200), 1000000, '1 hour');
  END LOOP;
END $$;
});
ok($node->poll_query_until('postgres', qq{
	SELECT count(*) >= 100 FROM pg_locks WHERE pid = $vpid AND locktype = 'advisory'}),
	'V holds key locks of its loop');
is(sql(q{SELECT count(*) FROM rl_fallback_log WHERE key = 'slidewin:cr:fb'}), '5',
	'the fallback log holds the 5 committed rows');

# =====================================================================
# The crash
# =====================================================================
SlidewinTest::allow_log_line($node,
	"(PID $vpid) was terminated by signal 9: Killed");
my $log_offset = -s $node->logfile;
note("kill -9 of backend $vpid");
kill 'KILL', $vpid;
$node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset);
$node->wait_for_log(qr/database system is ready to accept connections/, $log_offset);
eval { $v->quit };
eval { $r->quit };

my $log = slurp_file($node->logfile, $log_offset);
# "server process" up to PostgreSQL 17, the backend's type ("client backend") from 18
like($log, qr/(?:server process|client backend) \(PID $vpid\) was terminated by signal 9: Killed/,
	'the postmaster saw the kill');
unlike($log, qr/PANIC/, 'no PANIC');
my $after_crash = -s $node->logfile;

# =====================================================================
# After the crash
# =====================================================================
is(sql(q{SELECT count(*) FROM rl_fallback_log}), '0',
	'the fallback log is empty after crash recovery (unlogged)');
is(sql(qq{SET slidewin.redis_url = '$nowhere'; SET lock_timeout = '2s';
          SELECT remaining, store FROM rl_attempt('cr:fb', 10, '1 hour')}),
	'9|fallback', "the fallback store works and counts from empty, without waiting for V's lock");
is(sql(qq{SET slidewin.redis_url = '$nowhere';
          SELECT allowed, remaining, store FROM rl_attempt('cr:kd', 2, '1 hour')}),
	't|1|fallback', 'the known denial did not survive: the fallback store decides alone');

is(sql(q{SELECT allowed, remaining, store FROM rl_peek('cr:r', 3, '1 hour')}),
	'f|0|redis', 'Redis still holds its counts');
is($redis->cli('zcard', 'slidewin:log:cr:r'), '3', 'and no more than it admitted');
is(sql(q{SELECT allowed, remaining, store FROM rl_attempt('cr:new', 5, '1 hour')}),
	't|4|redis', 'Redis admits a new key');

# (1.8) The fallback admissions made since the crash are carried into
# Redis by the next calls, one other key after each: then none waits, and
# no call pays a round trip for them.
sql(q{SELECT rl_attempt('cr:drain', 5, '1 hour')}) for 1 .. 2;
is(sql(q{SELECT outage_carry_pending FROM rl_stats}), '0',
	'the fallback admissions since the crash have been carried into Redis');
is($redis->cli('zcard', 'slidewin:log:cr:fb'), '1', 'cr:fb: the one made since the crash, not the 5 the crash lost');

($out, $trips) = counted($five_denials);
is($out, '5', 'cr:rf is still full');
is($trips, 1, 'after the crash: 5 denials, one round trip (no refund in flight any more)');

# The generation numbers: a cached denial, a reset in another backend, and
# the next call asks Redis.
my $x = $node->background_psql('postgres');
my $before = $redis->scripts_run;
is($x->query_safe(q{SELECT string_agg((rl_attempt('cr:gen', 2, '1 hour')).allowed::text, ',')
                   FROM generate_series(1, 5)}),
	'true,true,false,false,false', 'X: 2 of lim 2, then denied');
is($redis->scripts_run - $before, 3, 'X: 2 admissions and one denial from Redis, 2 from its cache');
sql(q{SELECT rl_reset('cr:gen')});
is($x->query_safe(q{SELECT allowed, remaining FROM rl_attempt('cr:gen', 2, '1 hour')}),
	't|1', "a reset in another backend ends X's cached denial");

# Refunds work again.
$x->query_safe('BEGIN');
$x->query_safe(q{SELECT rl_attempt('cr:gen', 2, '1 hour', refund_on_abort => true)});
$x->query_safe('ROLLBACK');
is($x->query_safe(q{SELECT refunded, refunds_dropped FROM rl_backend_stats()}), '1|0',
	'a refund after the crash is given back');
is($x->query_safe(q{SELECT remaining FROM rl_peek('cr:gen', 2, '1 hour')}), '1',
	'and Redis has it');
$x->quit;

# =====================================================================
# pg_dump / pg_restore
# =====================================================================
sql('CREATE DATABASE src');
sql(q{
	CREATE EXTENSION slidewin;
	CREATE TABLE jobs (id int GENERATED ALWAYS AS IDENTITY, tenant text NOT NULL);
	CREATE TRIGGER jobs_quota BEFORE INSERT ON jobs
	    FOR EACH ROW EXECUTE FUNCTION rl_trigger('tenant', '5', '1 hour', '1', 'refund_on_abort');
	CREATE TABLE events (tenant int NOT NULL, n int NOT NULL CHECK (n > 0));
	CREATE TRIGGER events_quota AFTER INSERT ON events
	    REFERENCING NEW TABLE AS new_rows
	    FOR EACH STATEMENT EXECUTE FUNCTION rl_trigger('tenant', '100', '1 hour', 'n');
	INSERT INTO jobs (tenant) VALUES ('acme'), ('acme');
	INSERT INTO events VALUES (7, 10), (7, 20);
}, 'src');
my $peeks = q{
	SELECT (rl_peek('public.jobs:acme', 5, '1 hour')).remaining || ' '
	    || (rl_peek('public.events:7', 100, '1 hour')).remaining};
is(sql($peeks, 'src'), '3 70', 'src: the triggers charged 2 jobs and 30 events');

my $dump = PostgreSQL::Test::Utils::tempdir('dump') . '/src.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('src') ],
	'pg_dump -Fc of src');
sql('CREATE DATABASE dst');
$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', $node->connstr('dst'), $dump ],
	'pg_restore into dst');

is(sql(q{SELECT e.extversion = (SELECT default_version FROM pg_available_extensions
                                 WHERE name = 'slidewin')
         FROM pg_extension e WHERE e.extname = 'slidewin'}, 'dst'),
	't', 'dst: the extension exists, at the installed version');
is(sql(q{SELECT string_agg(tgname, ',' ORDER BY tgname) FROM pg_trigger WHERE NOT tgisinternal}, 'dst'),
	'events_quota,jobs_quota', 'dst: both triggers exist');
is(sql(q{SELECT (SELECT count(*) FROM jobs) || ' ' || (SELECT sum(n) FROM events)}, 'dst'),
	'2 30', 'dst: the rows were restored');
is(sql($peeks, 'dst'), '3 70', 'restoring the rows charged nothing');

# The triggers fire in dst, on the same keys as in src.
is(sql(q{INSERT INTO jobs (tenant) VALUES ('acme'), ('acme'), ('acme');
         SELECT (rl_peek('public.jobs:acme', 5, '1 hour')).remaining}, 'dst'),
	'0', 'dst: the row trigger charges public.jobs:acme, where src left 3');
my ($ret, $o, $err) = $node->psql('dst', q{INSERT INTO jobs (tenant) VALUES ('acme')});
like($err, qr/rate limit exceeded for key "public.jobs:acme"/, 'dst: a sixth job is refused');
($ret, $o, $err) = $node->psql('src', q{INSERT INTO jobs (tenant) VALUES ('acme')});
like($err, qr/rate limit exceeded for key "public.jobs:acme"/, 'src shares that quota');
is(sql(q{INSERT INTO events VALUES (7, 50), (7, 20);
         SELECT (rl_peek('public.events:7', 100, '1 hour')).remaining}, 'dst'),
	'0', 'dst: the statement trigger charges public.events:7, where src left 70');
($ret, $o, $err) = $node->psql('dst', q{INSERT INTO events VALUES (7, 1)});
like($err, qr/rate limit exceeded for key "public.events:7"/, 'dst: one more event is refused');

# The trigger's option survived: a rolled-back insert gives its unit back.
is(sql(q{INSERT INTO jobs (tenant) VALUES ('beta');
         BEGIN; INSERT INTO jobs (tenant) VALUES ('beta'); ROLLBACK;
         SELECT (rl_peek('public.jobs:beta', 5, '1 hour')).remaining}, 'dst'),
	'4', "dst: the trigger's refund_on_abort option survived");

# The fallback store of dst.
is(sql(qq{SET slidewin.redis_url = '$nowhere';
          INSERT INTO jobs (tenant) VALUES ('gamma'), ('gamma');
          SELECT string_agg(key || ':' || cost, ',' ORDER BY ts) FROM rl_fallback_log;
          SELECT remaining, store FROM rl_attempt('dst:k', 3, '1 hour')}, 'dst'),
	"slidewin:public.jobs:gamma:1,slidewin:public.jobs:gamma:1\n2|fallback",
	'dst: the fallback store takes the trigger and rl_attempt');
is(sql(qq{SET slidewin.redis_url = '$nowhere';
          SELECT string_agg(r.allowed::text, ',') FROM generate_series(1, 3) g,
                 LATERAL rl_attempt('dst:k', 3, '1 hour', 1 + 0 * g) r}, 'dst'),
	'true,true,false', 'dst: and counts exactly');

unlike(slurp_file($node->logfile, $after_crash), qr/PANIC|terminated by signal/,
	'no crash after the deliberate one');
$node->stop;
done_testing();
