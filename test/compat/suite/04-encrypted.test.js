// Encrypted channels (private-encrypted-): authorized like private channels;
// pusher-js needs the shared_secret that the pusher SDK adds to the auth
// (from encryptionMasterKeyBase64). The server only relays.
'use strict';

const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
const { A, B, Client, closeAll, uid, server, waitUntil, wrongServer } = require('./lib');

describe('encrypted channels', { timeout: 20000 }, () => {
  after(closeAll);

  test('two clients on different nodes subscribe with the SDK auth and shared_secret', async () => {
    const channel = `private-encrypted-${uid()}`;
    const a = new Client('a', A);
    const b = new Client('b', B);
    try {
      const [ra, rb] = await Promise.all([a.subscribe(channel), b.subscribe(channel)]);
      for (const r of [ra, rb]) {
        assert.ok(r.channel.key && r.channel.key.length === 32, 'pusher-js kept the 32-byte shared secret from the auth');
      }
      assert.deepEqual(Buffer.from(ra.channel.key), Buffer.from(rb.channel.key), 'both clients derive the same key');
    } finally {
      a.close();
      b.close();
    }
  });

  test('a bad signature on an encrypted channel answers pusher:subscription_error', async () => {
    const channel = `private-encrypted-bad-${uid()}`;
    const c = new Client('c', B, { authorize: (socketId, name) => wrongServer.authorizeChannel(socketId, name) });
    try {
      const err = await c.subscriptionError(channel);
      assert.equal(err.status, 401, `got ${JSON.stringify(err)}`);
      assert.equal(c.state, 'connected');
    } finally {
      c.close();
    }
  });

  // pusher-js refuses client events on encrypted channels, so the relay of
  // an encrypted payload goes through HTTP publish: the SDK encrypts with the
  // channel's shared secret, the server relays the ciphertext untouched, and
  // pusher-js decrypts it on both nodes.
  test('an event published over HTTP is relayed to both subscribers and decrypted', async () => {
    const channel = `private-encrypted-relay-${uid()}`;
    const a = new Client('a', A);
    const b = new Client('b', B);
    try {
      await Promise.all([a.subscribe(channel), b.subscribe(channel)]);
      const gotA = a.collect(channel, 'secret');
      const gotB = b.collect(channel, 'secret');
      const payload = { text: 'héllo "encrypted"', n: [1, 2, 3] };
      // Retried until both nodes saw one: a node misses events published
      // before its subscription reached Redis, as with Pusher.
      const deadline = Date.now() + 10000;
      for (;;) {
        await server.trigger(channel, 'secret', payload);
        try {
          await waitUntil(() => gotA.length > 0 && gotB.length > 0, 250, 'secret on both nodes');
          break;
        } catch (err) {
          if (Date.now() >= deadline) throw new Error(`${err.message} ${a.dump()} ${b.dump()}`);
        }
      }
      assert.deepEqual(gotA[0].data, payload, 'decrypted on node A');
      assert.deepEqual(gotB[0].data, payload, 'decrypted on node B');
      const raw = a.frames.find((f) => f.event === 'secret');
      assert.ok(raw && raw.data && raw.data.nonce && raw.data.ciphertext && raw.data.text === undefined,
        `the wire carried only the ciphertext: ${JSON.stringify(raw && raw.data)}`);
    } finally {
      a.close();
      b.close();
    }
  });
});
