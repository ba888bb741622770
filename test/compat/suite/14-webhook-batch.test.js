// Batched webhooks with headers and a filter, checked with the `pusher` Node
// SDK: real pusher-js clients on both wsnodes of the webhook app cause
// occupancy, member and client events; they reach the receiver in requests
// of several events (at most the batch size), each valid for the SDK,
// carrying the webhook's header, a channel's events in order, and only the
// channels the filter lets through.
'use strict';

const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
const { A, B, Client, closeAll, uid } = require('./lib');
const { hooksApp, batchSize, token, prefix, Receiver } = require('./webhooks');

describe('webhooks: batch, headers, filter', { timeout: 30000 }, () => {
  const rcv = new Receiver();
  after(() => {
    closeAll();
    rcv.close();
  });

  test('events of both nodes arrive batched, in order, valid for the Node SDK', async () => {
    await rcv.listen();
    const channel = `${prefix}${uid()}`;
    const other = `presence-nohook-${uid()}`;
    const a = new Client('a', A, { app: hooksApp, presence: { user_id: 'ua' } });
    const b = new Client('b', B, { app: hooksApp, presence: { user_id: 'ub' } });
    const { channel: ch } = await a.subscribe(channel);
    await b.subscribe(channel);
    await a.subscribe(other);
    const want = [];
    for (let i = 0; i < 6; i++) {
      assert.ok(ch.trigger('client-n', { n: i }), 'client event not sent');
      want.push(`client_event ${channel} ua client-n {"n":${i}}`);
    }
    const got = await rcv.waitFor([`channel_occupied ${channel}`, `member_added ${channel} ua`, `member_added ${channel} ub`, ...want], 15000);

    // A socket's client events, in order, each once.
    const seen = got.filter((e) => e.startsWith('client_event '));
    assert.deepEqual(seen, want);
    assert.ok(!got.some((e) => e.includes(other)), `the filter let ${other} through: ${JSON.stringify(got)}`);
    assert.ok(rcv.requests.some((r) => r.events.length > 1), `no request carried several events: ${JSON.stringify(rcv.requests.map((r) => r.events))}`);
    for (const r of rcv.requests) {
      assert.ok(r.events.length <= batchSize, `a request of ${r.events.length} events, over the batch size ${batchSize}`);
      assert.equal(r.token, token, 'the webhook\'s header');
    }
  });
});
