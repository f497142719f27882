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
	redis-server
	redis-tools
	libipc-run-perl
	build-essential
	clang-14
	libclang-rt-14-dev
	procps
	util-linux
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

mapfile -t missing < <(missing_packages)

if ((${#missing[@]} == 0)); then
	echo "deps: all ${#packages[@]} packages present"
	exit 0
fi

if ((EUID != 0)); then
	echo "deps: missing packages: ${missing[*]}" >&2
	echo "deps: installing them needs root; run: sudo bash $0" >&2
	exit 1
fi

echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"

mapfile -t still < <(missing_packages)
if ((${#still[@]} > 0)); then
	echo "deps: still missing after apt-get install: ${still[*]}" >&2
	exit 1
fi
echo "deps: all ${#packages[@]} packages present"
