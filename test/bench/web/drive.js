// make bench-web's driver: autocannon against one route of app.js, on many
// keys or one hot key, and the CPU that each server process used meanwhile.
//
//   node drive.js URL ROUTE CONNECTIONS SECONDS many|hot APP_PID POSTMASTER_PID REDIS_PID
//
// Prints one JSON object: requests per second, p50 and p99 latency (ms),
// the answers by class, and the CPU seconds of the app, of PostgreSQL (every
// child of the postmaster: the backends, and the background processes,
// which idle) and of Redis, from /proc, over the run.
'use strict';

const fs = require('fs');
const autocannon = require('autocannon');

const [url, route, connText, secsText, keys, appPid, pmPid, redisPid] = process.argv.slice(2);
const connections = Number(connText);
const duration = Number(secsText);
if (!url || !route || !(connections > 0) || !(duration > 0) || !['many', 'hot'].includes(keys) ||
  ![appPid, pmPid, redisPid].every((p) => /^[0-9]+$/.test(p ?? ''))) {
  console.error('usage: node drive.js URL ROUTE CONNECTIONS SECONDS many|hot APP_PID POSTMASTER_PID REDIS_PID');
  process.exit(2);
}
const tick = Number(process.env.CLK_TCK ?? 100);
const manyKeys = 100000;

// user + system time of a process, in seconds (0 if it is gone)
function cpuOf(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / tick;
  } catch {
    return 0;
  }
}

// The postmaster's children now, and the CPU each used so far.
function pgCpu() {
  const m = new Map();
  for (const d of fs.readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (f[1] === pmPid) m.set(d, (Number(f[11]) + Number(f[12])) / tick);
    } catch {
      // gone meanwhile
    }
  }
  return m;
}

// What PostgreSQL's processes used between two looks: each process's
// growth, a new one's whole time; one that ended meanwhile (an autovacuum
// worker) is left out rather than counted negative.
function pgDelta(before, after) {
  let sum = 0;
  for (const [pid, t] of after) sum += t - (before.get(pid) ?? 0);
  return sum;
}

function sample() {
  return { app: cpuOf(appPid), pg: pgCpu(), redis: cpuOf(redisPid) };
}

async function main() {
  let n = 0;
  const opts = {
    url,
    connections,
    duration,
    requests: [{
      setupRequest: (req) => {
        const k = keys === 'hot' ? 'hot' : `k${(n++ * 7919) % manyKeys}`;
        return { ...req, path: `/${route}/${k}` };
      },
    }],
  };
  const before = sample();
  const r = await autocannon(opts);
  const after = sample();
  const total = r.requests.total;
  const out = {
    route,
    keys,
    connections,
    seconds: r.duration,
    rps: r.requests.average,
    total,
    p50: r.latency.p50,
    p99: r.latency.p99,
    ok: r['2xx'],
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
    cpu: {
      app: after.app - before.app,
      pg: pgDelta(before.pg, after.pg),
      redis: after.redis - before.redis,
    },
  };
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
