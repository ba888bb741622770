#!/usr/bin/env node
// clients.js: connect N real pusher-js clients to headcount wsnodes and keep
// them subscribed.
//
// Prints exactly one JSON line {"ready":N} on stdout once every client has
// pusher:subscription_succeeded for every channel, then stays connected until
// stdin closes (when stdin is a pipe), SIGTERM or SIGINT, or --max-seconds
// pass; then it disconnects every client and exits 0. Diagnostics go to
// stderr. Exit 1 when the clients are not all subscribed within
// --ready-seconds, 2 on bad arguments.
'use strict';

const { parseArgs } = require('node:util');
const fs = require('node:fs');
const Pusher = require('./need')('pusher-js');

const USAGE = `usage: node clients.js [options]

  --hosts h:p,h:p      wsnode addresses, clients are spread round-robin
                       (default 127.0.0.1:6001)
  --key KEY            app key (default app-key)
  --clients N          number of clients (default 10)
  --channels a,b       public channels every client subscribes to (default demo)
  --ready-seconds S    give up (exit 1) if not all subscribed by then (default 30)
  --max-seconds S      disconnect and exit 0 after this long, whatever happens
                       (default 120)
  --verbose            log pusher-js internals to stderr
  -h, --help           this text

Prints {"ready":N} on stdout once all N clients are subscribed to all channels.
Stops on SIGTERM/SIGINT, when stdin (a pipe) closes, or after --max-seconds.`;

function fail(msg) {
  process.stderr.write(`clients.js: ${msg}\n${USAGE}\n`);
  process.exit(2);
}

let opts;
try {
  opts = parseArgs({
    options: {
      hosts: { type: 'string', default: '127.0.0.1:6001' },
      key: { type: 'string', default: 'app-key' },
      clients: { type: 'string', default: '10' },
      channels: { type: 'string', default: 'demo' },
      'ready-seconds': { type: 'string', default: '30' },
      'max-seconds': { type: 'string', default: '120' },
      verbose: { type: 'boolean', default: false },
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

function positiveNumber(name, integer) {
  const v = Number(opts[name]);
  if (!Number.isFinite(v) || v <= 0 || (integer && !Number.isInteger(v))) {
    fail(`--${name}: ${JSON.stringify(opts[name])} is not a positive ${integer ? 'integer' : 'number'}`);
  }
  return v;
}

const nClients = positiveNumber('clients', true);
const readySeconds = positiveNumber('ready-seconds', false);
const maxSeconds = positiveNumber('max-seconds', false);
const channels = opts.channels.split(',').map((s) => s.trim()).filter(Boolean);
if (channels.length === 0) fail('--channels: give at least one channel');
const hosts = opts.hosts.split(',').map((s) => s.trim()).filter(Boolean).map((hp) => {
  const m = /^(.+):(\d{1,5})$/.exec(hp);
  if (!m || Number(m[2]) < 1 || Number(m[2]) > 65535) fail(`--hosts: ${JSON.stringify(hp)} is not host:port`);
  return { host: m[1].replace(/^\[(.*)\]$/, '$1'), port: Number(m[2]) };
});
if (hosts.length === 0) fail('--hosts: give at least one host:port');

function log(msg) {
  process.stderr.write(`clients.js: ${msg}\n`);
}

if (opts.verbose) {
  Pusher.logToConsole = true;
  Pusher.log = (m) => process.stderr.write(`pusher-js: ${m}\n`);
}

const clients = [];
let pending = nClients * channels.length; // subscriptions not yet succeeded
let stopping = false;

for (let i = 0; i < nClients; i++) {
  const { host, port } = hosts[i % hosts.length];
  const pusher = new Pusher(opts.key, {
    cluster: 'local', // required by pusher-js 8; unused because wsHost is set
    wsHost: host,
    wsPort: port,
    forceTLS: false,
    enabledTransports: ['ws'],
    enableStats: false,
  });
  const seen = new Set();
  pusher.connection.bind('error', (err) => {
    if (!stopping) log(`client ${i} (${host}:${port}): connection error: ${JSON.stringify(err && (err.error || err))}`);
  });
  pusher.connection.bind('state_change', (s) => {
    if (opts.verbose || (!stopping && (s.current === 'unavailable' || s.current === 'failed'))) {
      log(`client ${i} (${host}:${port}): ${s.previous} -> ${s.current}`);
    }
  });
  for (const name of channels) {
    const ch = pusher.subscribe(name);
    ch.bind('pusher:subscription_succeeded', () => {
      // pusher-js resubscribes after a reconnect; count each pair once.
      if (seen.has(name)) return;
      seen.add(name);
      pending--;
      if (pending === 0) onReady();
    });
    ch.bind('pusher:subscription_error', (err) => {
      log(`client ${i} (${host}:${port}): subscription to ${name} failed: ${JSON.stringify(err)}`);
    });
  }
  clients.push(pusher);
}

const readyTimer = setTimeout(() => {
  log(`not ready after ${readySeconds}s: ${pending} of ${nClients * channels.length} subscriptions pending`);
  stop(1);
}, readySeconds * 1000);

const maxTimer = setTimeout(() => {
  log(`--max-seconds ${maxSeconds} reached, disconnecting`);
  stop(0);
}, maxSeconds * 1000);

function onReady() {
  clearTimeout(readyTimer);
  process.stdout.write(JSON.stringify({ ready: nClients }) + '\n');
}

// Stop when stdin closes, but only if it is a pipe or socket (a test harness
// holding it open): a terminal or /dev/null would stop us at the wrong time.
let stdinStat = null;
try {
  stdinStat = fs.fstatSync(0);
} catch (_) {
  // no stdin at all
}
if (stdinStat && (stdinStat.isFIFO() || stdinStat.isSocket())) {
  process.stdin.on('data', () => {});
  process.stdin.on('end', () => stop(0));
  process.stdin.on('error', () => stop(0));
  process.stdin.resume();
}

process.on('SIGTERM', () => stop(0));
process.on('SIGINT', () => stop(0));

function stop(code) {
  if (stopping) return;
  stopping = true;
  clearTimeout(readyTimer);
  clearTimeout(maxTimer);
  for (const p of clients) p.disconnect();
  // Give the close frames a moment to go out (at least 100 ms, at most 2 s).
  const start = Date.now();
  const check = setInterval(() => {
    const open = clients.filter((p) => !['disconnected', 'failed', 'unavailable'].includes(p.connection.state));
    const waited = Date.now() - start;
    if ((open.length === 0 && waited >= 100) || waited >= 2000) {
      clearInterval(check);
      process.exit(code);
    }
  }, 20);
}
