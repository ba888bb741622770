// Admission (headcount's own): a presence channel of capacity 1. The app's
// server admits users through the HTTP API with the `pusher` Node SDK's
// signed post(); pusher-js clients are refused with AdmissionRequired
// without a seat, and a refused client that stays connected is told on the
// channel when it is admitted, then subscribes on the same channel object.
'use strict';

const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
const { A, B, Client, closeAll, uid, server, memberIds } = require('./lib');

async function admission(channel, user) {
  const res = await server.post({ path: `/channels/${channel}/admission`, body: { user_id: user } });
  return res.json();
}

describe('admission', { timeout: 30000 }, () => {
  after(closeAll);

  test('only a seat holder subscribes; a connected waiter is told when admitted', async () => {
    const channel = `presence-cap-${uid()}`;
    const who = (user_id) => ({ presence: { user_id, user_info: {} } });
    assert.equal((await admission(channel, 'alice')).status, 'admitted');
    const alice = new Client('alice', A, who('alice'));
    await alice.subscribe(channel);

    const waiting = await admission(channel, 'bob');
    assert.deepEqual(waiting, { status: 'waiting', position: 1, waiting: 1, capacity: 1, occupancy: 1 });
    const bob = new Client('bob', B, who('bob'));
    const refused = await bob.subscriptionError(channel);
    assert.equal(refused.type, 'AdmissionRequired', JSON.stringify(refused));
    assert.equal(refused.status, 403);
    assert.match(refused.error, /number 1 of 1/);

    const ch = bob.pusher.channel(channel);
    const admitted = bob.collect(channel, 'headcount:admission_admitted');
    alice.close(); // her seat is kept for the grace (1 s), then goes to bob
    await bob.waitFrame('headcount:admission_admitted', channel, () => true, 10000);
    assert.equal(admitted.length, 1);
    assert.equal(admitted[0].data.expires_in, 30);

    const ok = new Promise((resolve, reject) => {
      ch.bind('pusher:subscription_succeeded', resolve);
      ch.bind('pusher:subscription_error', (e) => reject(new Error(`bob refused again: ${JSON.stringify(e)} ${bob.dump()}`)));
    });
    ch.subscribe();
    const members = await ok;
    assert.deepEqual(memberIds(members), ['bob']);
  });
});
