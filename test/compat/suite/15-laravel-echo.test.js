// Laravel Echo 2 over pusher-js 8, configured by docs/MIGRATING.md's
// example (suite/echo.js runs the guide's block as written), across the two
// wsnodes: presence here/joining/leaving, whisper/listenForWhisper (client
// events, on in the default app), events broadcast by a Laravel app under
// its App\Events namespace, and encryptedPrivate channels, every
// authorization going through the guide's authorizer.
'use strict';

const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { A, B, server, uid, pollChannel } = require('./lib');
const { AuthServer, echoOn, closeEchoes, subscribed, until, tick, repeatUntil, users } = require('./echo');

const byId = (list) => [...list].sort((x, y) => x.id - y.id);

describe('Laravel Echo, configured as docs/MIGRATING.md shows', { timeout: 30000 }, () => {
  let auth;
  before(async () => {
    auth = await new AuthServer().listen();
  });
  after(() => {
    closeEchoes();
    auth.close();
  });

  test('presence: here, joining and leaving, the members on two nodes', async () => {
    const room = `room.${uid()}`;
    const alice = echoOn(auth, A, 'alice-token');
    const bob = echoOn(auth, B, 'bob-token');
    const seen = { here: null, joining: [], leaving: [] };
    alice.join(room)
      .here((members) => { seen.here = members; tick(); })
      .joining((user) => { seen.joining.push(user); tick(); })
      .leaving((user) => { seen.leaving.push(user); tick(); });
    await until(() => seen.here, 5000, 'alice\'s here');
    assert.deepEqual(seen.here, [users['alice-token']]);
    // Alice's membership reaches Redis within node A's flush window after
    // her subscription succeeds: Bob, on node B, arrives once it has.
    await pollChannel(`presence-${room}`, 'user_count', (c) => c.user_count === 1, 5000, 'alice counted cluster-wide');

    let bobHere = null;
    bob.join(room).here((members) => { bobHere = members; tick(); });
    await until(() => bobHere && seen.joining.length > 0, 5000, () => `bob's here and alice's joining ${JSON.stringify({ bobHere, seen })}`);
    assert.deepEqual(byId(bobHere), [users['alice-token'], users['bob-token']], 'bob, on node B, sees alice, on node A');
    assert.deepEqual(seen.joining, [users['bob-token']]);

    bob.leave(room);
    await until(() => seen.leaving.length > 0, 5000, 'alice\'s leaving');
    assert.deepEqual(seen.leaving, [users['bob-token']]);
    assert.ok(auth.requests.some((r) => r.channel === `presence-${room}` && r.status === 200), 'authorized through the guide\'s authorizer');
  });

  test('whisper reaches listenForWhisper on the other node, not the sender', async () => {
    const name = `chat.${uid()}`;
    const alice = echoOn(auth, A, 'alice-token');
    const bob = echoOn(auth, B, 'bob-token');
    const toAlice = [];
    const toBob = [];
    const onAlice = await subscribed(alice.private(name).listenForWhisper('typing', (e) => { toAlice.push(e); tick(); }));
    const onBob = await subscribed(bob.private(name).listenForWhisper('typing', (e) => { toBob.push(e); tick(); }));
    await repeatUntil(() => onBob.whisper('typing', { name: 'Bob' }), () => toAlice.length > 0, 'alice to hear bob typing');
    assert.deepEqual(toAlice[0], { name: 'Bob' });
    onAlice.whisper('typing', { name: 'Alice' });
    await until(() => toBob.length > 0, 5000, 'bob to hear alice typing');
    assert.deepEqual(toBob, [{ name: 'Alice' }], 'a whisper is not echoed to its sender');
  });

  test('an App\\Events\\OrderShipped broadcast reaches .listen(\'OrderShipped\') on both nodes', async () => {
    const name = `orders.${uid()}`;
    const got = { A: [], B: [] };
    for (const [node, who] of [[A, 'A'], [B, 'B']]) {
      await subscribed(echoOn(auth, node, 'carol-token').channel(name).listen('OrderShipped', (e) => { got[who].push(e); tick(); }));
    }
    // What Laravel's PusherBroadcaster sends for `class OrderShipped
    // implements ShouldBroadcast` with a public $order: the class name as
    // the event, its public properties as the data.
    await repeatUntil(() => server.trigger(name, 'App\\Events\\OrderShipped', { order: { id: 7 } }),
      () => got.A.length > 0 && got.B.length > 0, () => `OrderShipped on both nodes ${JSON.stringify(got)}`);
    assert.deepEqual(got.A[0], { order: { id: 7 } });
    assert.deepEqual(got.B[0], { order: { id: 7 } });
  });

  test('encryptedPrivate: an event encrypted by the server SDK is decrypted on both nodes', async () => {
    const name = `payments.${uid()}`;
    const got = { A: [], B: [] };
    for (const [node, who] of [[A, 'A'], [B, 'B']]) {
      await subscribed(echoOn(auth, node, 'alice-token').encryptedPrivate(name).listen('PaymentReceived', (e) => { got[who].push(e); tick(); }));
    }
    await repeatUntil(() => server.trigger(`private-encrypted-${name}`, 'App\\Events\\PaymentReceived', { amount: 42, note: 'héllo' }),
      () => got.A.length > 0 && got.B.length > 0, () => `PaymentReceived on both nodes ${JSON.stringify(got)}`);
    assert.deepEqual(got.A[0], { amount: 42, note: 'héllo' });
    assert.deepEqual(got.B[0], { amount: 42, note: 'héllo' });
    const encrypted = auth.requests.filter((r) => r.channel === `private-encrypted-${name}`);
    assert.equal(encrypted.length, 2, 'each node\'s client authorized once through the guide\'s authorizer');
  });

  test('a user the app does not know is refused by the authorizer, and Echo reports it', async () => {
    const stranger = echoOn(auth, A, 'no-such-token');
    await assert.rejects(subscribed(stranger.private(`chat.${uid()}`)), /subscription error/);
  });
});
