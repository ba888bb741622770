#!/usr/bin/env node
// counts.js: print headcount's channel counts through the official Pusher
// server SDK (signed requests to the httpapi): GET /channels, then
// GET /channels/{name}?info=subscription_count for each channel.
//
// Once by default; with --watch, one line a second until --max-seconds pass
// or SIGINT/SIGTERM. Exit 0 on success, 1 when a request fails (once mode),
// 2 on bad arguments.
'use strict';

const { parseArgs } = require('node:util');
const Pusher = require('./need')('pusher');

const USAGE = `usage: node counts.js [options]

  --host HOST          httpapi host (default 127.0.0.1)
  --port PORT          httpapi port (default 8080)
  --app-id ID          app id (default app-id)
  --key KEY            app key (default app-key)
  --secret SECRET      app secret (default app-secret)
  --prefix P           only channels starting with P (filter_by_prefix)
  --watch              print the counts every --interval seconds
  --interval S         seconds between two prints with --watch (default 1)
  --max-seconds S      stop watching after this long (default 300)
  --json               print one JSON object per line instead of text
  -h, --help           this text`;

function fail(msg) {
  process.stderr.write(`counts.js: ${msg}\n${USAGE}\n`);
  process.exit(2);
}

let opts;
try {
  opts = parseArgs({
    options: {
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '8080' },
      'app-id': { type: 'string', default: 'app-id' },
      key: { type: 'string', default: 'app-key' },
      secret: { type: 'string', default: 'app-secret' },
      prefix: { type: 'string' },
      watch: { type: 'boolean', default: false },
      interval: { type: 'string', default: '1' },
      'max-seconds': { type: 'string', default: '300' },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  }).values;
} catch (err) {
  fail(err.message);
}
if (opts.help) {
  process.stdout.write(USAGE + '\n');
  process.exit(0);
}

function positiveNumber(name) {
  const v = Number(opts[name]);
  if (!Number.isFinite(v) || v <= 0) fail(`--${name}: ${JSON.stringify(opts[name])} is not a positive number`);
  return v;
}
const port = Number(opts.port);
if (!Number.isInteger(port) || port < 1 || port > 65535) fail(`--port: ${JSON.stringify(opts.port)} is not a port`);
const interval = positiveNumber('interval');
const maxSeconds = positiveNumber('max-seconds');

const pusher = new Pusher({
  appId: opts['app-id'],
  key: opts.key,
  secret: opts.secret,
  host: opts.host,
  port,
  useTLS: false,
  timeout: 5000,
});

function describe(err) {
  if (err && err.status) return `HTTP ${err.status}: ${String(err.body || '').trim()}`;
  if (err && err.error && err.error.code) return `${err.error.code} from ${opts.host}:${port} (is httpapi running there?)`;
  if (err && err.error) return err.error.message || String(err.error);
  return (err && err.message) || String(err);
}

async function getJSON(path, params) {
  try {
    const res = await pusher.get({ path, params });
    return await res.json();
  } catch (err) {
    throw new Error(`GET /apps/${opts['app-id']}${path}: ${describe(err)}`);
  }
}

// snapshot returns {channel: subscription_count} sorted by name.
async function snapshot() {
  const params = {};
  if (opts.prefix) params.filter_by_prefix = opts.prefix;
  const list = await getJSON('/channels', params);
  const names = Object.keys((list && list.channels) || {}).sort();
  const infos = await Promise.all(
    names.map((name) => getJSON(`/channels/${encodeURIComponent(name)}`, { info: 'subscription_count' })),
  );
  const counts = {};
  names.forEach((name, i) => {
    const n = infos[i] && infos[i].subscription_count;
    counts[name] = typeof n === 'number' ? n : null;
  });
  return counts;
}

function total(counts) {
  return Object.values(counts).reduce((a, n) => a + (n || 0), 0);
}

function printOnce(counts) {
  if (opts.json) {
    process.stdout.write(JSON.stringify({ channels: counts, total: total(counts) }) + '\n');
    return;
  }
  const names = Object.keys(counts);
  if (names.length === 0) {
    process.stdout.write('no occupied channels\n');
    return;
  }
  const width = Math.max(7, ...names.map((n) => n.length));
  process.stdout.write(`${'channel'.padEnd(width)}  subscription_count\n`);
  for (const n of names) process.stdout.write(`${n.padEnd(width)}  ${counts[n]}\n`);
  process.stdout.write(`${'total'.padEnd(width)}  ${total(counts)}\n`);
}

function printLine(counts) {
  const time = new Date().toISOString().slice(11, 19);
  if (opts.json) {
    process.stdout.write(JSON.stringify({ time, channels: counts, total: total(counts) }) + '\n');
    return;
  }
  const parts = Object.entries(counts).map(([n, c]) => `${n}=${c}`);
  process.stdout.write(`${time}  total=${total(counts)}  ${parts.length ? parts.join(' ') : '(no occupied channels)'}\n`);
}

async function main() {
  if (!opts.watch) {
    try {
      printOnce(await snapshot());
      return 0;
    } catch (err) {
      process.stderr.write(`counts.js: ${err.message}\n`);
      return 1;
    }
  }
  let stopped = false;
  let wake = () => {};
  const onSignal = () => { stopped = true; wake(); };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const end = Date.now() + maxSeconds * 1000;
  while (!stopped && Date.now() < end) {
    const tick = Date.now();
    try {
      printLine(await snapshot());
    } catch (err) {
      const time = new Date().toISOString().slice(11, 19);
      process.stderr.write(`${time}  counts.js: ${err.message}\n`);
    }
    if (stopped) break;
    const wait = Math.max(0, Math.min(tick + interval * 1000, end) - Date.now());
    await new Promise((resolve) => {
      const t = setTimeout(resolve, wait);
      wake = () => { clearTimeout(t); resolve(); };
    });
  }
  return 0;
}

main().then((code) => process.exit(code));
