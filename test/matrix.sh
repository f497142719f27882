#!/usr/bin/env bash
# make test-matrix: the whole suite on the other PostgreSQL majors, each in a
# minimal Debian chroot of its own made here with debootstrap.
#
#   trixie        Debian 13: its PostgreSQL, Redis, Valkey and hiredis 1.x;
#                 the whole suite (make test, without the sanitize pass).
#                 Required.
#   sid           Debian unstable: the same. Required, except that a failure
#                 of the chroot's own setup (a package sid broke that day)
#                 is reported as "setup failed" and not counted.
#   experimental  sid plus experimental's newest PostgreSQL (a release
#                 candidate): built, and the regression suite run. Advisory:
#                 reported, never counted.
#
# No version is written here: each suite's PostgreSQL is the one its release
# installs (test/deps.sh asks apt), and the table at the end asks every
# program for its own version. The mirror is this machine's own, read from
# its apt configuration (the URI that serves this release's main), never
# written into the project.
#
# Each chroot is entered through a private mount and PID namespace with
# pivot_root, not chroot(2): a chrooted process may not create user
# namespaces, which TAP 063 needs, and the PID namespace ends every server a
# run leaves behind. Each suite runs on a port range of its own.
#
# Knobs: SLIDEWIN_MATRIX_DIR (default /var/tmp/slidewin-matrix: the chroots,
# about 2 GB each, kept and reused; remove it to start over),
# SLIDEWIN_MATRIX_SUITES (default "trixie sid experimental"),
# SLIDEWIN_MATRIX_ONLY_PACKAGE=1 (the package step below alone, without the
# suite).
#
# The package step: after the suite, test/package_smoke.sh builds the Debian
# package (make deb) in the chroot, installs it into the release's own
# PostgreSQL, and tries it in a new cluster (pg_createcluster) with a
# throwaway Redis: CREATE EXTENSION, calls answered by Redis and by the
# fallback store, and `make installcheck` against that cluster. Its tests
# are added to the suite's; its log is DIR/SUITE.package.log.
#
# Preparing ahead: `test/matrix.sh --prepare STATEDIR` only sets the chroots
# up (debootstrap, the packages, the checkout; what `setup` below does), one
# suite after the other, at the lowest CPU and I/O priority. Each suite's log
# is DIR/SUITE.prep.log, and when a suite is done its exit status is written
# to STATEDIR/SUITE.rc. .ci/run starts this in the background before
# `make test`, so that the downloads and the package installs (minutes per
# chroot, most of it dpkg) overlap the host suite, which mostly waits. A
# `make test-matrix` run with SLIDEWIN_MATRIX_PREPARED=STATEDIR then waits
# for each suite's STATEDIR/SUITE.rc before it tests that suite: a failed
# preparation is that suite's "setup failed", with the end of its log, as a
# failed setup always was; a successful one leaves only the quick part of the
# setup (the checkout copied again, test/deps.sh finding all present).
#
# Output: each suite's run, then a table of suite x result, then one line
# `N passed, M failed` over the counted suites. Exit status 1 if a counted
# suite failed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
dir=${SLIDEWIN_MATRIX_DIR:-/var/tmp/slidewin-matrix}
read -r -a suites <<<"${SLIDEWIN_MATRIX_SUITES:-trixie sid experimental}"
prepare_into=
if [[ ${1:-} == --prepare ]]; then
	prepare_into=${2:?--prepare needs a state directory}
fi
prepared=${SLIDEWIN_MATRIX_PREPARED:-}
only_package=
case ${SLIDEWIN_MATRIX_ONLY_PACKAGE:-0} in
0 | '') ;;
1) only_package=1 ;;
*)
	echo "test-matrix: SLIDEWIN_MATRIX_ONLY_PACKAGE=$SLIDEWIN_MATRIX_ONLY_PACKAGE: expected 0 or 1" >&2
	echo "0 passed, 1 failed"
	exit 1
	;;
esac

die() {
	echo "test-matrix: $*" >&2
	echo "0 passed, 1 failed"
	exit 1
}

((EUID == 0)) || die "debootstrap and the namespaces need root"
for tool in debootstrap unshare pivot_root; do
	command -v "$tool" >/dev/null 2>&1 || [[ -x /usr/sbin/$tool ]] ||
		die "$tool not found (make deps installs debootstrap)"
done
export PATH=$PATH:/usr/sbin:/sbin

# This machine's Debian mirror: the URI apt uses for this release's main.
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
mirror=$(apt-cache policy 2>/dev/null |
	awk -v want="$codename/main" '$3 == want && $2 ~ /^https?:/ { print $2; exit }')
[[ -n $mirror ]] || die "found no mirror serving $codename/main in this machine's apt configuration"

mkdir -p "$dir" || die "cannot create $dir"

# run_in ROOT CMD: CMD in bash as root inside ROOT, through pivot_root.
run_in() {
	local root=$1 cmd=$2
	unshare --mount --pid --fork --propagation private -- bash -c '
		set -e
		r=$1
		mount --bind "$r" "$r"
		mount -t proc proc "$r/proc"
		mount -t sysfs sysfs "$r/sys"
		mount --rbind /dev "$r/dev"
		mount -t tmpfs -o mode=1777 tmpfs "$r/dev/shm"
		mkdir -p "$r/.oldroot"
		cd "$r"
		pivot_root . .oldroot
		cd /
		umount -l /.oldroot
		exec env -i HOME=/root LANG=C.UTF-8 TERM=dumb CI="${CI:-}" \
			PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			bash -c "$2"
	' _ "$root" "$cmd"
}

# setup SUITE ROOT LOG: a chroot with the suite's packages, once.
setup() {
	local suite=$1 root=$2 log=$3 release=$1
	[[ $suite == experimental ]] && release=sid
	if [[ ! -e $root/.slidewin-base ]]; then
		rm -rf "$root"
		echo "  debootstrap $release from $mirror"
		debootstrap --variant=minbase --include=ca-certificates,mount "$release" "$root" "$mirror" \
			>>"$log" 2>&1 || return 1
		# A mirror may serve a sid whose Release file has passed its
		# Valid-Until date; the chroot accepts it (it is a test bed).
		echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99slidewin-matrix"
		if [[ $suite == experimental ]]; then
			echo "deb $mirror experimental main" >"$root/etc/apt/sources.list.d/experimental.list"
		fi
		touch "$root/.slidewin-base"
	fi
	# A throwaway test bed: dpkg need not fsync every file it unpacks (the
	# packages of test/deps.sh are most of a chroot's setup time).
	mkdir -p "$root/etc/dpkg/dpkg.cfg.d"
	echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/99slidewin-unsafe-io"
	if [[ ! -e $root/.slidewin-ready ]]; then
		echo "  installing make (and, for experimental, its newest PostgreSQL)"
		local pre='export DEBIAN_FRONTEND=noninteractive; apt-get update -q && apt-get install -y -q --no-install-recommends make'
		if [[ $suite == experimental ]]; then
			# the newest major experimental has, asked of apt
			pre+='; m=$(apt-cache search --names-only "^postgresql-server-dev-[0-9]+$" | sed "s/^postgresql-server-dev-\([0-9]*\) .*/\1/" | sort -n | tail -n 1)'
			# Only PostgreSQL's own packages from experimental, the rest from
			# sid: -t experimental would pull experimental's perl as well, which
			# a sid in mid-transition cannot install.
			pre+=' && apt-get install -y -q --no-install-recommends postgresql-$m/experimental postgresql-server-dev-$m/experimental postgresql-client-$m/experimental libpq-dev/experimental libpq5/experimental'
		fi
		run_in "$root" "$pre" >>"$log" 2>&1 || return 1
		touch "$root/.slidewin-ready"
	fi
	# A fresh copy of the checkout each run (without build products), and
	# whatever its test/deps.sh adds (quick when all is there).
	rm -rf "$root/slidewin"
	mkdir -p "$root/slidewin"
	# The host's own build may be running in the checkout meanwhile (CI
	# prepares the chroots while `make test` builds): its products are left
	# out, clang's temporary files too, and a file that changes or goes
	# while it is read (tar's status 1) fails nothing, as the copy builds
	# its own products anyway.
	tar -C "$repo" --exclude=./.git --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
		--exclude='*.tmp' --exclude=./test/fuzz/build --ignore-failed-read \
		--warning=no-file-changed --warning=no-file-removed -cf - . |
		tar -C "$root/slidewin" -xf -
	local st=("${PIPESTATUS[@]}")
	if ((st[0] > 1 || st[1] != 0)); then
		echo "  copying the checkout failed (tar: ${st[*]})"
		return 1
	fi
	# The local certificate authorities the host trusts (a company's, a
	# proxy's) are trusted inside too: TAP 130 runs `npm ci`, which reaches
	# the npm registry over TLS as it does from the host.
	local cas=(/usr/local/share/ca-certificates/*.crt)
	if [[ -f ${cas[0]} ]]; then
		mkdir -p "$root/usr/local/share/ca-certificates"
		cp "${cas[@]}" "$root/usr/local/share/ca-certificates/" || return 1
		run_in "$root" 'update-ca-certificates' >>"$log" 2>&1 || return 1
	fi
	run_in "$root" 'cd /slidewin && bash test/deps.sh' >>"$log" 2>&1 || return 1
	return 0
}

# ---- --prepare: the setups alone, for a later run to wait on ------------------
if [[ -n $prepare_into ]]; then
	mkdir -p "$prepare_into" || die "cannot create $prepare_into"
	echo $$ >"$prepare_into/pid"
	# prep_status SUITE STATUS: STATEDIR/SUITE.rc, written whole or not at all.
	prep_status() {
		echo "$2" >"$prepare_into/$1.rc.tmp" && mv -f "$prepare_into/$1.rc.tmp" "$prepare_into/$1.rc"
	}
	# A suite not prepared when this ends (a signal) is reported as failed,
	# so that nothing waits for it in vain.
	prep_left=("${suites[@]}")
	# shellcheck disable=SC2317
	prep_exit() {
		local s
		for s in "${prep_left[@]}"; do
			echo "test-matrix --prepare: stopped before $s was prepared" >>"$dir/$s.prep.log"
			prep_status "$s" 1
		done
	}
	trap prep_exit EXIT
	trap 'exit 143' TERM INT
	# The host suite runs meanwhile and has timing-sensitive tests: yield
	# the CPU and the disk to it.
	renice -n 19 -p $$ >/dev/null 2>&1
	command -v ionice >/dev/null 2>&1 && ionice -c 2 -n 7 -p $$ >/dev/null 2>&1
	prep_failed=0
	for suite in "${suites[@]}"; do
		log=$dir/$suite.prep.log
		: >"$log"
		start=$(date +%s)
		setup "$suite" "$dir/$suite" "$log" >>"$log" 2>&1
		rc=$?
		echo "test-matrix --prepare: $suite: status $rc after $(($(date +%s) - start)) s" | tee -a "$log"
		prep_left=("${prep_left[@]:1}")
		prep_status "$suite" "$rc"
		((rc == 0)) || prep_failed=1
	done
	exit "$prep_failed"
fi

# wait_prepared SUITE: wait for SUITE's preparation (--prepare, started by
# .ci/run) to end; its status is the preparation's.
wait_prepared() {
	local suite=$1 pid waited=0 rc
	pid=$(cat "$prepared/pid" 2>/dev/null)
	while [[ ! -f $prepared/$suite.rc ]]; do
		if [[ -z $pid ]] || ! kill -0 "$pid" 2>/dev/null; then
			sleep 1 # it may have written the file as it ended
			[[ -f $prepared/$suite.rc ]] && break
			echo "  the background preparation ended without a status for $suite"
			return 1
		fi
		sleep 5
		waited=$((waited + 5))
	done
	rc=$(cat "$prepared/$suite.rc")
	echo "  prepared in the background (log $dir/$suite.prep.log): status $rc; waited ${waited} s for it"
	[[ $rc == 0 ]]
}

declare -A result=() versions=() counted=()
total_passed=0
total_failed=0
i=0
for suite in "${suites[@]}"; do
	root=$dir/$suite
	log=$dir/$suite.log
	: >"$log"
	lo=$((21000 + i * 9000))
	hi=$((lo + 8999))
	i=$((i + 1))
	printf '\n======== test-matrix: %s ========\n' "$suite"
	if [[ -n $prepared ]] && ! wait_prepared "$suite"; then
		tail -n 40 "$dir/$suite.prep.log"
		result[$suite]="setup failed"
		[[ $suite == trixie ]] && counted[$suite]=1 && total_failed=$((total_failed + 1))
		continue
	fi
	start=$(date +%s)
	if ! setup "$suite" "$root" "$log"; then
		tail -n 40 "$log"
		result[$suite]="setup failed"
		[[ $suite == trixie ]] && counted[$suite]=1 && total_failed=$((total_failed + 1))
		continue
	fi
	pgc='$(ls -d /usr/lib/postgresql/*/bin/pg_config | sort -V | tail -n 1)'
	if [[ $suite == experimental ]]; then
		only=$(cd "$repo/sql" && ls -- *.sql | grep -v '^slidewin--' | sed 's/\.sql$//' | paste -sd'|')
		cmd="cd /slidewin && export PG_CONFIG=$pgc SLIDEWIN_PORT_RANGE=$lo-$hi SLIDEWIN_SANITIZE=0 SLIDEWIN_VALKEY=0 SLIDEWIN_CLUSTER=0 SLIDEWIN_ONLY='^($only)\$' && make test"
	else
		cmd="cd /slidewin && export PG_CONFIG=$pgc SLIDEWIN_PORT_RANGE=$lo-$hi SLIDEWIN_SANITIZE=0 && make test"
	fi
	suite_result=
	p=0
	f=0
	if [[ -z $only_package ]]; then
		run_in "$root" "$cmd" 2>&1 | tee -a "$log"
		line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
		if [[ -z $line ]]; then
			suite_result="suite: no result; "
			line="0 passed, 1 failed"
		else
			suite_result="suite: $line; "
		fi
		read -r p _ f _ <<<"$line"
	fi
	# The package step (test/package_smoke.sh), on the same ports; not in
	# experimental, whose PostgreSQL is a release candidate that no
	# package of a release is built for.
	if [[ $suite == experimental ]]; then
		pline="0 passed, 0 failed"
		pkg_result="package: not tried (a release candidate)"
	else
		printf '\n======== test-matrix: %s: the package ========\n' "$suite"
		run_in "$root" "cd /slidewin && export SLIDEWIN_PORT_RANGE=$lo-$hi && bash test/package_smoke.sh --install-into-system" \
			2>&1 | tee "$dir/$suite.package.log"
		pline=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$dir/$suite.package.log" | tail -n 1)
	fi
	if [[ $suite == experimental ]]; then
		:
	elif [[ -z $pline ]]; then
		pkg_result="package: no result"
		pline="0 passed, 1 failed"
	else
		pkg_result="package: $pline"
	fi
	read -r pp _ pf _ <<<"$pline"
	line="$((p + pp)) passed, $((f + pf)) failed"
	elapsed=$(($(date +%s) - start))
	versions[$suite]=$(run_in "$root" '
		printf "%s; " "$(pg_config --version 2>/dev/null | sed "s/ (.*//")"
		printf "Redis %s; " "$(redis-server --version | sed -n "s/.* v=\([^ ]*\).*/\1/p")"
		printf "Valkey %s; " "$(valkey-server --version 2>/dev/null | sed -n "s/.* v=\([^ ]*\).*/\1/p")"
		printf "hiredis %s" "$(dpkg-query -W -f="\${Version}" libhiredis-dev 2>/dev/null)"' 2>/dev/null)
	result[$suite]="$line: $suite_result$pkg_result (${elapsed} s)"
	if [[ $suite != experimental ]]; then
		counted[$suite]=1
		read -r p _ f _ <<<"$line"
		total_passed=$((total_passed + p))
		total_failed=$((total_failed + f))
	fi
done

printf '\n======== test-matrix: results ========\n'
printf '%-13s | %-8s | %-70s | %s\n' suite counted versions result
for suite in "${suites[@]}"; do
	printf '%-13s | %-8s | %-70s | %s\n' "$suite" "$([[ -n ${counted[$suite]:-} ]] && echo yes || echo no)" \
		"${versions[$suite]:-}" "${result[$suite]:-}"
done
echo
echo "$total_passed passed, $total_failed failed"
((total_failed == 0))
