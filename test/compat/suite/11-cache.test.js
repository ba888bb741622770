// Cache channels (cache-, private-cache-, private-encrypted-cache-,
// presence-cache-): right after pusher:subscription_succeeded a subscriber
// gets the channel's last event published through the HTTP API, or
// pusher:cache_miss when there is none, on either node; GET
// /channels/{name}?info=cache shows the cached data and its TTL.
'use strict';

const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
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
});
