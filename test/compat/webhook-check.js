#!/usr/bin/env node
// webhook-check.js: validates recorded webhook requests with the `pusher`
// Node SDK's own check (WebHook.isValid: exact Content-Type
// application/json, X-Pusher-Key, X-Pusher-Signature over the raw body).
// Used by test/e2e/webhook_test.go.
//
// Usage: node webhook-check.js <app_id> <key> <secret> < requests.jsonl
//   each input line: {"headers": {"content-type": ..., "x-pusher-key": ...,
//   "x-pusher-signature": ...}, "body": "<raw body>"}
// Prints one line per request: "ok <event names>" or "invalid <why>", and
// exits 1 if any request is invalid.
'use strict';

const readline = require('node:readline');
const Pusher = require('pusher');

const [appId, key, secret] = process.argv.slice(2);
if (!secret) {
  console.error('usage: node webhook-check.js <app_id> <key> <secret> < requests.jsonl');
  process.exit(2);
}
const pusher = new Pusher({ appId, key, secret });
let bad = 0;
const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  if (!line.trim()) return;
  const { headers, body } = JSON.parse(line);
  const hook = pusher.webhook({ headers, rawBody: body });
  if (!hook.isValid()) {
    bad++;
    console.log(`invalid content-type=${headers['content-type']} key=${headers['x-pusher-key']} body=${body}`);
    return;
  }
  console.log(`ok ${hook.getEvents().map((e) => e.name).join(',')}`);
});
rl.on('close', () => process.exit(bad ? 1 : 0));
