"""slidewin in a FastAPI app: GET /api/hello is limited per tenant by one
call to rl_attempt, and every answer, 200 or 429, carries the headers that
rl_headers builds from that call's result.

Configuration, all from the environment:
  PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD ...  the database, read by
                  libpq (an empty conninfo means "as the PG* variables say")
  PORT            the port to listen on (default 8000); HOST (default 127.0.0.1)
  RL_LIMIT        units per window (default 60)
  RL_WINDOW       the window, as a PostgreSQL interval (default '1 minute')
  RL_KEY_PREFIX   prepended to the tenant to make the key (default 'hello:')

Run with `python3 app.py`.
"""

import atexit
import os
from typing import Optional

import uvicorn
from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse
from psycopg_pool import ConnectionPool

LIMIT = int(os.environ.get("RL_LIMIT", "60"))
WINDOW = os.environ.get("RL_WINDOW", "1 minute")
KEY_PREFIX = os.environ.get("RL_KEY_PREFIX", "hello:")
if LIMIT < 1:
    raise SystemExit(f"RL_LIMIT must be a positive integer, not {LIMIT}")

# A synchronous pool, opened when the module loads and closed at exit:
# Debian 12's FastAPI 0.92 predates lifespan handlers. FastAPI runs a plain
# `def` route in its thread pool, so a blocking query does not hold up the
# event loop.
# Behind PgBouncer before 1.21 in transaction mode, add
# kwargs={"prepare_threshold": None}: psycopg prepares a statement it has run
# five times on a connection, and such named statements break there (see
# doc/poolers.md).
pool = ConnectionPool("", min_size=1, max_size=10, timeout=5, open=True)
atexit.register(pool.close)

# One statement, one round trip: the decision and its headers together.
# rl_headers returns jsonb, which psycopg loads into a dict of header strings,
# so Python converts nothing (no interval, no bigint to format). The window
# goes in as text and PostgreSQL casts it, so '1 hour' and '00:01:00' both work.
ATTEMPT_SQL = """
    SELECT r.allowed, rl_headers(r, 'hello') AS headers
      FROM rl_attempt(%s, %s::bigint, %s::interval) AS r"""

app = FastAPI()


@app.get("/api/hello")
def hello(
    x_tenant: Optional[str] = Header(default=None),
    tenant: Optional[str] = None,
):
    # Taken from a header (or ?tenant=) to keep the example short. A real API
    # takes it from what it authenticated (an API key, a token's subject), or
    # a client picks its own quota.
    who = x_tenant if x_tenant is not None else tenant
    if not who or len(who) > 100:
        return JSONResponse({"error": "say who you are in the X-Tenant header"}, status_code=400)

    with pool.connection() as conn:
        allowed, headers = conn.execute(ATTEMPT_SQL, (KEY_PREFIX + who, LIMIT, WINDOW)).fetchone()

    # On both answers: clients can pace themselves before they are refused.
    if not allowed:
        # Retry-After is among the headers; the body does not name the key.
        return JSONResponse({"error": "too many requests"}, status_code=429, headers=headers)
    return JSONResponse({"hello": who}, headers=headers)


@app.exception_handler(Exception)
def internal_error(request: Request, exc: Exception):
    # The client learns only that something failed. The details, which may
    # name the key, go to the log: Starlette passes the exception on to
    # uvicorn once this answer is sent, and uvicorn logs its traceback.
    return JSONResponse({"error": "internal error"}, status_code=500)


if __name__ == "__main__":
    uvicorn.run(
        app,
        host=os.environ.get("HOST", "127.0.0.1"),
        port=int(os.environ.get("PORT", "8000")),
        log_level="warning",
    )
