// User signin: pusher.signin() -> pusher:signin_success -> pusher-js
// subscribes to #server-to-user-{id} on its own.
'use strict';

const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
const { A, B, Client, closeAll, uid, memberIds, pollChannel } = require('./lib');

const OK = 'pusher_internal:subscription_succeeded';

describe('user signin', { timeout: 30000 }, () => {
  after(closeAll);

  test('signin succeeds and #server-to-user-{id} is subscribed', async () => {
    const id = `user-${uid()}`;
    const c = new Client('c', A, { user: { id, user_info: { name: 'Signed In' } } });
    try {
      await c.connected();
      c.signin();
      const f = await c.waitFrame('pusher:signin_success');
      assert.equal(typeof f.data.user_data, 'string', `signin_success carries user_data as a string, got ${JSON.stringify(f.data)}`);
      assert.deepEqual(JSON.parse(f.data.user_data), { id, user_info: { name: 'Signed In' } }, 'user_data is echoed as sent');
      assert.equal(c.pusher.user.user_data && c.pusher.user.user_data.id, id, 'pusher-js accepted the signin');
      await c.waitFrame(OK, `#server-to-user-${id}`);
      assert.ok(c.pusher.user.serverToUserChannel && c.pusher.user.serverToUserChannel.subscribed, 'pusher-js marks #server-to-user- subscribed');
      assert.equal(c.count('pusher:error'), 0, `no pusher:error ${c.dump()}`);
      assert.equal(c.state, 'connected');
    } finally {
      c.close();
    }
  });

  test('#server-to-user-{id} is refused to sockets not signed in as id', async () => {
    const id = `user-${uid()}`;
    const other = new Client('other', B, { user: { id: `${id}-other` } });
    const anon = new Client('anon', A);
    try {
      await Promise.all([other.connected(), anon.connected()]);
      other.signin();
      await other.waitFrame(OK, `#server-to-user-${id}-other`);
      const target = `#server-to-user-${id}`;
      for (const c of [other, anon]) {
        const since = c.frames.length;
        // pusher-js will not subscribe to a #-channel itself: send the frame raw.
        c.pusher.send_event('pusher:subscribe', { auth: '', channel: target });
        const f = await c.waitAny(
          (x) => (x.event === 'pusher:subscription_error' && x.channel === target) || x.event === 'pusher:error' || (x.event === OK && x.channel === target),
          5000, since);
        assert.notEqual(f.event, OK, `${c.name} must not be subscribed to ${target} ${c.dump()}`);
        assert.equal(c.state, 'connected', `${c.name} stays connected`);
      }
    } finally {
      other.close();
      anon.close();
    }
  });

  test('a signed-in user joins a presence channel without channel_data', async () => {
    const id = `user-${uid()}`;
    const channel = `presence-signed-${uid()}`;
    const obs = new Client('obs', B, { presence: { user_id: 'obs' } });
    // No presence option: the SDK signs socket_id:channel only, the user comes from the signin.
    const c = new Client('c', A, { user: { id, user_info: { name: 'S' } } });
    try {
      await obs.subscribe(channel);
      // obs joined on node B; node A's list is the cluster's once B's count
      // update reached Redis (within B's flush window).
      await pollChannel(channel, 'user_count', (x) => x.user_count === 1, 5000, 'obs counted');
      await c.connected();
      c.signin();
      await c.waitFrame('pusher:signin_success');
      const s = (await c.subscribe(channel)).data;
      assert.deepEqual(memberIds(s), [id, 'obs'].sort());
      assert.equal(s.me && s.me.id, id);
      const f = await obs.waitFrame('pusher_internal:member_added', channel, (x) => x.data && x.data.user_id === id);
      assert.deepEqual(f.data.user_info, { name: 'S' }, 'user_info comes from the signin user_data');
    } finally {
      obs.close();
      c.close();
    }
  });
});
