// Private channels: a good signature subscribes, a bad one yields
// pusher:subscription_error on that channel and leaves the socket usable.
'use strict';

const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
const { A, B, Client, closeAll, uid, server, wrongServer, pollChannel } = require('./lib');

describe('private channels', { timeout: 20000 }, () => {
  after(closeAll);

  test('subscribe with a good signature succeeds on both nodes', async () => {
    const channel = `private-ok-${uid()}`;
    const a = new Client('a', A);
    const b = new Client('b', B);
    try {
      await Promise.all([a.subscribe(channel), b.subscribe(channel)]);
    } finally {
      a.close();
      b.close();
    }
  });

  const bad = {
    'signed with a wrong secret': (socketId, channelName) => wrongServer.authorizeChannel(socketId, channelName),
    'signed for another channel': (socketId, channelName) => server.authorizeChannel(socketId, channelName + 'x'),
    'signed for another socket': (socketId, channelName) => server.authorizeChannel('1.1', channelName),
  };
  for (const [node, nodeName] of [[A, 'A'], [B, 'B']]) {
    test(`bad signatures on node ${nodeName} answer pusher:subscription_error and the socket stays connected`, async () => {
      const id = uid();
      const badChannels = Object.keys(bad).map((_, i) => `private-bad${i}-${id}`);
      const byChannel = new Map(Object.values(bad).map((f, i) => [badChannels[i], f]));
      const good = `private-after-${id}`;
      const c = new Client('c', node, {
        authorize: (socketId, channelName) =>
          byChannel.has(channelName) ? byChannel.get(channelName)(socketId, channelName) : server.authorizeChannel(socketId, channelName),
      });
      try {
        const socketId = await c.connected();
        const names = Object.keys(bad);
        for (let i = 0; i < badChannels.length; i++) {
          const err = await c.subscriptionError(badChannels[i]);
          assert.equal(err.type, 'AuthError', `${names[i]}: subscription_error type, got ${JSON.stringify(err)}`);
          assert.equal(err.status, 401, `${names[i]}: subscription_error status, got ${JSON.stringify(err)}`);
        }
        assert.equal(c.state, 'connected', `connection state after the refusals ${c.dump()}`);
        assert.equal(c.socketId, socketId, `the socket must not have reconnected ${c.dump()}`);
        await c.subscribe(good);
        assert.equal(c.socketId, socketId, `the socket must not have reconnected ${c.dump()}`);
        // The refused subscriptions must not be counted: once the good one
        // (sent after them on the same socket) is counted, they are settled.
        await pollChannel(good, 'subscription_count', (r) => r.subscription_count === 1, 5000, `${good} counted`);
        for (const ch of badChannels) {
          await pollChannel(ch, 'subscription_count', () => true, 5000, 'an answer').then((r) =>
            assert.equal(r.occupied, false, `refused ${ch} must not be occupied, got ${JSON.stringify(r)}`));
        }
      } finally {
        c.close();
      }
    });
  }
});
