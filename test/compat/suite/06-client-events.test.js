// Client events (client-*): relayed across nodes to the other subscribers,
// never echoed to the sender, user_id added on presence channels, only on
// private/presence channels, only from subscribers, only for apps that enable
// them, at most 10 per second per socket.
'use strict';

const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
const { A, B, Client, closeAll, uid, app2, waitUntil } = require('./lib');

describe('client events', { timeout: 40000 }, () => {
  after(closeAll);

  test('private channel: sent on node A, received on nodes A and B, not echoed', async () => {
    const channel = `private-ce-${uid()}`;
    const s = new Client('sender', A);
    const r = new Client('recvB', B);
    const r2 = new Client('recvA', A);
    try {
      await Promise.all([s.subscribe(channel), r.subscribe(channel), r2.subscribe(channel)]);
      const sPing = s.collect(channel, 'client-ping');
      const sPong = s.collect(channel, 'client-pong');
      const rPing = r.collect(channel, 'client-ping');
      const rPong = r.collect(channel, 'client-pong');
      const rDone = r.collect(channel, 'client-done');
      const r2Ping = r2.collect(channel, 'client-ping');

      const payload = { n: 1, text: 'héllo "quoted"', nested: { list: [1, 2, 3] } };
      assert.equal(s.pusher.channel(channel).trigger('client-ping', payload), true, 'pusher-js sent the event');
      await waitUntil(() => rPing.length > 0 && r2Ping.length > 0, 5000, () => `client-ping on both receivers ${r.dump()} ${r2.dump()}`);
      assert.deepEqual(rPing[0].data, payload, 'data arrives intact on node B');
      assert.deepEqual(r2Ping[0].data, payload, 'data arrives intact on node A');
      const raw = r.frames.find((f) => f.event === 'client-ping');
      assert.equal(raw.user_id, undefined, 'no user_id on private channels');

      // Barrier: the receiver answers; ping was published before pong on
      // this channel, so an echo of ping would reach the sender before pong.
      r.pusher.channel(channel).trigger('client-pong', { n: 2 });
      await waitUntil(() => sPong.length > 0, 5000, () => `client-pong at the sender ${s.dump()}`);
      assert.equal(sPing.length, 0, `client-ping echoed to its sender ${s.dump()}`);
      s.pusher.channel(channel).trigger('client-done', {});
      await waitUntil(() => rDone.length > 0, 5000, () => `client-done at the receiver ${r.dump()}`);
      assert.equal(rPong.length, 0, `client-pong echoed to its sender ${r.dump()}`);
      assert.equal(rPing.length, 1, 'client-ping delivered exactly once on node B');
      assert.equal(r2Ping.length, 1, 'client-ping delivered exactly once on node A');
    } finally {
      s.close();
      r.close();
      r2.close();
    }
  });

  test('presence channel: the receiver gets the sender\'s user_id, the sender no echo', async () => {
    const channel = `presence-ce-${uid()}`;
    const ua = new Client('ua', A, { presence: { user_id: 'ua' } });
    const ub = new Client('ub', B, { presence: { user_id: 'ub' } });
    try {
      await ua.subscribe(channel);
      await ub.subscribe(channel);
      const aHi = ua.collect(channel, 'client-hi');
      const aBack = ua.collect(channel, 'client-back');
      const bHi = ub.collect(channel, 'client-hi');
      ua.pusher.channel(channel).trigger('client-hi', { from: 'a' });
      await waitUntil(() => bHi.length > 0, 5000, () => `client-hi at ub ${ub.dump()}`);
      assert.deepEqual(bHi[0].data, { from: 'a' });
      assert.equal(bHi[0].metadata && bHi[0].metadata.user_id, 'ua', 'metadata.user_id is the sender\'s');
      ub.pusher.channel(channel).trigger('client-back', { from: 'b' });
      await waitUntil(() => aBack.length > 0, 5000, () => `client-back at ua ${ua.dump()}`);
      assert.equal(aBack[0].metadata && aBack[0].metadata.user_id, 'ub');
      assert.equal(aHi.length, 0, `client-hi echoed to its sender ${ua.dump()}`);
    } finally {
      ua.close();
      ub.close();
    }
  });

  test('not relayed from a non-subscriber nor on a public channel', async () => {
    const id = uid();
    const priv = `private-ce2-${id}`;
    const pub = `pub-ce-${id}`;
    const s = new Client('sender', A); // subscribed to both
    const n = new Client('nonsub', A); // on the same node as the sender, subscribed to neither
    const r = new Client('recv', B);
    try {
      await Promise.all([s.subscribe(priv), s.subscribe(pub), r.subscribe(priv), r.subscribe(pub), n.connected()]);
      const rSneak = r.collect(priv, 'client-sneak');
      const rPub = r.collect(pub, 'client-public');
      const rOk = r.collect(priv, 'client-ok');
      // Neither of these may be delivered.
      n.pusher.send_event('client-sneak', { x: 1 }, priv);
      s.pusher.channel(pub).trigger('client-public', { x: 2 });
      // Barrier: n's frame is processed before its next subscribe is answered;
      // then a legitimate event on each channel goes out after them.
      await n.subscribe(`barrier-${id}`);
      s.pusher.channel(priv).trigger('client-ok', {});
      await waitUntil(() => rOk.length > 0, 5000, () => `client-ok at the receiver ${r.dump()}`);
      assert.equal(rSneak.length, 0, `a client event from a non-subscriber was relayed ${r.dump()}`);
      assert.equal(rPub.length, 0, `a client event on a public channel was relayed ${r.dump()}`);
      assert.equal(s.state, 'connected');
      assert.equal(n.state, 'connected');
    } finally {
      s.close();
      n.close();
      r.close();
    }
  });

  test('more than 10 per second from one socket answers pusher:error 4301', async () => {
    const channel = `private-rate-${uid()}`;
    const s = new Client('sender', A);
    const r = new Client('recv', B);
    try {
      await Promise.all([s.subscribe(channel), r.subscribe(channel)]);
      const got = r.collect(channel, 'client-burst');
      const t0 = Date.now();
      for (let i = 0; i < 20; i++) s.pusher.channel(channel).trigger('client-burst', { i });
      const sent = Date.now() - t0;
      const f = await s.waitFrame('pusher:error', undefined, (x) => x.data && x.data.code === 4301);
      assert.ok(sent < 1000, `the burst took ${sent} ms, too slow to test the limit`);
      assert.equal(s.state, 'connected', 'the sender stays connected');
      assert.ok(typeof f.data.message === 'string' && f.data.message.length > 0, 'the error has a message');
      await waitUntil(() => got.length >= 10, 5000, () => `the first 10 of the burst at the receiver (got ${got.length})`);
      // A token bucket: 10 at once, then one more each 100 ms the node
      // spends reading the burst, which a loaded machine stretches; every
      // event counted here was read before now.
      const elapsed = Date.now() - t0;
      const bound = 11 + Math.floor(elapsed / 100);
      assert.ok(got.length <= Math.min(bound, 19), `the receiver got ${got.length} of a burst of 20 in ${elapsed} ms (want at most ${bound}, and never all)`);
    } finally {
      s.close();
      r.close();
    }
  });

  test('not relayed when the app disables client events', { skip: app2 ? false : 'HC_APP2_KEY not set' }, async () => {
    const id = uid();
    const channel = `presence-off-${id}`;
    const s = new Client('sender', A, { app: app2, presence: { user_id: 's' } });
    const r = new Client('recv', B, { app: app2, presence: { user_id: 'r' } });
    const j = new Client('joiner', A, { app: app2, presence: { user_id: 'j' } });
    try {
      await s.subscribe(channel);
      await r.subscribe(channel);
      const got = r.collect(channel, 'client-nope');
      s.pusher.channel(channel).trigger('client-nope', {});
      // Barrier: the sender's next subscribe is answered only after its
      // client event was handled; then j joins from the same node, and its
      // member_added, published on the channel after any relay of the
      // client event, reaches the receiver after it.
      await s.subscribe(`barrier-off-${id}`);
      await j.subscribe(channel);
      await r.waitFrame('pusher_internal:member_added', channel, (f) => f.data && f.data.user_id === 'j');
      assert.equal(got.length, 0, `client event relayed although the app disables them ${r.dump()}`);
      assert.equal(s.state, 'connected', 'the sender stays connected');
      // The refusal itself is not specified (soketi and reverb send
      // pusher:error 4301, code may be null); if there is one, it must say why.
      const f = s.frames.find((x) => x.event === 'pusher:error');
      if (f) assert.ok(f.data && typeof f.data.message === 'string' && f.data.message !== '', `pusher:error for a disabled client event has a message: ${JSON.stringify(f.data)}`);
    } finally {
      s.close();
      r.close();
      j.close();
    }
  });
});
