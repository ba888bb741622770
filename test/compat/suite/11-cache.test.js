// Cache channels (cache-, private-cache-, private-encrypted-cache-,
// presence-cache-): right after pusher:subscription_succeeded a subscriber
// gets the channel's last event published through the HTTP API, or
// pusher:cache_miss when there is none, on either node; GET
// /channels/{name}?info=cache shows the cached data and its TTL; the
// cache app (HC_CACHE_APP_ID, _KEY, _SECRET) sends its cache_miss webhook
// to HC_CACHE_HOOK_ADDR, where this file listens.
'use strict';

const http = require('node:http');
const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
const { setTimeout: delay } = require('node:timers/promises');
const PusherServer = require('pusher');
const { A, B, Client, closeAll, uid, server, channelInfo, waitUntil } = require('./lib');

const MISS = 'pusher:cache_miss';
const SUCCEEDED = 'pusher_internal:subscription_succeeded';

// afterSucceeded returns the first frame c received on channel after its
// subscription_succeeded there, waiting for it.
async function afterSucceeded(c, channel, ms = 5000) {
  return waitUntil(() => {
    const i = c.frames.findIndex((f) => f.event === SUCCEEDED && f.channel === channel);
    return i >= 0 && c.frames.slice(i + 1).find((f) => f.channel === channel);
  }, ms, () => `${c.name} to receive a frame on ${channel} after subscription_succeeded ${c.dump()}`);
}

describe('cache channels', { timeout: 40000 }, () => {
  after(closeAll);

  test('cache_miss before any publish, then the last event for new subscribers on either node', async () => {
    const channel = `cache-price-${uid()}`;
    const first = new Client('first', A);
    try {
      // pusher-js hands pusher:cache_miss to the channel's bindings.
      const sub = first.subscribe(channel);
      const misses = first.collect(channel, MISS);
      await sub;
      const f = await afterSucceeded(first, channel);
      assert.equal(f.event, MISS, `the frame after subscription_succeeded ${first.dump()}`);
      assert.equal(f.data, undefined, 'cache_miss carries no data');
      await waitUntil(() => misses.length === 1, 2000, () => `pusher:cache_miss bound on the channel ${first.dump()}`);

      // The miss comes once the node's subscription is in Redis: these
      // reach the first subscriber live.
      await server.trigger(channel, 'price', { usd: 1 });
      await server.trigger(channel, 'price', { usd: 2 });
      await first.waitFrame('price', channel, (x) => x.data && x.data.usd === 2);

      for (const node of [A, B]) {
        const late = new Client(`late-${node}`, node);
        const sub = late.subscribe(channel);
        const got = late.collect(channel, 'price');
        await sub;
        const g = await afterSucceeded(late, channel);
        assert.equal(g.event, 'price', `cached event right after subscription_succeeded ${late.dump()}`);
        assert.deepEqual(g.data, { usd: 2 });
        await waitUntil(() => got.length === 1, 2000, () => `the cached event bound on the channel ${late.dump()}`);
        assert.equal(late.count(MISS, channel), 0);
        late.close();
      }
    } finally {
      closeAll();
    }
  });

  test('private, encrypted and presence cache channels keep batch and single publishes', async () => {
    const priv = `private-cache-${uid()}`;
    const pres = `presence-cache-${uid()}`;
    const enc = `private-encrypted-cache-${uid()}`;
    await server.triggerBatch([
      { channel: priv, name: 'state', data: { v: 'p1' } },
      { channel: pres, name: 'state', data: { v: 'r1' } },
      { channel: priv, name: 'state', data: { v: 'p2' } },
    ]);
    await server.trigger(enc, 'secret', { v: 'e1' }); // the SDK encrypts it
    const c = new Client('c', B, { presence: { user_id: 'viewer' } });
    try {
      const subs = [priv, pres, enc].map((ch) => c.subscribe(ch));
      const gotEnc = c.collect(enc, 'secret');
      await Promise.all(subs);
      assert.deepEqual((await afterSucceeded(c, priv)).data, { v: 'p2' });
      assert.deepEqual((await afterSucceeded(c, pres)).data, { v: 'r1' });
      assert.equal((await afterSucceeded(c, enc)).event, 'secret');
      // pusher-js decrypts the cached ciphertext with the channel's key.
      await waitUntil(() => gotEnc.length === 1, 2000, () => `the decrypted cached event ${c.dump()}`);
      assert.deepEqual(gotEnc[0].data, { v: 'e1' });
    } finally {
      c.close();
    }
  });

  test('info=cache through the SDK shows the cached data and its TTL; 400 for other channels', async () => {
    const channel = `cache-info-${uid()}`;
    assert.deepEqual(await channelInfo(channel, 'cache'), { occupied: false });
    await server.trigger(channel, 'ev', { n: 7 });
    const info = await channelInfo(channel, 'cache');
    assert.equal(info.cache.data, JSON.stringify({ n: 7 }));
    assert.ok(info.cache.ttl > 1790 && info.cache.ttl <= 1800, `ttl ${info.cache.ttl} s, want about 30 minutes`);
    await assert.rejects(channelInfo(`news-${uid()}`, 'cache'), /HTTP 400/);
  });

  test('cache_miss webhook: once for subscribers finding one empty channel on both nodes, valid for the Node SDK', async () => {
    const cacheApp = { id: process.env.HC_CACHE_APP_ID, key: process.env.HC_CACHE_APP_KEY, secret: process.env.HC_CACHE_APP_SECRET };
    const m = /^(.+):(\d+)$/.exec(process.env.HC_CACHE_HOOK_ADDR || '');
    assert.ok(cacheApp.id && m, 'HC_CACHE_APP_* and HC_CACHE_HOOK_ADDR are set by test/e2e');
    const sdk = new PusherServer({ appId: cacheApp.id, key: cacheApp.key, secret: cacheApp.secret });
    const got = [];
    const receiver = http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const hook = sdk.webhook({ headers: req.headers, rawBody: Buffer.concat(chunks).toString('utf8') });
        if (!hook.isValid()) {
          got.push({ invalid: true });
          res.writeHead(400).end();
          return;
        }
        got.push(...hook.getEvents());
        res.writeHead(200).end();
      });
    });
    await new Promise((resolve, reject) => {
      receiver.once('error', reject);
      receiver.listen(Number(m[2]), m[1], resolve);
    });
    const channel = `cache-hook-${uid()}`;
    const clients = [A, B, A, B].map((node, i) => new Client(`miss${i}`, node, { app: cacheApp }));
    try {
      for (const c of clients) {
        await c.subscribe(channel);
        await c.waitFrame(MISS, channel);
      }
      // Polled: a webhook arriving is not a client frame, which waitUntil
      // waits on.
      const deadline = Date.now() + 10000;
      while (got.length === 0 && Date.now() < deadline) await delay(20);
      // An absence can only be watched for: a second webhook would have
      // been logged by now, and its delivery takes milliseconds.
      const quiet = Date.now() + 500;
      while (got.length === 1 && Date.now() < quiet) await delay(20);
      assert.deepEqual(got, [{ name: 'cache_miss', channel }]);
    } finally {
      for (const c of clients) c.close();
      receiver.closeAllConnections();
      receiver.close();
    }
  });
});
