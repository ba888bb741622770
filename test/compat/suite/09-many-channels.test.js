// A client with many channels: pusher-js queues every subscribe made before
// the connection is up and sends them all in one burst on connect, and again
// on every reconnect. The node must answer the whole burst on one connection
// (its own replies never make it a slow consumer) and count every channel.
'use strict';

const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
const { A, B, Client, closeAll, uid, server, app2, app3, waitUntil } = require('./lib');

// The channels a connection of the default app (and app3) may hold: their
// maxChannelsPerConnection.
const limit = 1000;
// The default of maxChannelsPerConnection, which app2 keeps: a page past it
// is rare, and Pusher and soketi set no cap at all.
const defaultLimit = 1000;

// occupied lists the occupied channels whose names start with prefix.
async function occupied(sdk, prefix) {
  const res = await sdk.get({ path: '/channels', params: { filter_by_prefix: prefix } });
  return Object.keys((await res.json()).channels || {}).length;
}

async function pollOccupied(sdk, prefix, want, ms) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    last = await occupied(sdk, prefix);
    if (last === want) return;
    if (Date.now() >= deadline) throw new Error(`timed out after ${ms} ms: ${last} channels ${prefix}* occupied, want ${want}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// burst subscribes c to n channels before it connects, waits for every
// subscription_succeeded and checks it connected exactly once.
async function burst(c, prefix, n) {
  const subs = [];
  for (let i = 0; i < n; i++) subs.push(c.subscribe(`${prefix}${i}`, 20000));
  await Promise.all(subs);
  assert.equal(c.states.filter((s) => s === 'connected').length, 1, `${c.name} must connect once, got states ${c.states.join(',')}`);
}

describe('many channels on one connection', { timeout: 90000 }, () => {
  after(closeAll);

  test(`pusher-js subscribing to ${limit} channels before connect: all succeed on one connection and are counted`, async () => {
    const prefix = `many-${uid()}-`;
    const c = new Client('many', A);
    try {
      await burst(c, prefix, limit);
      await pollOccupied(server, prefix, limit, 10000);

      // A reconnect sends the whole burst again.
      const since = c.frames.length;
      c.pusher.disconnect();
      c.pusher.connect();
      await c.waitFrame('pusher_internal:subscription_succeeded', `${prefix}${limit - 1}`, () => true, 20000, since);
      const again = new Set(c.frames.slice(since).filter((f) => f.event === 'pusher_internal:subscription_succeeded').map((f) => f.channel));
      assert.equal(again.size, limit, `every channel must be subscribed again after the reconnect`);
      assert.equal(c.states.filter((s) => s === 'connected').length, 2, `one reconnect only, got states ${c.states.join(',')}`);
      await pollOccupied(server, prefix, limit, 10000);
    } finally {
      c.close();
    }
  });

  test('past its connection\'s limit, a page\'s extra subscribes are refused and the connection stays', { skip: app2 ? false : 'HC_APP2_KEY not set' }, async () => {
    const prefix = `over-${uid()}-`;
    const n = defaultLimit + 50;
    const c = new Client('over', A, { app: app2 });
    try {
      const results = await Promise.allSettled(Array.from({ length: n }, (_, i) => c.subscribe(`${prefix}${i}`, 20000)));
      const refused = results.filter((r) => r.status === 'rejected');
      assert.equal(results.length - refused.length, defaultLimit, `${defaultLimit} subscriptions must succeed ${c.dump()}`);
      for (const r of refused) {
        assert.equal(r.reason.data && r.reason.data.type, 'LimitReached', String(r.reason));
      }
      // Refusals, not a cut: every answer came on the one connection, which
      // is still up.
      assert.equal(c.pusher.connection.state, 'connected', c.dump());
      assert.equal(c.states.filter((s) => s === 'connected').length, 1, `${c.name} must connect once, got states ${c.states.join(',')}`);
    } finally {
      c.close();
    }
  });

  test('with subscription_count on, the burst and its count events do not cut the connection', { skip: app3 ? false : 'HC_APP3_KEY not set' }, async () => {
    const prefix = `many-count-${uid()}-`;
    const n = limit;
    const c = new Client('counted', B, { app: app3 });
    try {
      await burst(c, prefix, n);
      await pollOccupied(c.sdk, prefix, n, 10000);
      // Each channel's count event reaches its one subscriber.
      await waitUntil(() => new Set(c.frames.filter((f) => f.event === 'pusher_internal:subscription_count').map((f) => f.channel)).size === n,
        10000, () => `a subscription_count on each of the ${n} channels ${c.dump()}`);
      assert.equal(c.states.filter((s) => s === 'connected').length, 1, `${c.name} must stay connected, got states ${c.states.join(',')}`);
    } finally {
      c.close();
    }
  });
});
