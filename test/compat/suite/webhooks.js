// webhooks.js: the webhook receiver of the compatibility suite's webhook app
// (HC_HOOKS_APP_ID, _KEY, _SECRET), listening on HC_HOOKS_ADDR, where the
// apps file written by test/e2e/compat_test.go points its webhook: batched
// (HC_HOOKS_BATCH_SIZE events at most per request), with the header
// X-Hook-Token: HC_HOOKS_TOKEN, filtered to channels starting with
// HC_HOOKS_PREFIX. Every request is checked with the `pusher` Node SDK's
// own validation (pusher.webhook(...).isValid()).
'use strict';

const http = require('node:http');
const { setTimeout: delay } = require('node:timers/promises');
const PusherServer = require('pusher');

function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run the suite through test/e2e (go test -run TestPusherJSCompat ./test/e2e/)`);
  return v;
}

const hooksApp = { id: env('HC_HOOKS_APP_ID'), key: env('HC_HOOKS_APP_KEY'), secret: env('HC_HOOKS_APP_SECRET') };
const batchSize = Number(env('HC_HOOKS_BATCH_SIZE'));
const token = env('HC_HOOKS_TOKEN');
const prefix = env('HC_HOOKS_PREFIX');
const sdk = new PusherServer({ appId: hooksApp.id, key: hooksApp.key, secret: hooksApp.secret });

// Receiver records every request: {valid, events: ["name channel [user_id] [event data]"], token}.
class Receiver {
  constructor() {
    this.requests = [];
    this.server = http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const rawBody = Buffer.concat(chunks).toString('utf8');
        const hook = sdk.webhook({ headers: req.headers, rawBody });
        const valid = hook.isValid();
        const events = valid
          ? hook.getEvents().map((e) => [e.name, e.channel, e.user_id, e.event, e.data].filter((x) => x !== undefined && x !== '').join(' '))
          : [];
        this.requests.push({ valid, events, token: req.headers['x-hook-token'], body: rawBody });
        res.writeHead(valid ? 200 : 400).end();
      });
    });
  }

  listen() {
    const m = /^(.+):(\d+)$/.exec(env('HC_HOOKS_ADDR'));
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(Number(m[2]), m[1], resolve);
    });
  }

  close() {
    this.server.closeAllConnections();
    this.server.close();
  }

  // events lists every event received, in arrival order.
  events() {
    return this.requests.flatMap((r) => r.events);
  }

  // waitFor polls every 20 ms until every event in want was received, and
  // throws with what was received after ms.
  async waitFor(want, ms) {
    const deadline = Date.now() + ms;
    for (;;) {
      const invalid = this.requests.filter((r) => !r.valid);
      if (invalid.length) throw new Error(`the Node SDK refused webhook requests: ${invalid.map((r) => r.body).join(' | ')}`);
      const got = this.events();
      const missing = want.filter((w) => !got.includes(w));
      if (!missing.length) return got;
      if (Date.now() >= deadline) throw new Error(`webhooks missing after ${ms} ms: ${JSON.stringify(missing)}; received ${JSON.stringify(got)}`);
      await delay(20);
    }
  }
}

module.exports = { hooksApp, batchSize, token, prefix, Receiver };
