#!/usr/bin/env node
// resume.js: real pusher-js and Laravel Echo clients, each connecting with
// wsPath "/r/<its id>" (so it reconnects, by pusher-js's own reconnect, to
// the same path) and subscribed to the same public channels, recording
// every event they get, for test/e2e/resume_test.go.
//
// Stdout, one JSON object a line:
//   {"ready":N}                          once every client subscribed to every channel
//   {"c":"js-0","ch":"a","sub":T}        each subscription_succeeded (T: unix ms)
//   {"c":"js-0","ch":"a","seq":S}        each event "seq" (its data's seq)
// Events are bound before subscribing, so none is missed by the script.
// It runs until stdin (a pipe) closes, SIGTERM or --max-seconds, then
// disconnects and exits 0; exit 1 if not ready within --ready-seconds.
'use strict';

const { parseArgs } = require('node:util');
const Pusher = require('./need')('pusher-js');

const opts = parseArgs({
  options: {
    host: { type: 'string' },
    key: { type: 'string', default: 'app-key' },
    pusher: { type: 'string', default: '4' },
    echo: { type: 'string', default: '4' },
    channels: { type: 'string', default: 'resume-a,resume-b' },
    'ready-seconds': { type: 'string', default: '30' },
    'max-seconds': { type: 'string', default: '120' },
  },
  strict: true,
}).values;
const m = /^(.+):(\d{1,5})$/.exec(opts.host || '');
if (!m) {
  process.stderr.write('resume.js: --host host:port is required\n');
  process.exit(2);
}
const [host, port] = [m[1], Number(m[2])];
const channels = opts.channels.split(',').filter(Boolean);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const log = (s) => process.stderr.write(`resume.js: ${s}\n`);

// The options a page passes, the id in wsPath; Echo passes them through.
function options(id) {
  return {
    cluster: 'local', // required by pusher-js 8; unused with wsHost
    wsHost: host,
    wsPort: port,
    wsPath: `/r/${id}`,
    forceTLS: false,
    enabledTransports: ['ws'],
    enableStats: false,
  };
}

// A fresh id per page, as a page would keep in memory for its lifetime.
const pageId = (name) => `${name}-${process.pid}-${Math.random().toString(36).slice(2, 10)}`;

let pending = 0; // first subscriptions not yet succeeded
const firstSub = new Set();
function subscribed(name, ch) {
  out({ c: name, ch, sub: Date.now() });
  if (firstSub.has(`${name} ${ch}`)) return;
  firstSub.add(`${name} ${ch}`);
  if (--pending === 0) {
    clearTimeout(readyTimer);
    out({ ready: firstSub.size / channels.length });
  }
}

const closers = [];
let Echo = null;

async function main() {
  const nPusher = Number(opts.pusher);
  const nEcho = Number(opts.echo);
  pending = (nPusher + nEcho) * channels.length;
  for (let i = 0; i < nPusher; i++) {
    const name = `js-${i}`;
    const p = new Pusher(opts.key, options(pageId(name)));
    for (const ch of channels) {
      const c = p.subscribe(ch);
      c.bind('seq', (d) => out({ c: name, ch, seq: d.seq }));
      c.bind('headcount:resume_failed', (d) => out({ c: name, ch, failed: d }));
      c.bind('pusher:subscription_succeeded', () => subscribed(name, ch));
    }
    closers.push(() => p.disconnect());
  }
  if (nEcho > 0) Echo = (await import('laravel-echo')).default; // an ES module
  for (let i = 0; i < nEcho; i++) {
    const name = `echo-${i}`;
    const e = new Echo({ broadcaster: 'pusher', Pusher, key: opts.key, ...options(pageId(name)) });
    for (const ch of channels) {
      // ".seq": the event's own name, not under Echo's App\Events namespace.
      e.channel(ch).listen('.seq', (d) => out({ c: name, ch, seq: d.seq }))
        .listen('.headcount:resume_failed', (d) => out({ c: name, ch, failed: d }))
        .subscribed(() => subscribed(name, ch));
    }
    closers.push(() => e.disconnect());
  }
}

const readyTimer = setTimeout(() => {
  log(`not ready after ${opts['ready-seconds']} s: ${pending} subscriptions pending`);
  stop(1);
}, Number(opts['ready-seconds']) * 1000);
const maxTimer = setTimeout(() => stop(0), Number(opts['max-seconds']) * 1000);

let stopping = false;
function stop(code) {
  if (stopping) return;
  stopping = true;
  clearTimeout(readyTimer);
  clearTimeout(maxTimer);
  for (const c of closers) c();
  setTimeout(() => process.exit(code), 100);
}
process.stdin.on('end', () => stop(0));
process.stdin.on('error', () => stop(0));
process.stdin.resume();
process.on('SIGTERM', () => stop(0));
main().catch((err) => {
  log(`failed: ${err && err.stack}`);
  stop(1);
});
