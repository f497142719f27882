// slidewin in an express app: GET /api/hello is limited per tenant by one
// call to rl_attempt, and every answer, 200 or 429, carries the headers that
// rl_headers builds from that call's result.
//
// Configuration, all from the environment:
//   PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD ...  the database, read by
//                   node-postgres itself as libpq would
//   PORT            the port to listen on (default 3000); HOST (default 127.0.0.1)
//   RL_LIMIT        units per window (default 60)
//   RL_WINDOW       the window, as a PostgreSQL interval (default '1 minute')
//   RL_KEY_PREFIX   prepended to the tenant to make the key (default 'hello:')
'use strict';

const express = require('express');
const { Pool } = require('pg');

const limit = Number(process.env.RL_LIMIT ?? 60);
const windowText = process.env.RL_WINDOW ?? '1 minute';
const keyPrefix = process.env.RL_KEY_PREFIX ?? 'hello:';
const port = Number(process.env.PORT ?? 3000);
const host = process.env.HOST ?? '127.0.0.1';

if (!Number.isSafeInteger(limit) || limit < 1) {
  console.error(`RL_LIMIT must be a positive integer, not ${process.env.RL_LIMIT}`);
  process.exit(2);
}

// One pool for the process; with no arguments it connects as the PG*
// variables say.
const pool = new Pool({ max: 10 });
pool.on('error', (err) => console.error('idle database connection failed:', err.message));

// One statement, one round trip: the decision and its headers together.
// The conversions happen in SQL: node-postgres would hand over the bigint
// columns of rl_result as strings and retry_after as an interval object,
// whereas rl_headers gives jsonb whose values are the header strings already
// (node-postgres parses jsonb into an object). The window goes in as text and
// PostgreSQL casts it, so '1 hour' and '00:01:00' both work.
// Parameters travel in an unnamed statement, which PgBouncer passes in
// transaction mode (see doc/poolers.md).
const attemptSql = `
  SELECT r.allowed, rl_headers(r, 'hello') AS headers
    FROM rl_attempt($1, $2::bigint, $3::interval) AS r`;

const app = express();
app.disable('x-powered-by');

app.get('/api/hello', async (req, res) => {
  // Taken from a header (or ?tenant=) to keep the example short. A real API
  // takes it from what it authenticated (an API key, a token's subject), or
  // a client picks its own quota.
  const tenant = req.get('X-Tenant') ?? req.query.tenant;
  if (typeof tenant !== 'string' || tenant === '' || tenant.length > 100) {
    res.status(400).json({ error: 'say who you are in the X-Tenant header' });
    return;
  }

  const { rows } = await pool.query(attemptSql, [keyPrefix + tenant, limit, windowText]);
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
