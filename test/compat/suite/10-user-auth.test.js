// Apps with enableUserAuthentication: a connection must sign in (or hold a
// private or presence subscription) within the wsnodes' --user-auth-timeout,
// else it is closed with 4009, which pusher-js does not reconnect from.
'use strict';

const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
const { A, B, Client, closeAll, uid, app4, userAuthTimeoutMs, waitUntil } = require('./lib');

describe('user authentication required', { timeout: 30000, skip: app4 ? false : 'HC_APP4_KEY not set' }, () => {
  after(closeAll);

  test('a client without signin() is closed with 4009; one that signs in, and one on a private channel, stay', async () => {
    // The authorized clients connect first, so their deadlines have passed
    // by the time the anonymous one is closed.
    const signed = new Client('signed', A, { app: app4, user: { id: `u-${uid()}`, user_info: {} } });
    const priv = new Client('private', B, { app: app4 });
    await Promise.all([signed.connected(), priv.connected()]);
    signed.signin();
    await signed.waitFrame('pusher:signin_success');
    await priv.subscribe(`private-${uid()}`);

    const began = Date.now();
    const anon = new Client('anon', A, { app: app4 });
    await anon.connected();
    await anon.subscribe(`public-${uid()}`); // a public channel does not authorize
    const f = await anon.waitFrame('pusher:error', undefined, (x) => x.data && x.data.code === 4009, userAuthTimeoutMs + 5000);
    assert.match(f.data.message, /not authorized/);
    await waitUntil(() => anon.state !== 'connected', 5000, () => `anon to be disconnected ${anon.dump()}`);
    assert.ok(Date.now() - began >= userAuthTimeoutMs - 1000, `closed after ${Date.now() - began} ms, before the timeout`);
    assert.equal(anon.states.filter((s) => s === 'connected').length, 1, `4009 is final for pusher-js, got states ${anon.states.join(',')}`);

    // The authorized clients are still served.
    await Promise.all([signed.subscribe(`after-${uid()}`), priv.subscribe(`after-${uid()}`)]);
    assert.equal(signed.state, 'connected');
    assert.equal(priv.state, 'connected');
    for (const c of [signed, priv]) assert.equal(c.states.filter((s) => s === 'connected').length, 1, `${c.name} reconnected`);
  });
});
