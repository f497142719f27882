#!/usr/bin/env bash
# test/package_smoke.sh --install-into-system: the Debian package, as a DBA
# meets it. make test-matrix runs it in each chroot after the suite (or alone,
# with SLIDEWIN_MATRIX_ONLY_PACKAGE=1).
#
# It changes the system it runs on, which is why it wants that flag: it
# installs the package into the system's PostgreSQL, creates a cluster with
# pg_createcluster and removes the package and the cluster again at the end.
# Run it in a throwaway chroot or container, as root; never on the host of
# `make test`, whose PostgreSQL the suite leaves alone.
#
# Steps, for each postgresql-NN-slidewin that `make deb` builds (one per
# installed postgresql-server-dev-NN; one in each matrix chroot):
#   build        make deb (test/build_deb.sh) succeeds and yields the package
#   depends      its Depends name postgresql-NN and libhiredis
#   install      apt-get installs it; slidewin.so lands in NN's library directory
#   create       in a new cluster (pg_createcluster, a free port of
#                SLIDEWIN_PORT_RANGE) configured as doc/installing.md says,
#                CREATE EXTENSION slidewin gives slidewin.control's default_version
#   redis        three rl_attempt calls with a limit of 2 are answered by a
#                throwaway redis-server on loopback: allowed, allowed, denied,
#                store "redis", and the key is in that Redis
#   fallback     the same against a port where nothing listens: answered by
#                the fallback store
#   installcheck `make installcheck` (the regression suite, PGXS's way) passes
#                against that cluster, as doc/testing.md describes it
#   key prefix   after installcheck, every key the suite wrote to Redis lies
#                under "regress:" (and there is at least one)
#   remove       apt-get purge removes the package and its files
#
# Each step counts as one test; a step that cannot run because an earlier
# one failed counts as failed. The last line is `N passed, M failed`.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

if [[ ${1:-} != --install-into-system ]]; then
	echo "usage: $0 --install-into-system   (see the header: it changes this system's PostgreSQL)" >&2
	exit 2
fi
if ((EUID != 0)); then
	echo "package_smoke: needs root (apt-get, pg_createcluster)" >&2
	echo "0 passed, 1 failed"
	exit 1
fi

# shellcheck source-path=SCRIPTDIR
. "$here/lib.sh"

cluster=slidewin_smoke
passed=0
failed=0
failures=()
pass() {
	passed=$((passed + 1))
	echo "ok: $1"
}
fail() {
	failed=$((failed + 1))
	failures+=("$1")
	echo "FAILED: $1"
}

work=$(mktemp -d "${TMPDIR:-/tmp}/slidewin-pkg.XXXXXX") || {
	echo "package_smoke: mktemp failed" >&2
	echo "0 passed, 1 failed"
	exit 1
}
chmod 755 "$work"
current_major=

# shellcheck disable=SC2317
finish() {
	trap - EXIT INT TERM
	if [[ -n $current_major ]]; then
		pg_dropcluster --stop "$current_major" "$cluster" >/dev/null 2>&1
	fi
	stop_redis "$work/redis" >/dev/null 2>&1
	rm -rf "$work"
	if ((${#failures[@]} > 0)); then
		echo
		echo "failed:"
		printf '  %s\n' "${failures[@]}"
	fi
	if ((passed + failed == 0)); then
		failed=1
	fi
	echo "$passed passed, $failed failed"
	((failed == 0))
	exit
}
trap finish EXIT
trap 'fail "interrupted"; exit 130' INT TERM

want_version=$(sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" "$repo/slidewin.control")
if [[ -z $want_version ]]; then
	fail "setup: no default_version in slidewin.control"
	exit 1
fi

# ---- build ----------------------------------------------------------------------
echo "== make deb"
if timeout -k 15 900 bash "$here/build_deb.sh" "$work/deb" >"$work/build.log" 2>&1 </dev/null; then
	tail -n 3 "$work/build.log"
else
	tail -n 60 "$work/build.log"
fi
shopt -s nullglob
debs=("$work"/deb/postgresql-*-slidewin_*.deb)
shopt -u nullglob
if ((${#debs[@]} == 0)); then
	fail "build: make deb built no postgresql-NN-slidewin package"
	exit 1
fi
pass "build: ${debs[*]##*/}"

# psql_at PORT SQL: one psql run as the superuser over TCP, unaligned, tuples only.
psql_at() {
	"/usr/lib/postgresql/$current_major/bin/psql" -X -q -At -v ON_ERROR_STOP=1 \
		-h 127.0.0.1 -p "$1" -U postgres -d postgres -c "$2"
}

# three_calls PORT KEY [SQL]: three rl_attempt calls on smoke:KEY with a
# limit of 2, one psql session each (after SQL, a SET), printed as
# "allowed/remaining/store" three times: "t/1/S t/0/S f/0/S" when they count.
three_calls() {
	local out=() r
	for _ in 1 2 3; do
		r=$(psql_at "$1" "${3:-}
			SELECT format('%s/%s/%s', allowed, remaining, store) FROM rl_attempt('smoke:$2', 2, '1 minute')" 2>&1)
		out+=("$r")
	done
	echo "${out[*]}"
}

# The steps after the build need the one before them; not_run NAME... counts
# the steps a failure leaves out.
not_run() {
	local s
	for s in "$@"; do fail "$s (not run: an earlier step failed)"; done
}

# ---- each package -----------------------------------------------------------------
for deb in "${debs[@]}"; do
	name=$(dpkg-deb -f "$deb" Package)
	v=${name#postgresql-}
	v=${v%-slidewin}
	echo
	echo "== $name ($(dpkg-deb -f "$deb" Version))"
	later=("$v: install" "$v: create" "$v: redis" "$v: fallback" "$v: installcheck" "$v: key prefix" "$v: remove")

	deps=$(dpkg-deb -f "$deb" Depends)
	echo "Depends: $deps"
	if grep -Eq "(^|, )postgresql-$v( |,|$)" <<<"$deps" && grep -Eq '(^|, )libhiredis' <<<"$deps"; then
		pass "$v: depends"
	else
		fail "$v: depends (want postgresql-$v and libhiredis)"
	fi

	# install, over whatever an earlier run or `make install` left; the
	# library must then belong to the package (dpkg -S, read whole: a
	# `dpkg -L | grep -q` fails under pipefail when grep leaves early)
	apt-get purge -y -q "$name" >/dev/null 2>&1
	pg_dropcluster --stop "$v" "$cluster" >/dev/null 2>&1
	if DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$deb" \
		>"$work/install.log" 2>&1 && owner=$(dpkg -S "/usr/lib/postgresql/$v/lib/slidewin.so" 2>/dev/null) &&
		[[ $owner == "$name: "* ]]; then
		pass "$v: install"
	else
		tail -n 30 "$work/install.log"
		fail "$v: install"
		not_run "${later[@]:1}"
		continue
	fi

	# a Redis, and a cluster configured as doc/installing.md says
	stop_redis "$work/redis" >/dev/null 2>&1
	rport=$(free_port) && start_redis "$rport" "$work/redis" || rport=
	pport=$(free_port) || pport=
	current_major=$v
	if [[ -n $rport && -n $pport ]] &&
		pg_createcluster "$v" "$cluster" -p "$pport" -- --auth=trust >"$work/createcluster.log" 2>&1; then
		cat >"/etc/postgresql/$v/$cluster/conf.d/slidewin.conf" <<-EOF
			# test/package_smoke.sh
			listen_addresses = '127.0.0.1'
			shared_preload_libraries = 'slidewin'
			slidewin.redis_url = 'redis://127.0.0.1:$rport'
			max_prepared_transactions = 10
		EOF
	else
		pport=
		cat "$work/createcluster.log" 2>/dev/null
	fi
	if [[ -n $pport ]] && pg_ctlcluster "$v" "$cluster" start >"$work/start.log" 2>&1 &&
		psql_at "$pport" 'CREATE EXTENSION slidewin' &&
		got=$(psql_at "$pport" "SELECT extversion FROM pg_extension WHERE extname = 'slidewin'") &&
		[[ $got == "$want_version" ]]; then
		pass "$v: create (version $got)"
	else
		cat "$work/start.log" 2>/dev/null
		fail "$v: create (version ${got:-none}, want $want_version)"
		not_run "${later[@]:2:4}"
		current_major=
		pg_dropcluster --stop "$v" "$cluster" >/dev/null 2>&1
		apt-get purge -y -q "$name" >/dev/null 2>&1
		continue
	fi

	got=$(three_calls "$pport" redis)
	keys=$("$SLIDEWIN_REDIS_CLI" -h 127.0.0.1 -p "$rport" --scan --pattern '*smoke:redis*' 2>/dev/null | wc -l)
	echo "redis: $got; keys in Redis: $keys"
	if [[ $got == "t/1/redis t/0/redis f/0/redis" ]] && ((keys > 0)); then
		pass "$v: redis"
	else
		fail "$v: redis (got '$got' and $keys keys; want 't/1/redis t/0/redis f/0/redis' and a key)"
	fi

	dead=$(free_port)
	got=$(three_calls "$pport" fallback "SET slidewin.redis_url = 'redis://127.0.0.1:$dead';")
	echo "fallback (Redis URL at port $dead, where nothing listens): $got"
	if [[ $got == "t/1/fallback t/0/fallback f/0/fallback" ]]; then
		pass "$v: fallback"
	else
		fail "$v: fallback (got '$got', want 't/1/fallback t/0/fallback f/0/fallback')"
	fi

	# make installcheck against this cluster, its Redis emptied first
	"$SLIDEWIN_REDIS_CLI" -h 127.0.0.1 -p "$rport" flushall >/dev/null
	echo "make installcheck (PGHOST=127.0.0.1 PGPORT=$pport PGUSER=postgres)"
	if timeout -k 15 600 make -C "$repo" --no-print-directory installcheck \
		PG_CONFIG="/usr/lib/postgresql/$v/bin/pg_config" \
		PGHOST=127.0.0.1 PGPORT="$pport" PGUSER=postgres >"$work/installcheck.log" 2>&1 </dev/null; then
		grep -E 'tests passed|All [0-9]+ tests|^# All' "$work/installcheck.log"
		pass "$v: installcheck"
	else
		tail -n 60 "$work/installcheck.log"
		[[ -s $repo/regression.diffs ]] && head -n 200 "$repo/regression.diffs"
		fail "$v: installcheck"
	fi
	inside=$("$SLIDEWIN_REDIS_CLI" -h 127.0.0.1 -p "$rport" --scan --pattern 'regress:*' 2>/dev/null | wc -l)
	outside=$("$SLIDEWIN_REDIS_CLI" -h 127.0.0.1 -p "$rport" --scan 2>/dev/null | grep -vc '^regress:')
	echo "keys after installcheck: $inside under regress:, $outside elsewhere"
	if ((inside > 0 && outside == 0)); then
		pass "$v: key prefix"
	else
		"$SLIDEWIN_REDIS_CLI" -h 127.0.0.1 -p "$rport" --scan 2>/dev/null | grep -v '^regress:' | head -n 20
		fail "$v: key prefix ($inside keys under regress:, $outside elsewhere)"
	fi

	pg_dropcluster --stop "$v" "$cluster" >/dev/null 2>&1
	current_major=
	stop_redis "$work/redis" >/dev/null 2>&1
	if apt-get purge -y -q "$name" >"$work/purge.log" 2>&1 && ! dpkg -s "$name" >/dev/null 2>&1 &&
		[[ ! -e /usr/lib/postgresql/$v/lib/slidewin.so ]]; then
		pass "$v: remove"
	else
		tail -n 20 "$work/purge.log"
		fail "$v: remove"
	fi
done
