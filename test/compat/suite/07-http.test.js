// HTTP API publishing through the real `pusher` Node SDK 5: trigger with
// info (counts of real subscriptions on both nodes), socket_id exclusion,
// triggerBatch, GET users, sendToUser and terminateUserConnections.
'use strict';

const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
const { A, B, Client, closeAll, uid, server, pollChannel, waitUntil } = require('./lib');

// untilSeen calls send every 250 ms until seen() holds, for at most ms: a
// node misses events published before its subscription reached Redis (as
// with Pusher), and the SDK cannot tell when that happened.
async function untilSeen(send, seen, ms, what) {
  const deadline = Date.now() + ms;
  for (;;) {
    await send();
    try {
      return await waitUntil(seen, 250, what);
    } catch (err) {
      if (Date.now() >= deadline) throw err;
    }
  }
}

async function json(promise) {
  const res = await promise;
  return res.json();
}

describe('HTTP API publishing', { timeout: 40000 }, () => {
  after(closeAll);

  test('trigger with info counts subscriptions on both nodes and skips socket_id', async () => {
    const news = `news-${uid()}`;
    const room = `presence-room-${uid()}`;
    const a = new Client('a', A);
    const excluded = new Client('excluded', A);
    const b = new Client('b', B);
    const u1a = new Client('u1a', A, { presence: { user_id: 'u1' } });
    const u1b = new Client('u1b', B, { presence: { user_id: 'u1' } });
    const u2 = new Client('u2', B, { presence: { user_id: 'u2', user_info: { name: 'Two' } } });
    const all = [a, excluded, b, u1a, u1b, u2];
    try {
      await Promise.all([a, excluded, b].map((c) => c.subscribe(news)));
      await Promise.all([u1a, u1b, u2].map((c) => c.subscribe(room)));
      await pollChannel(room, 'subscription_count,user_count', (x) => x.subscription_count === 3 && x.user_count === 2, 5000, 'presence counted');
      await pollChannel(news, 'subscription_count', (x) => x.subscription_count === 3, 5000, 'news counted');

      const excludedId = await excluded.connected();
      const hello = (c, ch) => c.count('hello', ch);
      let body;
      await untilSeen(
        async () => {
          body = await json(server.trigger([news, room], 'hello', { n: 1 }, { socket_id: excludedId, info: 'subscription_count,user_count' }));
        },
        () => hello(a, news) && hello(b, news) && hello(u1a, room) && hello(u1b, room) && hello(u2, room),
        10000, () => `hello on every subscriber ${all.map((c) => c.dump(4)).join(' ')}`);
      assert.deepEqual(body, {
        channels: {
          [news]: { subscription_count: 3 },
          [room]: { subscription_count: 3, user_count: 2 },
        },
      });
      const f = a.frames.find((x) => x.event === 'hello');
      assert.deepEqual(f.data, { n: 1 }, 'data arrives as sent');

      // Barrier: one publisher's events on one channel arrive in order, so
      // a hello for the excluded socket would come before this one.
      await server.trigger(news, 'barrier', {});
      await excluded.waitFrame('barrier', news);
      assert.equal(hello(excluded, news), 0, `the excluded socket got hello ${excluded.dump()}`);

      // Without info the answer is {}.
      assert.deepEqual(await json(server.trigger(news, 'plain', 'x')), {});
    } finally {
      for (const c of all) c.close();
    }
  });

  test('triggerBatch answers {batch:[...]} aligned by index, {} without info', async () => {
    const news = `batch-${uid()}`;
    const room = `presence-batch-${uid()}`;
    const a = new Client('a', A);
    const p = new Client('p', B, { presence: { user_id: 'p1' } });
    try {
      await a.subscribe(news);
      await p.subscribe(room);
      await pollChannel(room, 'user_count', (x) => x.user_count === 1, 5000, 'presence counted');
      await pollChannel(news, 'subscription_count', (x) => x.subscription_count === 1, 5000, 'news counted');
      let body;
      await untilSeen(
        async () => {
          body = await json(server.triggerBatch([
            { channel: news, name: 'b1', data: { i: 1 }, info: 'subscription_count' },
            { channel: room, name: 'b2', data: 'two', info: 'user_count,subscription_count' },
            { channel: news, name: 'b3', data: 'three' },
          ]));
        },
        () => a.count('b1', news) && a.count('b3', news) && p.count('b2', room),
        10000, () => `the batch on both nodes ${a.dump(4)} ${p.dump(4)}`);
      assert.deepEqual(body, { batch: [{ subscription_count: 1 }, { user_count: 1, subscription_count: 1 }, {}] });
      assert.deepEqual(await json(server.triggerBatch([{ channel: news, name: 'b4', data: 'x' }])), {});
    } finally {
      a.close();
      p.close();
    }
  });

  test('GET users lists distinct users of a presence channel, 400 elsewhere', async () => {
    const room = `presence-users-${uid()}`;
    const c1 = new Client('c1', A, { presence: { user_id: 'x1' } });
    const c2 = new Client('c2', B, { presence: { user_id: 'x1' } });
    const c3 = new Client('c3', B, { presence: { user_id: 'x2' } });
    try {
      await Promise.all([c1, c2, c3].map((c) => c.subscribe(room)));
      await pollChannel(room, 'user_count', (x) => x.user_count === 2, 5000, 'users counted');
      const body = await json(server.get({ path: `/channels/${room}/users` }));
      assert.deepEqual(body.users.map((u) => u.id).sort(), ['x1', 'x2']);
      await assert.rejects(server.get({ path: `/channels/private-x-${uid()}/users` }), (err) => {
        assert.equal(err.status, 400, String(err.body));
        assert.match(String(err.body), /presence channels/);
        return true;
      });
    } finally {
      c1.close();
      c2.close();
      c3.close();
    }
  });

  test('sendToUser reaches the user; terminateUserConnections closes their sockets on both nodes with 4009', async () => {
    const id = `term-${uid()}`;
    const onA = new Client('onA', A, { user: { id } });
    const onB = new Client('onB', B, { user: { id } });
    const other = new Client('other', B, { user: { id: `${id}-other` } });
    const clients = [onA, onB, other];
    try {
      await Promise.all(clients.map((c) => c.connected()));
      for (const c of clients) c.signin();
      await Promise.all(clients.map((c) => c.waitFrame('pusher_internal:subscription_succeeded', `#server-to-user-${c.opts.user.id}`)));

      await untilSeen(
        () => server.sendToUser(id, 'notice', { hi: 1 }),
        () => onA.count('notice') && onB.count('notice'),
        10000, () => `notice on both sockets ${onA.dump(4)} ${onB.dump(4)}`);
      assert.equal(other.count('notice'), 0, 'another user gets nothing');

      const is4009 = (c) => c.frames.some((f) => f.event === 'pusher:error' && f.data && f.data.code === 4009);
      await untilSeen(
        async () => {
          const res = await server.terminateUserConnections(id);
          assert.equal(res.status, 200);
          assert.deepEqual(await res.json(), {});
        },
        () => is4009(onA) && is4009(onB),
        10000, () => `pusher:error 4009 on both sockets ${onA.dump(4)} ${onB.dump(4)}`);
      // Close code 4009 is "refused": pusher-js disconnects for good; a
      // retryable code would have sent it to 'connecting' instead.
      await waitUntil(() => onA.state === 'disconnected' && onB.state === 'disconnected', 5000,
        () => `both sockets closed ${onA.dump(4)} ${onB.dump(4)}`);
      assert.equal(other.state, 'connected', 'another user stays connected');
      assert.ok(!is4009(other));
    } finally {
      for (const c of clients) c.close();
    }
  });
});
