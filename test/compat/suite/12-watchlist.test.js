// Watchlist events: a user signed in (pusher.signin()) with a watchlist in
// its user_data is told through pusher.user.watchlist which watched users
// are online, anywhere in the cluster, and then each coming online (first
// signed-in socket on any node) and going offline (last one gone).
'use strict';

const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
const { A, B, Client, closeAll, uid, waitUntil, server } = require('./lib');

// watch records the events pusher-js's watchlist emits on c.
function watch(c) {
  const got = [];
  for (const name of ['online', 'offline']) {
    c.pusher.user.watchlist.bind(name, (ev) => got.push({ name: ev.name, user_ids: ev.user_ids.slice().sort(), at: Date.now() }));
  }
  return got;
}

// waitEvent waits until got has an event named name with exactly ids,
// at index >= since, and returns its index.
async function waitEvent(c, got, name, ids, since = 0, ms = 5000) {
  const want = JSON.stringify(ids.slice().sort());
  const n = await waitUntil(() => {
    const i = got.findIndex((ev, j) => j >= since && ev.name === name && JSON.stringify(ev.user_ids) === want);
    return i >= 0 ? i + 1 : 0;
  }, ms, () => `${c.name}'s watchlist to emit ${name} ${want} (got ${JSON.stringify(got)}) ${c.dump()}`);
  return n - 1;
}

async function signedIn(c) {
  await c.connected();
  c.signin();
  await c.waitFrame('pusher:signin_success');
}

describe('watchlist events', { timeout: 30000 }, () => {
  after(closeAll);

  test('online and offline across the two nodes', async () => {
    const id = uid();
    const [ua, ub, uc] = [`a-${id}`, `b-${id}`, `c-${id}`];
    const c = new Client('c', A, { user: { id: uc } });
    const w = new Client('w', A, { user: { id: ua, watchlist: [ub, uc] } });
    const b = new Client('b', B, { user: { id: ub } });
    const probe = new Client('probe', B, { user: { id: `p-${id}`, watchlist: [uc] } });
    try {
      await signedIn(c);
      // Once a watcher heard c's online, c's signin is in Redis.
      const heard = watch(probe);
      await signedIn(probe);
      await waitEvent(probe, heard, 'online', [uc]);
      const got = watch(w);
      await signedIn(w);
      // The first status, one frame: c is signed in already, b is not.
      await waitEvent(w, got, 'offline', [ub]);
      assert.deepEqual(got.map((ev) => [ev.name, ev.user_ids]), [['online', [uc]], ['offline', [ub]]], `the first status ${w.dump()}`);
      // b signs in on the other node: online.
      let since = got.length;
      await signedIn(b);
      await waitEvent(w, got, 'online', [ub], since);
      // b's socket goes: offline.
      since = got.length;
      b.close();
      const i = await waitEvent(w, got, 'offline', [ub], since);
      assert.deepEqual(got.slice(since).map((ev) => ev.name), ['offline'], `only b's offline once its socket went ${JSON.stringify(got)}`);
      assert.ok(i >= since);
      assert.equal(w.count('pusher:error'), 0, `no pusher:error ${w.dump()}`);
    } finally {
      for (const x of [c, w, b, probe]) x.close();
    }
  });

  test('the signed-in users stay internal: not listed, not publishable', async () => {
    const id = uid();
    const c = new Client('c', A, { user: { id: `c-${id}` } });
    const probe = new Client('probe', B, { user: { id: `p-${id}`, watchlist: [`c-${id}`] } });
    try {
      await signedIn(c);
      const heard = watch(probe);
      await signedIn(probe);
      await waitEvent(probe, heard, 'online', [`c-${id}`]);
      const listed = await (await server.get({ path: '/channels' })).json();
      assert.ok(!Object.keys(listed.channels).some((ch) => ch.startsWith('#')), `no internal channel listed ${JSON.stringify(listed)}`);
      await assert.rejects(server.post({ path: '/events', body: { name: 'x', channels: ['#headcount-signed-in'], data: '{}' } }),
        (err) => err.status === 400);
    } finally {
      c.close();
      probe.close();
    }
  });

  test('a watchlist over 100 ids: pusher:error 4302, the first 100 watched', async () => {
    const id = uid();
    const ids = Array.from({ length: 101 }, (_, i) => `u${i}-${id}`);
    const w = new Client('w', B, { user: { id: `w-${id}`, watchlist: ids } });
    const last = new Client('last', A, { user: { id: ids[100] } });
    const first = new Client('first', A, { user: { id: ids[0] } });
    try {
      const got = watch(w);
      await signedIn(w);
      const f = await w.waitFrame('pusher:error');
      assert.equal(f.data.code, 4302, `error code ${w.dump()}`);
      await waitEvent(w, got, 'offline', ids.slice(0, 100));
      assert.equal(w.state, 'connected', 'the connection stays open');
      assert.ok(w.pusher.user.user_data && w.pusher.user.user_data.id === `w-${id}`, 'the signin itself succeeded');
      // The 101st id is not watched, the first is: after the first's
      // online, nothing about the 101st came.
      await signedIn(last);
      const since = got.length;
      await signedIn(first);
      await waitEvent(w, got, 'online', [ids[0]], since);
      assert.ok(!got.some((ev) => ev.user_ids.includes(ids[100])), `nothing about the 101st id ${JSON.stringify(got.slice(-3))}`);
    } finally {
      for (const x of [w, last, first]) x.close();
    }
  });
});
