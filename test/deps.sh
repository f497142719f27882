#!/usr/bin/env bash
# Install the Debian packages that building and testing slidewin need, on
# Debian 12 (bookworm), 13 (trixie) or sid.
#
# Idempotent: it asks dpkg what is already installed and runs apt only for
# what is missing (one `apt-get update`, one `apt-get install`).  With
# everything present it prints a single line and touches nothing.
#
# The PostgreSQL major is asked, never written here: $SLIDEWIN_PG_MAJOR if
# set, else the one $PG_CONFIG reports, else the newest
# postgresql-server-dev-NN installed, else the release's default (what its
# `postgresql` package depends on).  clang and its runtimes (the fuzzers)
# come through Debian's default-version packages, so each release gets its
# own.
#
# redis-server's package starts a system Redis on port 6379 on a normal
# system.  The tests never use it (they start their own on free ports), and
# this script neither starts nor stops it.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
apt_updated=

apt_update() {
	[[ -n $apt_updated ]] && return 0
	apt-get update
	apt_updated=1
}

# The newest major of an installed postgresql-server-dev-NN, if any.
installed_major() {
	dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' 'postgresql-server-dev-[0-9]*' 2>/dev/null |
		awk '$1 == "ii" { sub(/^postgresql-server-dev-/, "", $2); print $2 }' | sort -n | tail -n 1 || true
}

# The release's default major: postgresql depends on postgresql-NN.
default_major() {
	apt-cache depends postgresql 2>/dev/null |
		sed -n 's/^ *Depends: postgresql-\([0-9][0-9]*\)$/\1/p' | head -n 1 || true
}

pg_major=${SLIDEWIN_PG_MAJOR:-}
if [[ -z $pg_major && -n ${PG_CONFIG:-} ]] && v=$("$PG_CONFIG" --version 2>/dev/null); then
	pg_major=$(sed -n 's/^PostgreSQL \([0-9][0-9]*\).*/\1/p' <<<"$v" || true)
fi
[[ -n $pg_major ]] || pg_major=$(installed_major)
[[ -n $pg_major ]] || pg_major=$(default_major)
if [[ -z $pg_major ]] && ((EUID == 0)); then
	apt_update >/dev/null
	pg_major=$(default_major)
fi
if [[ -z $pg_major ]]; then
	echo "deps: cannot tell which PostgreSQL major to install (set SLIDEWIN_PG_MAJOR)" >&2
	exit 1
fi

packages=(
	"postgresql-$pg_major"
	"postgresql-server-dev-$pg_major"
	libhiredis-dev
	libssl-dev
	openssl
	redis-server
	redis-tools
	redis-sentinel
	libipc-run-perl
	libio-socket-ssl-perl
	build-essential
	clang
	libclang-rt-dev
	lua-check
	procps
	util-linux
	iproute2
	prometheus-postgres-exporter
	curl
	gnuplot-nox
	debootstrap
	debhelper
	postgresql-server-dev-all
	pgbouncer
	nodejs
	python3-fastapi
	uvicorn
	python3-psycopg
	python3-psycopg-pool
)

if ! command -v dpkg-query >/dev/null 2>&1; then
	echo "deps: dpkg-query not found; this script supports Debian 12, 13 and sid only." >&2
	echo "deps: install by hand: ${packages[*]}" >&2
	exit 1
fi

installed() {
	local status
	status=$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) || return 1
	[[ $status == *"install ok installed"* ]]
}

# provided NAME: an installed package provides the virtual package NAME.
provided() {
	dpkg-query -W -f='${db:Status-Abbrev}|${Provides}\n' 2>/dev/null | awk -F'|' -v want="$1" '
		$1 ~ /^ii/ {
			n = split($2, p, /, */)
			for (i = 1; i <= n; i++) { sub(/ .*/, "", p[i]); if (p[i] == want) found = 1 }
		}
		END { exit !found }'
}

# npm (examples/express): Debian's package, unless the installed nodejs
# already ships one (NodeSource's nodejs provides npm and conflicts with it).
if installed npm || ! provided npm; then
	packages+=(npm)
fi

missing_packages() {
	local p
	for p in "${packages[@]}"; do
		installed "$p" || echo "$p"
	done
}

# Valkey: Debian 13 and later ship it; on 12 it comes from bookworm-backports,
# whose source entry is derived from the machine's own Debian entry (same
# mirror, same key), never written with a mirror of our own choosing.
backports_packages=()
if ! installed valkey-server; then
	if [[ $(apt-cache policy valkey-server 2>/dev/null | sed -n 's/^ *Candidate: //p') =~ ^[0-9] ]] &&
		! grep -rqsE -- "-backports" <(apt-cache policy valkey-server 2>/dev/null | sed -n '/Version table/,$p' | head -n 3); then
		packages+=(valkey-server)
	else
		backports_packages=(valkey-server)
	fi
else
	packages+=(valkey-server)
fi

backports_file=/etc/apt/sources.list.d/slidewin-backports.sources

# Print a deb822 stanza for <suite>-backports made from the first entry that
# serves the plain release suite (deb822 .sources files, then one-line lists).
derive_backports() {
	local codename=$1
	# deb822: a stanza whose Suites list the codename itself
	awk -v rel="$codename" '
		BEGIN { RS = ""; FS = "\n" }
		{
			uris = ""; suites = ""; comps = ""; key = ""; types = ""
			for (i = 1; i <= NF; i++) {
				if ($i ~ /^URIs:/) { uris = $i; sub(/^URIs:[ \t]*/, "", uris) }
				else if ($i ~ /^Suites:/) { suites = " " $i " "; sub(/^ Suites:/, " ", suites) }
				else if ($i ~ /^Signed-By:/) { key = $i }
				else if ($i ~ /^Types:/) { types = $i }
			}
			if (types ~ /deb([ \t]|$)/ && suites ~ ("[ \t]" rel "[ \t]") && uris != "") {
				print "Types: deb"; print "URIs: " uris; print "Suites: " rel "-backports"
				print "Components: main"; if (key != "") print key
				found = 1; exit
			}
		}
		END { exit !found }' /etc/apt/sources.list.d/*.sources 2>/dev/null && return 0
	# one-line format: deb [options] URI codename components
	awk -v rel="$codename" '
		$1 == "deb" {
			n = 2; opts = ""
			if ($2 ~ /^\[/) { while ($n !~ /\]$/) { opts = opts " " $n; n++ } opts = opts " " $n; n++ }
			if ($(n + 1) == rel) {
				print "Types: deb"; print "URIs: " $n; print "Suites: " rel "-backports"
				print "Components: main"
				if (opts ~ /signed-by=/) { k = opts; sub(/.*signed-by=/, "", k); sub(/[ \]].*/, "", k); print "Signed-By: " k }
				found = 1; exit
			}
		}
		END { exit !found }' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null
}

mapfile -t missing < <(missing_packages)
mapfile -t missing_bp < <(for p in "${backports_packages[@]}"; do installed "$p" || echo "$p"; done)

if ((${#missing[@]} == 0 && ${#missing_bp[@]} == 0)); then
	echo "deps: all $((${#packages[@]} + ${#backports_packages[@]})) packages present"
	exit 0
fi

if ((EUID != 0)); then
	echo "deps: missing packages: ${missing[*]}" >&2
	echo "deps: installing them needs root; run: sudo bash $0" >&2
	exit 1
fi

codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
if ((${#missing_bp[@]} > 0)) &&
	! grep -rqsE -- "(^|[[:space:]])$codename-backports([[:space:]]|$)" /etc/apt/sources.list /etc/apt/sources.list.d/; then
	if [[ -z $codename ]] || ! entry=$(derive_backports "$codename"); then
		echo "deps: found no Debian source entry for '$codename' to derive $codename-backports from" >&2
		exit 1
	fi
	echo "deps: adding $codename-backports, derived from this machine's Debian entry:"
	printf '%s\n' "$entry" | sed 's/^/  /'
	printf '%s\n' "# slidewin test/deps.sh: backports for valkey-server" "$entry" >"$backports_file"
fi
echo "deps: installing ${missing[*]} ${missing_bp[*]}"
apt_updated=
apt_update
if ((${#missing[@]} > 0)); then
	apt-get install -y --no-install-recommends "${missing[@]}"
fi
if ((${#missing_bp[@]} > 0)); then
	apt-get install -y --no-install-recommends -t "$codename-backports" "${missing_bp[@]}"
fi

mapfile -t still < <(missing_packages; for p in "${backports_packages[@]}"; do installed "$p" || echo "$p"; done)
if ((${#still[@]} > 0)); then
	echo "deps: still missing after apt-get install: ${still[*]}" >&2
	exit 1
fi
echo "deps: all $((${#packages[@]} + ${#backports_packages[@]})) packages present"
