// Encrypted channels (private-encrypted-): authorized like private channels;
// pusher-js needs the shared_secret that the pusher SDK adds to the auth
// (from encryptionMasterKeyBase64). The server only relays.
'use strict';

const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
const { A, B, Client, closeAll, uid, wrongServer } = require('./lib');

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

  // pusher-js refuses client events on encrypted channels, so the relay of an
  // encrypted payload needs HTTP publish (POST /apps/{id}/events), which
  // comes in a later issue.
  test('an event published over HTTP is relayed to both subscribers and decrypted', { todo: 'needs HTTP publish (later issue)' });
});
