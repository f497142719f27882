# With Redis down, each value of on_redis_error does what it says whichever
# way it reaches the call: the per-call argument, ALTER ROLE ... SET, or the
# SET clause of a SECURITY DEFINER wrapper owned by a superuser.  In each
# case a lower-priority source holds a different value, so a source that was
# ignored shows up as the wrong outcome.  An ordinary role gets the fallback
# store without any privilege on its table, and may not choose the policy for
# its session until it is granted SET on the parameter.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use SlidewinTest;

my $redis = SlidewinTest::start_redis();
my $node  = SlidewinTest::new_node('policy_sources', $redis);
$redis->stop;
ok(!$redis->alive, 'Redis is down for the whole script');

$node->safe_psql('postgres', q{
	CREATE ROLE u LOGIN;
	CREATE FUNCTION api_check(k text) RETURNS rl_result
		SECURITY DEFINER LANGUAGE sql
		AS $$ SELECT rl_attempt(k, 3, '1 minute') $$;
	REVOKE ALL ON FUNCTION api_check(text) FROM PUBLIC;
	GRANT EXECUTE ON FUNCTION api_check(text) TO u;
});
is($node->safe_psql('postgres',
		q{SELECT r.rolsuper FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner
		  WHERE p.proname = 'api_check'}),
	't', 'the wrapper is owned by a superuser');

# Runs $sql in a new session as $user; errors do not stop the script and
# carry their SQLSTATE.  Returns (stdout, stderr).
sub session_as
{
	my ($user, $sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql",
		extra_params => [ '-U', $user ], on_error_stop => 0);
	return ($out, $err);
}

sub sqlstate
{
	my ($err) = @_;
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : 'none';
}

sub superuser_sql { return $node->safe_psql('postgres', $_[0]) }

my ($out, $err);

($out, $err) = session_as('postgres',
	q{SELECT rl_attempt('probe', 3, '1 minute', 1, 'error')});
is(sqlstate($err), '08001', 'Redis down: connection refused is SQLSTATE 08001');

# A value different from $v for the lower-priority source.
my %other = (fallback => 'error', allow => 'deny', deny => 'allow', error => 'fallback');

# check_policy($label, $v, $expr): $expr->($key) is an rl_result expression
# evaluated as role u, whose policy should come out as $v.
sub check_policy
{
	my ($label, $v, $expr) = @_;
	my $key = "src:$label:$v";
	my $row = sub {
		my $e = $expr->($key);
		return qq{SELECT (r).allowed || '/' || (r).store || '/' || coalesce((r).remaining::text, 'null')
		                 || '/' || coalesce((r).reset_at::text, 'null')
		          FROM $e r;\n};
	};

	if ($v eq 'fallback')
	{
		# Four calls in one session; lim is 3.
		($out, $err) = session_as('u', $row->() x 4);
		my @r = split /\n/, $out;
		is(scalar(@r), 4, "$label, fallback: four answers") or diag($err);
		like($r[$_], qr{^true/fallback/\Q${\(2 - $_)}\E/\d{4}-}, "$label, fallback: call " . ($_ + 1) . ' admitted by the fallback store')
		  for 0 .. 2;
		like($r[3] // '', qr{^false/fallback/0/}, "$label, fallback: 4th call denied by the fallback store");
		is($err, '', "$label, fallback: no error");
		is(superuser_sql(qq{SELECT count(*) FROM rl_fallback_log WHERE key = 'slidewin:$key'}),
			'3', "$label, fallback: the three admissions are rows of rl_fallback_log");
	}
	elsif ($v eq 'allow' || $v eq 'deny')
	{
		my $a = $v eq 'allow' ? 'true' : 'false';
		($out, $err) = session_as('u', $row->() x 2);
		is($out, "$a/none/null/null\n$a/none/null/null",
			"$label, $v: allowed $a, store none, no remaining, no reset_at");
		is($err, '', "$label, $v: no error");
	}
	else
	{
		($out, $err) = session_as('u', $row->());
		like(sqlstate($err), qr/^0800[16]$/, "$label, error: SQLSTATE 08001/08006");
		like($err, qr/slidewin could not reach Redis/, "$label, error: message");
		is($out, '', "$label, error: no row");
	}
	return;
}

foreach my $v (qw(fallback allow deny error))
{
	# (1) The per-call argument beats the role's setting.
	superuser_sql("ALTER ROLE u SET slidewin.on_redis_error = '$other{$v}'");
	check_policy('argument', $v,
		sub { "rl_attempt('$_[0]', 3, '1 minute', 1, '$v')" });

	# (2) ALTER ROLE beats the database's setting.
	superuser_sql(qq{
		ALTER DATABASE postgres SET slidewin.on_redis_error = '$other{$v}';
		ALTER ROLE u SET slidewin.on_redis_error = '$v';
	});
	($out) = session_as('u', 'SHOW slidewin.on_redis_error');
	is($out, $v, "role: a session of u starts with on_redis_error = $v");
	check_policy('role', $v, sub { "rl_attempt('$_[0]', 3, '1 minute')" });
	superuser_sql('ALTER DATABASE postgres RESET slidewin.on_redis_error');

	# (3) The SET clause of the SECURITY DEFINER wrapper beats the caller's
	# role setting.
	superuser_sql(qq{
		ALTER ROLE u SET slidewin.on_redis_error = '$other{$v}';
		ALTER FUNCTION api_check(text) SET slidewin.on_redis_error = '$v';
	});
	check_policy('definer', $v, sub { "api_check('$_[0]')" });
}
superuser_sql(q{
	ALTER ROLE u RESET slidewin.on_redis_error;
	ALTER FUNCTION api_check(text) RESET slidewin.on_redis_error;
});

# The ordinary role has no privilege on the fallback tables, which hold keys.
foreach my $t (qw(rl_fallback_log rl_fallback_mlog rl_fallback_state rl_fallback_head))
{
	($out, $err) = session_as('u', "SELECT count(*) FROM $t");
	is(sqlstate($err), '42501', "u cannot read $t");
	like($err, qr/permission denied for table $t/, "permission denied for table $t");
	is(superuser_sql(qq{SELECT has_table_privilege('u', '$t', 'SELECT,INSERT,UPDATE,DELETE')}),
		'f', "u holds no privilege on $t");
}

# u may not pick the policy of its session: neither once the library is
# loaded, nor by setting a placeholder before it is.
my $plain = q{SELECT (r).allowed || '/' || (r).store FROM rl_attempt('src:set:' || pg_backend_pid(), 1, '1 minute') r;};
($out, $err) = session_as('u', qq{
	SELECT rl_allow('src:load', 100, '1 minute');
	SET slidewin.on_redis_error = allow;
	$plain
	$plain
});
is(sqlstate($err), '42501', 'u: SET slidewin.on_redis_error fails');
like($err, qr/permission denied to set parameter "slidewin.on_redis_error"/, 'u: permission denied to set the parameter');
is($out, "t\ntrue/fallback\nfalse/fallback", 'u: the default policy (fallback) still rules');

($out, $err) = session_as('u', qq{
	SET slidewin.on_redis_error = allow;
	$plain
	$plain
	SHOW slidewin.on_redis_error;
});
is((split /\n/, $out)[1] // '', 'false/fallback',
	'u: a value set before the library loads is not applied (2nd call of lim 1 denied)');
is((split /\n/, $out)[2] // '', 'fallback', 'u: SHOW reports the default after the library loads');

# Once granted SET on the parameter, u may choose.
superuser_sql('GRANT SET ON PARAMETER slidewin.on_redis_error TO u');
($out, $err) = session_as('u', qq{
	SELECT rl_allow('src:load', 100, '1 minute');
	SET slidewin.on_redis_error = allow;
	$plain
	$plain
	SET slidewin.on_redis_error = deny;
	$plain
});
is($err, '', 'after GRANT SET ON PARAMETER, u may SET slidewin.on_redis_error');
is($out, "t\ntrue/none\ntrue/none\nfalse/none", 'u: its own allow and deny are obeyed');

($out, $err) = session_as('u', qq{
	SET slidewin.on_redis_error = error;
	$plain
});
like(sqlstate($err), qr/^0800[16]$/, 'u: a value granted and set before the library loads is applied (error)');

done_testing();
