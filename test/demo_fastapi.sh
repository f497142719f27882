#!/usr/bin/env bash
# The HTTP scene of `make demo`: examples/fastapi (Debian's FastAPI, uvicorn
# and psycopg 3) runs against the demo's PostgreSQL, curl sends a few
# requests for one tenant, and each answer's status and rate-limit headers
# are shown: 200 while the quota lasts, then 429 with Retry-After.
#
# Usage (from demo.sh): demo_fastapi.sh WORKDIR PGPORT. The app is stopped
# when this script ends, however it ends.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
work=$1
pg_port=$2
app_port=$(free_port)
url="http://127.0.0.1:$app_port/api/hello"

(cd "$here/../examples/fastapi" &&
	PGHOST=127.0.0.1 PGPORT=$pg_port PGUSER=postgres PGDATABASE=postgres \
		PORT=$app_port RL_LIMIT=5 RL_WINDOW='1 minute' RL_KEY_PREFIX='demo:http:' \
		PYTHONDONTWRITEBYTECODE=1 exec /usr/bin/python3 app.py) >"$work/fastapi.log" 2>&1 &
app=$!
trap 'kill -TERM "$app" 2>/dev/null || true; wait "$app" 2>/dev/null || true' EXIT
for ((i = 0; i < 100; i++)); do
	curl -s -o /dev/null "$url" && break
	if ! kill -0 "$app" 2>/dev/null; then
		echo "demo_fastapi.sh: the app exited:" >&2
		cat "$work/fastapi.log" >&2
		exit 1
	fi
	sleep 0.2
done

echo
echo "== 13. An HTTP API: examples/fastapi, 5 requests per minute per tenant"
echo "python3 app.py on 127.0.0.1:$app_port; each answer carries the headers of rl_headers:"
# Every header of the first answer and of the first refusal; of the others,
# the state (RateLimit) and Retry-After.
for i in 1 2 3 4 5 6 7; do
	curl -sS -o "$work/body" -D "$work/headers" -H 'X-Tenant: acme' "$url"
	tr -d '\r' <"$work/headers" | awk -v i="$i" -v body="$(cat "$work/body")" '
		NR == 1 { status = $2 }
		tolower($0) ~ /^(ratelimit|ratelimit-policy|x-ratelimit-[a-z]*|retry-after):/ { h[++n] = $0 }
		END {
			printf "   request %d: HTTP %s %s\n", i, status, body
			for (k = 1; k <= n; k++)
				if (i == 1 || i == 6 || tolower(h[k]) ~ /^(ratelimit|retry-after):/)
					printf "      %s\n", h[k]
		}'
done
