// An app's limits from soketi's settings, and its allowed origins. The app
// (HC_LIMITS_APP_ID, _KEY, _SECRET) allows 2 client events per second per
// socket, 5 published events and 3 read requests per second through the HTTP
// API across replicas, channel names of 40 bytes, and browser origins
// https://good.example and *.good.example.
'use strict';

const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const crypto = require('node:crypto');
const PusherServer = require('pusher');
const { A, B, hosts, Client, closeAll, uid, waitUntil } = require('./lib');

function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run the suite through test/e2e (go test -run TestPusherJSCompat ./test/e2e/)`);
  return v;
}

const limits = { id: env('HC_LIMITS_APP_ID'), key: env('HC_LIMITS_APP_KEY'), secret: env('HC_LIMITS_APP_SECRET') };
const [apiHost, apiPort] = env('HC_API').split(/:(?=\d+$)/);
const sdk = new PusherServer({ appId: limits.id, key: limits.key, secret: limits.secret, host: apiHost, port: Number(apiPort), useTLS: false, timeout: 5000 });

// settle runs every promise and returns the HTTP statuses (200 for a
// success) and the bodies of the failures.
async function settle(promises) {
  const results = await Promise.allSettled(promises);
  return results.map((r) => {
    if (r.status === 'fulfilled') return { status: 200 };
    if (r.reason && r.reason.status) return { status: r.reason.status, body: String(r.reason.body || '') };
    throw r.reason;
  });
}

// upgrade sends a WebSocket upgrade request to node with these headers and
// resolves with the HTTP status and body, or 101 once the upgrade succeeds.
function upgrade(node, headers) {
  const { host, port } = hosts[node];
  return new Promise((resolve, reject) => {
    const req = http.request({
      host,
      port,
      path: `/app/${limits.key}?protocol=7&client=js&version=8.4.0`,
      headers: {
        Connection: 'Upgrade',
        Upgrade: 'websocket',
        'Sec-WebSocket-Version': '13',
        'Sec-WebSocket-Key': crypto.randomBytes(16).toString('base64'),
        ...headers,
      },
    });
    req.setTimeout(5000, () => req.destroy(new Error('upgrade timed out')));
    req.on('upgrade', (res, socket) => {
      socket.destroy();
      resolve({ status: res.statusCode, body: '' });
    });
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('app limits and allowed origins', { timeout: 40000 }, () => {
  after(closeAll);

  test('maxBackendEventsPerSecond: the Node SDK gets 429 past the app\'s budget, counted per channel', async () => {
    // Six channels are more than a whole second's budget of five.
    const channels = Array.from({ length: 6 }, (_, i) => `lim-${i}`);
    const [over] = await settle([sdk.trigger(channels, 'e', {})]);
    assert.equal(over.status, 429, `a publish to 6 channels: ${JSON.stringify(over)}`);
    assert.match(over.body, /allows 5 events .*maxBackendEventsPerSecond/);
    const [batch] = await settle([sdk.triggerBatch(channels.map((channel) => ({ channel, name: 'e', data: {} })))]);
    assert.equal(batch.status, 429, `a batch of 6: ${JSON.stringify(batch)}`);

    // Twelve single-channel publishes at once: at most five a second pass.
    const started = Date.now();
    const got = await settle(Array.from({ length: 12 }, (_, i) => sdk.trigger(`lim-${i}`, 'e', {})));
    const windows = Math.ceil((Date.now() - started) / 1000) + 1;
    const passed = got.filter((r) => r.status === 200).length;
    assert.ok(passed >= 1 && passed <= 5 * windows, `passed ${passed} in ${windows} windows: ${JSON.stringify(got)}`);
    assert.ok(got.some((r) => r.status === 429), `none refused: ${JSON.stringify(got)}`);
  });

  test('maxReadRequestsPerSecond: GETs past the app\'s budget get 429', async () => {
    const started = Date.now();
    const got = await settle(Array.from({ length: 10 }, () => sdk.get({ path: '/channels' })));
    const windows = Math.ceil((Date.now() - started) / 1000) + 1;
    const passed = got.filter((r) => r.status === 200).length;
    assert.ok(passed >= 1 && passed <= 3 * windows, `passed ${passed} in ${windows} windows: ${JSON.stringify(got)}`);
    const refused = got.find((r) => r.status === 429);
    assert.ok(refused, `none refused: ${JSON.stringify(got)}`);
    assert.match(refused.body, /maxReadRequestsPerSecond/);
  });

  test('maxClientEventsPerSecond: a pusher-js socket past 2 a second gets 4301, the rest cross to node B', async () => {
    const channel = `private-lim-${uid()}`;
    const s = new Client('sender', A, { app: limits });
    const r = new Client('recvB', B, { app: limits });
    try {
      await Promise.all([s.subscribe(channel), r.subscribe(channel)]);
      const got = r.collect(channel, 'client-n');
      for (let i = 0; i < 10; i++) s.pusher.channel(channel).trigger('client-n', { i });
      const limited = () => s.count('pusher:error', undefined, (f) => f.data && f.data.code === 4301);
      // Each event is relayed or refused; the refusals come back to the
      // sender, the relayed ones reach B.
      await waitUntil(() => limited() + got.length === 10, 5000, () => `10 events relayed or refused ${s.dump()} ${r.dump()}`);
      assert.ok(limited() >= 6, `at most 2 a second (and a refill) relayed, ${limited()} refused ${s.dump()}`);
      assert.ok(got.length >= 1, `none relayed ${r.dump()}`);
    } finally {
      s.close();
      r.close();
    }
  });

  test('maxChannelNameLength: longer names are refused on the socket and by the HTTP API', async () => {
    const long = `lim-${'x'.repeat(37)}`; // 41 bytes
    const ok = long.slice(0, 40);
    const c = new Client('names', A, { app: limits });
    try {
      await c.connected();
      const since = c.frames.length;
      c.pusher.subscribe(long);
      const f = await c.waitAny((x) => x.event === 'pusher:error', 5000, since, 'pusher:error for a long name');
      assert.match(String(f.data.message), /over the limit of 40/);
      await c.subscribe(ok);
    } finally {
      c.close();
    }
    const [refused] = await settle([sdk.trigger(long, 'e', {})]);
    assert.equal(refused.status, 400);
    assert.match(refused.body, /over the limit of 40/);
  });

  test('allowedOrigins: an upgrade from another origin is 403 before the upgrade; allowed ones and pusher-js (no Origin) connect', async () => {
    for (const node of [A, B]) {
      const evil = await upgrade(node, { Origin: 'https://evil.example' });
      assert.equal(evil.status, 403, JSON.stringify(evil));
      assert.match(evil.body, /Origin "https:\/\/evil.example" is not allowed for app limits-id/);
      assert.equal((await upgrade(node, { Origin: 'https://good.example' })).status, 101);
      assert.equal((await upgrade(node, { Origin: 'https://chat.good.example:8443' })).status, 101);
      assert.equal((await upgrade(node, { Origin: 'http://good.example.evil.example' })).status, 403);
    }
    const c = new Client('no-origin', B, { app: limits });
    try {
      await c.connected();
    } finally {
      c.close();
    }
  });
});
