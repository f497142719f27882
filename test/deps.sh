#!/usr/bin/env bash
# Install the Debian 12 packages that building and testing slidewin need.
#
# Idempotent: it asks dpkg what is already installed and runs apt only for
# what is missing (one `apt-get update`, one `apt-get install`).  With
# everything present it prints a single line and touches nothing.
#
# redis-server's package starts a system Redis on port 6379 on a normal
# system.  The tests never use it (they start their own on free ports), and
# this script neither starts nor stops it.
set -euo pipefail

packages=(
	postgresql-15
	postgresql-server-dev-15
	libhiredis-dev
	libssl-dev
	openssl
	redis-server
	redis-tools
	redis-sentinel
	libipc-run-perl
	libio-socket-ssl-perl
	build-essential
	clang-14
	libclang-rt-14-dev
	procps
	util-linux
	prometheus-postgres-exporter
	curl
	gnuplot-nox
)

if ! command -v dpkg-query >/dev/null 2>&1; then
	echo "deps: dpkg-query not found; this script supports Debian 12 only." >&2
	echo "deps: install by hand: ${packages[*]}" >&2
	exit 1
fi

installed() {
	local status
	status=$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) || return 1
	[[ $status == *"install ok installed"* ]]
}

missing_packages() {
	local p
	for p in "${packages[@]}"; do
		installed "$p" || echo "$p"
	done
}

# Valkey 8 comes from Debian's bookworm-backports suite. Its source entry is
# derived from the machine's own Debian entry (same mirror, same key), never
# written with a mirror of our own choosing.
backports_packages=(valkey-server)

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

export DEBIAN_FRONTEND=noninteractive
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
apt-get update
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
