// slidewin in an express app. Two routes, both limited per tenant by one
// statement each, and every answer, 200, 404 or 429, carries the headers that
// rl_headers builds from that statement's result:
//
//   GET /api/hello        rl_attempt alone
//   GET /api/items/:id    rl_attempt and the item's row in the same statement:
//                         the limit costs no round trip of its own
//
// Configuration, all from the environment:
//   PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD ...  the database, read by
//                   node-postgres itself as libpq would
//   PORT            the port to listen on (default 3000); HOST (default 127.0.0.1)
//   RL_LIMIT        units per window (default 60)
//   RL_WINDOW       the window, as a PostgreSQL interval (default '1 minute')
//   RL_KEY_PREFIX   prepended to the tenant to make the key (default 'express:')
//
// At start-up the app asks the database whether RL_WINDOW is an interval and
// whether slidewin accepts RL_LIMIT and RL_WINDOW, and exits with status 2
// and the reason if not.
'use strict';

const express = require('express');
const { Pool } = require('pg');

const limitText = process.env.RL_LIMIT ?? '60';
const limit = /^[0-9]+$/.test(limitText) ? Number(limitText) : NaN;
const windowText = process.env.RL_WINDOW ?? '1 minute';
const keyPrefix = process.env.RL_KEY_PREFIX ?? 'express:';
const port = Number(process.env.PORT ?? 3000);
const host = process.env.HOST ?? '127.0.0.1';
// The name of the policy in the RateLimit and RateLimit-Policy headers.
const policy = 'express';

function refuse(reason) {
  console.error(`app.js: not starting: ${reason}`);
  process.exit(2);
}

if (!Number.isSafeInteger(limit) || limit < 1) {
  refuse(`RL_LIMIT must be a positive whole number, not '${limitText}'`);
}

// One pool for the process; with no arguments it connects as the PG*
// variables say.
const pool = new Pool({ max: 10 });
pool.on('error', (err) => console.error('idle database connection failed:', err.message));

// Refuse to start on settings that would fail every request.
async function checkSettings() {
  try {
    await pool.query('SELECT $1::interval', [windowText]);
  } catch (err) {
    // a PostgreSQL error has a SQLSTATE of five characters, a failed
    // connection a code such as ECONNREFUSED
    if (!/^[0-9A-Z]{5}$/.test(err.code ?? '')) {
      refuse(`cannot connect to the database: ${err.message}`);
    }
    refuse(`RL_WINDOW='${windowText}' is not a PostgreSQL interval: ${err.message}`);
  }
  try {
    // slidewin's own check of lim and win, without counting anything
    await pool.query('SELECT rl_peek($1, $2::bigint, $3::interval)',
      [`${keyPrefix}start-up check`, limit, windowText]);
  } catch (err) {
    if (err.code === '42883') {
      refuse('the database has no slidewin: run CREATE EXTENSION slidewin there');
    }
    refuse(`slidewin refuses RL_LIMIT=${limit} RL_WINDOW='${windowText}': ${err.message}`);
  }
}

// One statement, one round trip: the decision and its headers together.
// The conversions happen in SQL: node-postgres would hand over the bigint
// columns of rl_result as strings and retry_after as an interval object,
// whereas rl_headers gives jsonb whose values are the header strings already
// (node-postgres parses jsonb into an object). The window goes in as text and
// PostgreSQL casts it, so '1 hour' and '00:01:00' both work.
// Parameters travel in an unnamed statement, which PgBouncer passes in
// transaction mode (see doc/poolers.md).
const attemptSql = `
  SELECT r.allowed, rl_headers(r, $1) AS headers
    FROM rl_attempt($2, $3::bigint, $4::interval) AS r`;

// The limit and the row in one statement, so the limit costs no round trip of
// its own: rl_attempt runs once, and the join condition lets the row through
// only when the call is admitted, so a denied client gets no data. A missing
// item still spends its unit: the client asked.
const itemSql = `
  SELECT r.allowed, rl_headers(r, $1) AS headers, i.id, i.name
    FROM rl_attempt($2, $3::bigint, $4::interval) AS r
    LEFT JOIN items AS i ON r.allowed AND i.id = $5`;

const app = express();
app.disable('x-powered-by');

// Taken from a header (or ?tenant=) to keep the example short. A real API
// takes it from what it authenticated (an API key, a token's subject), or
// a client picks its own quota.
function tenantOf(req, res) {
  const tenant = req.get('X-Tenant') ?? req.query.tenant;
  if (typeof tenant !== 'string' || tenant === '' || tenant.length > 100) {
    res.status(400).json({ error: 'say who you are in the X-Tenant header' });
    return null;
  }
  return tenant;
}

app.get('/api/hello', async (req, res) => {
  const tenant = tenantOf(req, res);
  if (tenant === null) return;

  const { rows } = await pool.query(attemptSql, [policy, keyPrefix + tenant, limit, windowText]);
  const { allowed, headers } = rows[0];

  // On both answers: clients can pace themselves before they are refused.
  res.set(headers);
  if (!allowed) {
    // Retry-After is among the headers; the body does not name the key.
    res.status(429).json({ error: 'too many requests' });
    return;
  }
  res.json({ hello: tenant });
});

app.get('/api/items/:id', async (req, res) => {
  const tenant = tenantOf(req, res);
  if (tenant === null) return;
  if (!/^[0-9]{1,9}$/.test(req.params.id)) {
    res.status(400).json({ error: 'an item id is a whole number' });
    return;
  }

  const { rows } = await pool.query(itemSql,
    [policy, keyPrefix + tenant, limit, windowText, Number(req.params.id)]);
  const { allowed, headers, id, name } = rows[0];

  res.set(headers);
  if (!allowed) {
    res.status(429).json({ error: 'too many requests' });
  } else if (id === null) {
    res.status(404).json({ error: 'no such item' });
  } else {
    res.json({ id, name });
  }
});

// Express 5 sends a rejected promise of a route here. The client learns only
// that something failed; the details (which may name the key) go to the log.
app.use((err, req, res, next) => {
  console.error(`${req.method} ${req.path} failed:`, err.message);
  if (res.headersSent) {
    next(err);
    return;
  }
  res.status(500).json({ error: 'internal error' });
});

checkSettings().then(() => {
  const server = app.listen(port, host, () => {
    console.log(`listening on http://${host}:${server.address().port}`);
  });

  // Stop cleanly on SIGTERM or SIGINT: finish the requests in flight, then
  // close the database connections. (Node 19 and later close idle keep-alive
  // connections in server.close themselves; Node 18 waits for them unless told.)
  for (const signal of ['SIGTERM', 'SIGINT']) {
    process.on(signal, () => {
      server.close(() => pool.end().then(() => process.exit(0)));
      server.closeIdleConnections();
    });
  }
});
