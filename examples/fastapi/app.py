"""slidewin in a FastAPI app. Two routes, both limited per tenant by one
statement each, and every answer, 200, 404 or 429, carries the headers that
rl_headers builds from that statement's result:

  GET /api/hello        rl_attempt alone
  GET /api/items/{id}   rl_attempt and the item's row in the same statement:
                        the limit costs no round trip of its own

Configuration, all from the environment:
  PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD ...  the database, read by
                  libpq (an empty conninfo means "as the PG* variables say")
  PORT            the port to listen on (default 8000); HOST (default 127.0.0.1)
  RL_LIMIT        units per window (default 60)
  RL_WINDOW       the window, as a PostgreSQL interval (default '1 minute')
  RL_KEY_PREFIX   prepended to the tenant to make the key (default 'fastapi:')
  PG_PREPARE_THRESHOLD
                  psycopg's prepare_threshold: after how many runs on one
                  connection a statement is prepared (default 5, psycopg's
                  own), or 'none' never to prepare. Behind PgBouncer in
                  transaction mode without max_prepared_statements (before
                  1.21, or with it 0), set 'none'.

At start-up the app asks the database whether RL_WINDOW is an interval and
whether slidewin accepts RL_LIMIT and RL_WINDOW, and exits with status 2 and
the reason if not.

Run with `python3 app.py`.
"""

import logging
import os
import sys
from typing import Optional

import psycopg
import uvicorn
from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse
from psycopg_pool import ConnectionPool

log = logging.getLogger("example")
logging.basicConfig(format="%(levelname)s: %(message)s")


def refuse(reason):
    print(f"app.py: not starting: {reason}", file=sys.stderr)
    sys.exit(2)


def prepare_threshold(text):
    if text.lower() == "none":
        return None
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        refuse(f"PG_PREPARE_THRESHOLD must be a whole number >= 0 or 'none', not {text!r}")
    return n


try:
    LIMIT = int(os.environ.get("RL_LIMIT", "60"))
except ValueError:
    LIMIT = 0
if LIMIT < 1:
    refuse(f"RL_LIMIT must be a positive whole number, not {os.environ.get('RL_LIMIT')!r}")
WINDOW = os.environ.get("RL_WINDOW", "1 minute")
KEY_PREFIX = os.environ.get("RL_KEY_PREFIX", "fastapi:")
PREPARE = prepare_threshold(os.environ.get("PG_PREPARE_THRESHOLD", "5"))
# The name of the policy in the RateLimit and RateLimit-Policy headers.
POLICY = "fastapi"

# A synchronous pool, opened when the module loads and closed at exit:
# Debian 12's FastAPI 0.92 predates lifespan handlers. FastAPI runs a plain
# `def` route in its thread pool, so a blocking query does not hold up the
# event loop. psycopg prepares a statement it has run prepare_threshold times
# on a connection; such named statements fail behind PgBouncer in transaction
# mode unless it tracks them (see doc/poolers.md).
pool = ConnectionPool("", min_size=1, max_size=10, timeout=5, open=False,
                      kwargs={"prepare_threshold": PREPARE})


def check_settings():
    """Refuse to start on settings that would fail every request."""
    try:
        pool.open(wait=True, timeout=10)
    except psycopg.Error as e:
        refuse(f"cannot connect to the database: {e}")
    with pool.connection() as conn:
        try:
            conn.execute("SELECT %s::interval", (WINDOW,))
        except psycopg.Error as e:
            refuse(f"RL_WINDOW={WINDOW!r} is not a PostgreSQL interval: {e.diag.message_primary}")
        try:
            # slidewin's own check of lim and win, without counting anything
            conn.execute("SELECT rl_peek(%s, %s::bigint, %s::interval)",
                         (KEY_PREFIX + "start-up check", LIMIT, WINDOW))
        except psycopg.errors.UndefinedFunction:
            refuse(f"the database {conn.info.dbname!r} has no slidewin: run CREATE EXTENSION slidewin there")
        except psycopg.Error as e:
            refuse(f"slidewin refuses RL_LIMIT={LIMIT} RL_WINDOW={WINDOW!r}: {e.diag.message_primary}")


# One statement, one round trip: the decision and its headers together.
# rl_headers returns jsonb, which psycopg loads into a dict of header strings,
# so Python converts nothing (no interval, no bigint to format). The window
# goes in as text and PostgreSQL casts it, so '1 hour' and '00:01:00' both work.
ATTEMPT_SQL = """
    SELECT r.allowed, rl_headers(r, %s) AS headers
      FROM rl_attempt(%s, %s::bigint, %s::interval) AS r"""

# The limit and the row in one statement, so the limit costs no round trip of
# its own: rl_attempt runs once, and the join condition lets the row through
# only when the call is admitted, so a denied client gets no data. A missing
# item still spends its unit: the client asked.
ITEM_SQL = """
    SELECT r.allowed, rl_headers(r, %s) AS headers, i.id, i.name
      FROM rl_attempt(%s, %s::bigint, %s::interval) AS r
      LEFT JOIN items AS i ON r.allowed AND i.id = %s"""

app = FastAPI()


def tenant_of(x_tenant, tenant):
    # Taken from a header (or ?tenant=) to keep the example short. A real API
    # takes it from what it authenticated (an API key, a token's subject), or
    # a client picks its own quota.
    who = x_tenant if x_tenant is not None else tenant
    return who if who and len(who) <= 100 else None


NO_TENANT = {"error": "say who you are in the X-Tenant header"}


@app.get("/api/hello")
def hello(x_tenant: Optional[str] = Header(default=None), tenant: Optional[str] = None):
    who = tenant_of(x_tenant, tenant)
    if who is None:
        return JSONResponse(NO_TENANT, status_code=400)

    with pool.connection() as conn:
        allowed, headers = conn.execute(
            ATTEMPT_SQL, (POLICY, KEY_PREFIX + who, LIMIT, WINDOW)).fetchone()

    # On both answers: clients can pace themselves before they are refused.
    if not allowed:
        # Retry-After is among the headers; the body does not name the key.
        return JSONResponse({"error": "too many requests"}, status_code=429, headers=headers)
    return JSONResponse({"hello": who}, headers=headers)


@app.get("/api/items/{item_id}")
def item(item_id: int, x_tenant: Optional[str] = Header(default=None), tenant: Optional[str] = None):
    who = tenant_of(x_tenant, tenant)
    if who is None:
        return JSONResponse(NO_TENANT, status_code=400)

    with pool.connection() as conn:
        allowed, headers, found_id, name = conn.execute(
            ITEM_SQL, (POLICY, KEY_PREFIX + who, LIMIT, WINDOW, item_id)).fetchone()

    if not allowed:
        return JSONResponse({"error": "too many requests"}, status_code=429, headers=headers)
    if found_id is None:
        return JSONResponse({"error": "no such item"}, status_code=404, headers=headers)
    return JSONResponse({"id": found_id, "name": name}, headers=headers)


# A failing statement (or no free connection in the pool): 500. This handler
# is for psycopg's errors, not for Exception: Starlette answers a handler for
# Exception and then raises the error again, and uvicorn then closes the
# connection, which a keep-alive client that has sent its next request sees
# as a reset. Here the answer is final and the connection stays usable. The
# client learns only that something failed; the details, which may name the
# key, go to the log.
@app.exception_handler(psycopg.Error)
def database_error(request: Request, exc: psycopg.Error):
    log.error("%s %s failed: %s", request.method, request.url.path, exc)
    return JSONResponse({"error": "internal error"}, status_code=500)


# Anything else (a bug): still a 500 without details, then uvicorn logs the
# traceback and closes the connection.
@app.exception_handler(Exception)
def internal_error(request: Request, exc: Exception):
    return JSONResponse({"error": "internal error"}, status_code=500)


if __name__ == "__main__":
    check_settings()
    try:
        uvicorn.run(
            app,
            host=os.environ.get("HOST", "127.0.0.1"),
            port=int(os.environ.get("PORT", "8000")),
            log_level="warning",
        )
    finally:
        pool.close()
