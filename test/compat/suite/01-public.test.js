// Public channels on both wsnodes, counted once cluster-wide.
'use strict';

const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
const { A, B, Client, closeAll, uid, pollChannel } = require('./lib');

describe('public channels', { timeout: 20000 }, () => {
  after(closeAll);

  test('subscribe succeeds on both nodes and the HTTP API counts both', async () => {
    const channel = `pub-${uid()}`;
    const a = new Client('a', A);
    const b = new Client('b', B);
    try {
      const [sa, sb] = await Promise.all([a.connected(), b.connected()]);
      for (const s of [sa, sb]) assert.match(s, /^\d+\.\d+$/, `socket_id ${s} must match ^\\d+\\.\\d+$ (the pusher SDKs reject anything else)`);
      assert.notEqual(sa, sb, 'socket ids must be unique across the cluster');
      await Promise.all([a.subscribe(channel), b.subscribe(channel)]);
      await pollChannel(channel, 'subscription_count', (r) => r.occupied === true && r.subscription_count === 2, 5000,
        `${channel} to have subscription_count 2 (one subscriber on each node)`);
    } finally {
      a.close();
      b.close();
    }
  });
});
