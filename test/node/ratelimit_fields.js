// ratelimit_fields.js NODE_MODULES: parse the RateLimit and RateLimit-Policy
// fields of HTTP answers as Structured Field Values (RFC 9651), with the
// structured-headers package (a devDependency of examples/express, found in
// the node_modules directory given), and check them against
// draft-ietf-httpapi-ratelimit-headers-11:
//
//   RateLimit-Policy  a List of Items, each a String (the policy's name)
//                     with q (quota, Integer >= 0, required), w (window,
//                     Integer >= 0), qu (quota unit, String), pk (partition
//                     key, Byte Sequence)
//   RateLimit         a List of Items, each a String naming a policy of
//                     RateLimit-Policy, with r (remaining, Integer >= 0,
//                     required), t (Integer >= 0), pk (Byte Sequence)
//
// Any other parameter, an Inner List, a repeated policy name, a parse error
// or a field not in RFC 9651's canonical serialization (which the parser's
// numbers cannot tell from a Decimal otherwise) is an error. Reads a JSON array of answers on stdin, each an object that
// may hold "ratelimit" and "ratelimit-policy" (a field's value, its lines
// joined by ", "), and writes a JSON array of the same length: per answer
// { ratelimit: [{name, r, t, pk}], policy: [{name, q, w, qu, pk}] }, absent
// fields as null. Exits 1, printing every error, if any answer has one.
'use strict';

const path = require('path');
const { createRequire } = require('module');

const modules = process.argv[2];
if (!modules) {
  console.error('usage: node ratelimit_fields.js NODE_MODULES < answers.json');
  process.exit(2);
}
const sh = createRequire(path.join(path.resolve(modules), 'x.js'))('structured-headers');

const spec = {
  'ratelimit-policy': { required: 'q', ints: ['q', 'w'], strings: ['qu'] },
  ratelimit: { required: 'r', ints: ['r', 't'], strings: [] },
};

function parseField(field, value) {
  const { required, ints, strings } = spec[field];
  const list = sh.parseList(value); // throws on anything that is not a List
  // The parser gives an Integer and a Decimal alike as a number (t=6.0 as
  // 6): serialized again, the field must read as it came, which holds for
  // what a server emits in RFC 9651's canonical form and fails on a Decimal.
  const again = sh.serializeList(list);
  if (again !== value) throw new Error(`${field} is not in canonical form, which reads ${again}`);
  const seen = new Set();
  return list.map(([item, params], i) => {
    const where = `${field} member ${i + 1}`;
    if (Array.isArray(item)) throw new Error(`${where} is an Inner List, not an Item`);
    if (typeof item !== 'string') throw new Error(`${where} is not a String: ${String(item)}`);
    if (seen.has(item)) throw new Error(`${where}: policy "${item}" named twice`);
    seen.add(item);
    const out = { name: item };
    for (const [k, v] of params) {
      if (ints.includes(k)) {
        if (!Number.isInteger(v) || v < 0) throw new Error(`${where}: ${k} is not an Integer >= 0: ${v}`);
      } else if (strings.includes(k)) {
        if (typeof v !== 'string') throw new Error(`${where}: ${k} is not a String`);
      } else if (k === 'pk') {
        if (!(v instanceof ArrayBuffer)) throw new Error(`${where}: pk is not a Byte Sequence`);
        out.pk = sh.arrayBufferToBase64(v);
        continue;
      } else {
        throw new Error(`${where}: unknown parameter ${k}`);
      }
      out[k] = v;
    }
    if (!(required in out)) throw new Error(`${where}: no ${required} parameter`);
    return out;
  });
}

let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (d) => { input += d; });
process.stdin.on('end', () => {
  const answers = JSON.parse(input);
  const errors = [];
  const result = answers.map((a, n) => {
    const parsed = { ratelimit: null, policy: null };
    try {
      if (a['ratelimit-policy'] != null) parsed.policy = parseField('ratelimit-policy', a['ratelimit-policy']);
      if (a.ratelimit != null) parsed.ratelimit = parseField('ratelimit', a.ratelimit);
      const names = new Set((parsed.policy ?? []).map((p) => p.name));
      for (const rl of parsed.ratelimit ?? []) {
        if (!names.has(rl.name)) throw new Error(`ratelimit names policy "${rl.name}", which RateLimit-Policy does not`);
      }
    } catch (e) {
      errors.push(`answer ${n + 1}: ${e.message} (RateLimit: ${a.ratelimit}; RateLimit-Policy: ${a['ratelimit-policy']})`);
    }
    return parsed;
  });
  process.stdout.write(JSON.stringify(result) + '\n');
  if (errors.length) {
    console.error(errors.join('\n'));
    process.exit(1);
  }
});
