#!/usr/bin/env bash
# `make soak`: the randomized exactness soak for SOAK_SECONDS (default 600)
# of load. It runs TAP 140_soak, whose code is test/perl/SlidewinSoak.pm (the
# same as in `make test`, where it runs 55 s), through run_all.sh, so that
# the servers, the user and the environment are those of `make test`.
# SOAK_SEED replays a run's random choices. The last line says PASS or FAIL
# with the seed; the exit status is non-zero on failure.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
secs=${SOAK_SECONDS:-600}
if ! [[ $secs =~ ^[0-9]+$ ]] || ((secs < 10)); then
	echo "soak: SOAK_SECONDS=$secs: expected a whole number of seconds, at least 10" >&2
	exit 2
fi
export SOAK_SECONDS=$secs
[[ -n ${SOAK_SEED:-} ]] && export SOAK_SEED

out=$(mktemp -t slidewin-soak.XXXXXX)
trap 'rm -f "$out"' EXIT
# start-up, the checks and the servers' stop take about a minute more
SLIDEWIN_ONLY='^140_soak$' SLIDEWIN_SANITIZE=0 SLIDEWIN_VALKEY=0 \
	SLIDEWIN_TAP_TIMEOUT=$((secs + 300)) bash "$here/run_all.sh" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}

seed=$(grep -o 'soak: seed [0-9]*' "$out" | head -n 1 | awk '{print $3}')
if ((rc == 0)) && grep -q '^[0-9]* passed, 0 failed$' "$out"; then
	echo "soak: PASS ($secs s, seed ${seed:-unknown})"
	exit 0
fi
echo "soak: FAIL ($secs s, seed ${seed:-unknown}; SOAK_SEED=${seed:-?} replays its choices); failed checks:"
grep -o "Failed test '[^']*'" "$out" | sort -u | sed -E "s/^Failed test '(.*)'$/  \1/"
exit 1
