// make bench-web: one Express app, every route limited by one of three
// limiters that share one Redis, so that they can be compared request for
// request. The limit never binds (RL_LIMIT is far above what a run sends):
// what is measured is what limiting costs, not how many are refused.
//
//   GET /none/:k        no limiting
//   GET /sw/:k          slidewin: rl_attempt and rl_headers, one prepared
//                       statement
//   GET /rlf/:k         rate-limiter-flexible's RateLimiterRedis (ioredis)
//   GET /erl/:k         express-rate-limit with rate-limit-redis (ioredis)
//   GET /row/:k         one row by primary key, no limiting
//   GET /sw-row/:k      slidewin: the row, rl_attempt and rl_headers in one
//                       prepared statement
//   GET /rlf-row/:k     rate-limiter-flexible, then the row
//   GET /erl-row/:k     express-rate-limit, then the row
//   GET /swb-row/:k     as /sw-row, on connections that turn local batches
//                       on (slidewin.local_batch = 1000, local_batch_time =
//                       20 ms): a hot key's admissions come from the
//                       server's shared memory, without a round trip to Redis
//   GET /swf-row/:k     as /sw-row, with algorithm => 'fixed_window': the
//                       algorithm both peers use (a counter per window), in
//                       place of slidewin's default exact log
//   GET /ping-row/:k    the ceiling: the row and one round trip to Redis
//                       that does nothing (PING, by bench_redis_ping, which
//                       web.sh builds from redis_ping.c) in one prepared
//                       statement of /sw-row's shape, with headers of the
//                       same size as a constant: what a limiter asked from
//                       inside the statement costs at the least
//
// :k is the key the limit is counted under (the tenant); the row read is
// items.id = hash of k modulo the table's rows. Each answer carries the
// limiter's own headers, as the libraries set them by default or as
// slidewin's rl_headers gives them.
//
// Environment: PG* (node-postgres reads them as libpq would), REDIS_PORT,
// PORT (the app's), POOL (connections to each server, default 16),
// RL_LIMIT (default 1000000000), RL_WINDOW_S (default 60), ITEMS (rows in
// items, default 10000).
'use strict';

const express = require('express');
const { Pool } = require('pg');
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const { rateLimit } = require('express-rate-limit');
const { RedisStore } = require('rate-limit-redis');

const env = (name, dflt) => {
  const v = process.env[name] ?? String(dflt);
  if (!/^[0-9]+$/.test(v)) {
    console.error(`app.js: ${name} must be a whole number, not '${v}'`);
    process.exit(2);
  }
  return Number(v);
};
const port = env('PORT', 3000);
const redisPort = env('REDIS_PORT', 6379);
const poolSize = env('POOL', 16);
const limit = env('RL_LIMIT', 1000000000);
const windowS = env('RL_WINDOW_S', 60);
const items = env('ITEMS', 10000);

const pool = new Pool({ max: poolSize });
pool.on('error', (err) => console.error('idle database connection failed:', err.message));
const batchPool = new Pool({
  max: poolSize,
  options: '-c slidewin.local_batch=1000 -c slidewin.local_batch_time=20ms',
});
batchPool.on('error', (err) => console.error('idle database connection failed:', err.message));
const redis = new Redis({ host: '127.0.0.1', port: redisPort, enableOfflineQueue: true });
redis.on('error', (err) => console.error('redis:', err.message));

// The row a key reads: a stable hash of the key, so that many keys spread
// over the table and one hot key reads one row.
function rowOf(k) {
  let h = 0;
  for (let i = 0; i < k.length; i++) h = (h * 31 + k.charCodeAt(i)) >>> 0;
  return 1 + (h % items);
}

// Named statements: node-postgres prepares each once per connection.
const swSql = {
  name: 'sw',
  text: `SELECT r.allowed, rl_headers(r, 'bench') AS headers
           FROM rl_attempt($1, $2::bigint, $3::interval) AS r`,
};
const swRowSql = {
  name: 'sw_row',
  text: `SELECT r.allowed, rl_headers(r, 'bench') AS headers, i.id, i.payload
           FROM rl_attempt($1, $2::bigint, $3::interval) AS r
           LEFT JOIN items AS i ON r.allowed AND i.id = $4`,
};
const swfRowSql = {
  name: 'swf_row',
  text: `SELECT r.allowed, rl_headers(r, 'bench') AS headers, i.id, i.payload
           FROM rl_attempt($1, $2::bigint, $3::interval, algorithm => 'fixed_window') AS r
           LEFT JOIN items AS i ON r.allowed AND i.id = $4`,
};
// The five header fields rl_headers gives, as a constant jsonb of the same
// size, so that the app's work on /ping-row is what it is on /sw-row.
const pingHeaders = JSON.stringify({
  RateLimit: `"bench";r=${limit - 1};t=${windowS}`,
  'RateLimit-Policy': `"bench";q=${limit};w=${windowS}`,
  'X-RateLimit-Limit': String(limit),
  'X-RateLimit-Remaining': String(limit - 1),
  'X-RateLimit-Reset': String(Math.floor(Date.now() / 1000) + windowS),
}).replace(/'/g, "''");
const pingRowSql = {
  name: 'ping_row',
  text: `SELECT p AS allowed, '${pingHeaders}'::jsonb AS headers, i.id, i.payload
           FROM bench_redis_ping($1) AS p
           LEFT JOIN items AS i ON p AND i.id = $2`,
};
const rowSql = { name: 'row', text: 'SELECT id, payload FROM items WHERE id = $1' };
const windowText = `${windowS} seconds`;

const rlf = new RateLimiterRedis({
  storeClient: redis,
  keyPrefix: 'bench-rlf',
  points: limit,
  duration: windowS,
});

function erl(prefix) {
  return rateLimit({
    windowMs: windowS * 1000,
    limit,
    standardHeaders: 'draft-8',
    legacyHeaders: false,
    keyGenerator: (req) => req.params.k,
    store: new RedisStore({
      prefix,
      sendCommand: (command, ...args) => redis.call(command, ...args),
    }),
  });
}

const app = express();
app.disable('x-powered-by');
app.disable('etag');

const fail = (res, err) => res.status(500).json({ error: err.message });

async function readRow(k, res) {
  const { rows } = await pool.query({ ...rowSql, values: [rowOf(k)] });
  res.json(rows[0] ?? null);
}

app.get('/none/:k', (req, res) => res.json({ ok: true }));

app.get('/row/:k', (req, res) => readRow(req.params.k, res).catch((e) => fail(res, e)));

async function slidewin(req, res, withRow, batched = false, fixed = false) {
  const k = `${batched ? 'bench-swb' : fixed ? 'bench-swf' : 'bench-sw'}:${req.params.k}`;
  const q = withRow
    ? { ...(fixed ? swfRowSql : swRowSql), values: [k, limit, windowText, rowOf(req.params.k)] }
    : { ...swSql, values: [k, limit, windowText] };
  const { rows } = await (batched ? batchPool : pool).query(q);
  answer(res, rows[0], withRow);
}
// The answer of a route whose statement returned allowed, headers and (with
// the row) id and payload.
function answer(res, r, withRow) {
  res.set(r.headers);
  if (!r.allowed) {
    res.status(429).json({ error: 'too many requests' });
    return;
  }
  res.json(withRow ? { id: r.id, payload: r.payload } : { ok: true });
}
app.get('/sw/:k', (req, res) => slidewin(req, res, false).catch((e) => fail(res, e)));
app.get('/sw-row/:k', (req, res) => slidewin(req, res, true).catch((e) => fail(res, e)));
app.get('/swb-row/:k', (req, res) => slidewin(req, res, true, true).catch((e) => fail(res, e)));
app.get('/swf-row/:k', (req, res) => slidewin(req, res, true, false, true).catch((e) => fail(res, e)));

async function pingRow(req, res) {
  const { rows } = await pool.query({ ...pingRowSql, values: [redisPort, rowOf(req.params.k)] });
  answer(res, rows[0], true);
}
app.get('/ping-row/:k', (req, res) => pingRow(req, res).catch((e) => fail(res, e)));

// rate-limiter-flexible: consume() resolves when admitted and rejects with
// the limiter's result when not (or with an Error when Redis failed).
async function flexible(req, res, withRow) {
  let r;
  try {
    r = await rlf.consume(req.params.k);
  } catch (rej) {
    if (rej instanceof Error) throw rej;
    res.set('Retry-After', String(Math.ceil(rej.msBeforeNext / 1000)));
    res.status(429).json({ error: 'too many requests' });
    return;
  }
  res.set('X-RateLimit-Remaining', String(r.remainingPoints));
  if (withRow) await readRow(req.params.k, res);
  else res.json({ ok: true });
}
app.get('/rlf/:k', (req, res) => flexible(req, res, false).catch((e) => fail(res, e)));
app.get('/rlf-row/:k', (req, res) => flexible(req, res, true).catch((e) => fail(res, e)));

app.get('/erl/:k', erl('bench-erl:'), (req, res) => res.json({ ok: true }));
app.get('/erl-row/:k', erl('bench-erl-row:'),
  (req, res) => readRow(req.params.k, res).catch((e) => fail(res, e)));

const server = app.listen(port, '127.0.0.1', () => console.log(`listening on ${port}`));
const stop = () => server.close(() => Promise.allSettled([pool.end(), batchPool.end(), redis.quit()]).then(() => process.exit(0)));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
