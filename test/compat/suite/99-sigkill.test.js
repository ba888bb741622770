// A wsnode SIGKILLed mid-session: the cleaner reaps it and announces
// member_removed for the users that were only on it, to the other node's
// subscribers, within dead-after + scan-interval + 2 s. Users that still
// have a socket on a live node stay members.
//
// This file kills wsnode B (HC_KILL_PID_B): it must run last, with
// --test-concurrency=1.
'use strict';

const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
const { A, B, Client, closeAll, uid, deadAfterMs, scanIntervalMs, memberIds, server, waitUntil } = require('./lib');

const MA = 'pusher_internal:member_added';
const MR = 'pusher_internal:member_removed';
const user = (id) => (f) => f.data && f.data.user_id === id;

// Webhooks: a member of the webhook app held only by node B. Its setup runs
// before the crash below and its check after it: the reap's member_removed
// and channel_vacated reach the batching webhook, in order, valid for the
// Node SDK.
const hooks = require('./webhooks');
const hookRcv = new hooks.Receiver();
const hookChannel = `${hooks.prefix}crash-${uid()}`;

describe('webhooks before the crash', { timeout: 30000 }, () => {
  test('members of the webhook app on node B', async () => {
    await hookRcv.listen();
    for (const user of ['k1', 'k2']) {
      await new Client(`hook-${user}`, B, { app: hooks.hooksApp, presence: { user_id: user } }).subscribe(hookChannel);
    }
    await hookRcv.waitFor([`channel_occupied ${hookChannel}`, `member_added ${hookChannel} k1`, `member_added ${hookChannel} k2`], 15000);
  });
});

// The watchlist across the crash: a user signed in only on node B goes
// offline, for a watcher on node A, when the cleaner reaps B. The node can
// be killed once, by whichever test runs first, so this is two blocks
// around the crash: one before it that sets up the watcher and the
// watched user, one after it that kills B if it still runs and checks the
// offline came within the reap bound of the kill.
const watchCrash = {};

describe('node crash: watchlist, before the kill', { timeout: 30000 }, () => {
  test('a watcher on node A sees a user signed in only on node B online', async () => {
    const id = uid();
    const x = new Client('x', B, { user: { id: `x-${id}` } });
    const w = new Client('w', A, { user: { id: `w-${id}`, watchlist: [`x-${id}`] } });
    const got = [];
    for (const name of ['online', 'offline']) {
      // pusher-js runs this before the frame's tick (lib.js), which re-checks waits.
      w.pusher.user.watchlist.bind(name, (ev) => got.push({ name: ev.name, user_ids: ev.user_ids, at: Date.now() }));
    }
    // When x's connection to node B is lost: the kill, whoever killed.
    x.pusher.connection.bind('state_change', ({ previous, current }) => {
      if (previous === 'connected' && current !== 'connected' && watchCrash.lostAt === undefined) watchCrash.lostAt = Date.now();
    });
    await x.connected();
    x.signin();
    await x.waitFrame('pusher:signin_success');
    await w.connected();
    w.signin();
    await waitUntil(() => got.some((ev) => ev.name === 'online' && ev.user_ids.includes(`x-${id}`)), 5000,
      () => `w to hear x online (got ${JSON.stringify(got)}) ${w.dump()}`);
    // The first status may say offline before x's signin reached Redis:
    // what counts comes after the online.
    Object.assign(watchCrash, { user: `x-${id}`, w, got, since: got.length });
  });
});

// Cache channels across the crash: an event published while node B served
// the channel's subscriber is cached in Redis, not in a node, so node A
// still serves it after B is SIGKILLed (the last block of this file).
const cacheChannel = `cache-crash-${uid()}`;

describe('cache channels before the crash', { timeout: 10000 }, () => {
  test('node B serves a cache channel and receives its event', async () => {
    const onB = new Client('cacheB', B);
    try {
      await onB.subscribe(cacheChannel);
      await onB.waitFrame('pusher:cache_miss', cacheChannel);
      await server.trigger(cacheChannel, 'before-crash', { n: 1 });
      await onB.waitFrame('before-crash', cacheChannel);
    } finally {
      onB.close();
    }
  });
});

// Laravel Echo across the crash: a presence member that joined through
// Echo on node B only leaves, for an Echo member on node A, through Echo's
// leaving() once the cleaner reaps B. Set up before the kill, checked after
// it (the last block of this file).
const echo = require('./echo');
const echoCrash = {};

describe('Laravel Echo before the crash', { timeout: 15000 }, () => {
  test('an Echo member on node A sees an Echo member on node B join', async () => {
    const auth = await new echo.AuthServer().listen();
    const room = `room.crash-${uid()}`;
    const alice = echo.echoOn(auth, A, 'alice-token');
    const bob = echo.echoOn(auth, B, 'bob-token');
    const seen = { here: null, joining: [], leaving: [] };
    alice.join(room)
      .here((m) => { seen.here = m; echo.tick(); })
      .joining((u) => { seen.joining.push(u); echo.tick(); })
      .leaving((u) => { seen.leaving.push({ user: u, at: Date.now() }); echo.tick(); });
    await echo.until(() => seen.here, 5000, 'alice\'s here');
    bob.connector.pusher.connection.bind('state_change', ({ previous, current }) => {
      if (previous === 'connected' && current !== 'connected' && echoCrash.lostAt === undefined) echoCrash.lostAt = Date.now();
    });
    bob.join(room);
    await echo.until(() => seen.joining.length > 0, 5000, () => `alice's joining ${JSON.stringify(seen)}`);
    assert.deepEqual(seen.joining, [echo.users['bob-token']]);
    Object.assign(echoCrash, { auth, seen });
  });
});

describe('node crash', { timeout: 30000 }, () => {
  after(closeAll);

  test('SIGKILL of node B: member_removed for its users reaches node A', async () => {
    const pid = Number(process.env.HC_KILL_PID_B);
    assert.ok(Number.isInteger(pid) && pid > 1, `HC_KILL_PID_B must be the pid of wsnode B, got ${JSON.stringify(process.env.HC_KILL_PID_B)}`);
    const channel = `presence-crash-${uid()}`;
    const obs = new Client('obs', A, { presence: { user_id: 'obs' } });
    const u9 = new Client('u9', B, { presence: { user_id: 'u9' } });
    const bothA = new Client('bothA', A, { presence: { user_id: 'both' } });
    const bothB = new Client('bothB', B, { presence: { user_id: 'both' } });
    try {
      await obs.subscribe(channel);
      await u9.subscribe(channel);
      await obs.waitFrame(MA, channel, user('u9'));
      await bothB.subscribe(channel);
      await obs.waitFrame(MA, channel, user('both'));
      const s = (await bothA.subscribe(channel)).data;
      assert.deepEqual(memberIds(s), ['both', 'obs', 'u9']);

      const budget = deadAfterMs + scanIntervalMs + 2000;
      const killedAt = Date.now();
      process.kill(pid, 'SIGKILL');
      const f = await obs.waitFrame(MR, channel, user('u9'), budget);
      const took = f.at - killedAt;
      assert.ok(took <= budget, `member_removed for u9 after ${took} ms, budget ${budget} ms`);
      await bothA.waitFrame(MR, channel, user('u9'), 2000);

      // "both" still has a socket on node A: the reap must not remove it.
      // Barrier: a new member joins on node A after the reap was seen; its
      // member_added is published after everything the reap announced.
      const late = new Client('late', A, { presence: { user_id: 'late' } });
      await late.subscribe(channel);
      await obs.waitFrame(MA, channel, user('late'));
      assert.equal(obs.count(MR, channel, user('both')), 0,
        `"both" was removed although it still has a socket on node A ${obs.dump(20)}`);
      // Its last socket leaves: now, exactly one member_removed.
      const beforeLeave = obs.frames.length;
      bothA.close();
      await obs.waitFrame(MR, channel, user('both'), 5000, beforeLeave);
      assert.equal(obs.count(MR, channel, user('both')), 1, `exactly one member_removed for "both" ${obs.dump(20)}`);
      late.close();
      await obs.waitFrame(MR, channel, user('late'), 5000);
      assert.equal(obs.count(MR, channel, user('u9')), 1, `exactly one member_removed for u9 ${obs.dump(20)}`);
      assert.deepEqual(memberIds(obs.pusher.channel(channel).members), ['obs']);
      assert.equal(obs.state, 'connected', 'node A\'s client is unaffected');
    } finally {
      closeAll();
    }
  });
});

describe('webhooks after the crash', { timeout: 30000 }, () => {
  after(() => hookRcv.close());

  test('SIGKILL of node B: its members\' webhooks arrive through the batching webhook', async () => {
    const pid = Number(process.env.HC_KILL_PID_B);
    assert.throws(() => process.kill(pid, 0), /ESRCH/, 'node B is still alive: this check runs after the crash test');
    // The reap, then the 3 s debounce of member_removed and channel_vacated.
    const got = await hookRcv.waitFor([`member_removed ${hookChannel} k1`, `member_removed ${hookChannel} k2`, `channel_vacated ${hookChannel}`],
      deadAfterMs + scanIntervalMs + 3000 + 8000);
    const mine = got.filter((e) => e.split(' ')[1] === hookChannel);
    assert.deepEqual(mine.slice(0, 3).map((e) => e.split(' ')[0]), ['channel_occupied', 'member_added', 'member_added']);
    assert.deepEqual(mine.slice(3, 5).map((e) => e.split(' ')[0]).sort(), ['member_removed', 'member_removed']);
    assert.equal(mine[5], `channel_vacated ${hookChannel}`, `channel_vacated after the members: ${JSON.stringify(mine)}`);
    assert.equal(mine.length, 6, `each event once: ${JSON.stringify(mine)}`);
    // One reap unit logs both leaves at once, so they share a request.
    assert.ok(hookRcv.requests.some((r) => r.events.includes(`member_removed ${hookChannel} k1`) && r.events.includes(`member_removed ${hookChannel} k2`)),
      `the reap's member_removed events came in separate requests: ${JSON.stringify(hookRcv.requests.map((r) => r.events))}`);
    for (const r of hookRcv.requests) {
      assert.ok(r.events.length <= hooks.batchSize);
      assert.equal(r.token, hooks.token);
    }
  });
});

describe('node crash: watchlist, after the kill', { timeout: 30000 }, () => {
  after(closeAll);

  test('SIGKILL of node B: a user signed in only there goes offline for a watcher on node A', async () => {
    const { user, w, got, since } = watchCrash;
    assert.ok(w, 'the watcher was set up before the kill');
    const pid = Number(process.env.HC_KILL_PID_B);
    let alive = true;
    try {
      process.kill(pid, 0);
    } catch (_) {
      alive = false;
    }
    if (alive) {
      process.kill(pid, 'SIGKILL');
    }
    const budget = deadAfterMs + scanIntervalMs + 2000;
    const offline = () => got.slice(since).find((ev) => ev.name === 'offline' && ev.user_ids.includes(user));
    await waitUntil(() => watchCrash.lostAt !== undefined && offline(), budget + 1000,
      () => `w to hear ${user} offline (got ${JSON.stringify(got)}) ${w.dump()}`);
    const took = offline().at - watchCrash.lostAt;
    assert.ok(took <= budget, `offline for ${user} ${took} ms after node B was lost, budget ${budget} ms`);
    assert.deepEqual(got.slice(since).map((ev) => ev.name), ['offline'], `one offline, nothing else ${JSON.stringify(got)}`);
  });
});

describe('cache channels after the crash', { timeout: 10000 }, () => {
  test('SIGKILL of node B: node A still serves the event cached before it', async () => {
    const pid = Number(process.env.HC_KILL_PID_B);
    assert.ok(Number.isInteger(pid) && pid > 1, `HC_KILL_PID_B must be the pid of wsnode B, got ${JSON.stringify(process.env.HC_KILL_PID_B)}`);
    try {
      process.kill(pid, 'SIGKILL'); // when this block runs alone; else B is dead already
    } catch (err) {
      assert.equal(err.code, 'ESRCH', `SIGKILL of wsnode B: ${err}`);
    }
    const onA = new Client('cacheA', A);
    try {
      await onA.subscribe(cacheChannel);
      const f = await waitUntil(() => onA.frames.find((x) => x.channel === cacheChannel && x.event !== 'pusher_internal:subscription_succeeded'),
        5000, () => `a frame after subscription_succeeded ${onA.dump()}`);
      assert.equal(f.event, 'before-crash', `the cached event ${onA.dump()}`);
      assert.deepEqual(f.data, { n: 1 });
    } finally {
      closeAll();
    }
  });
});

// A load balancer's view of the crash: node B's public port stops
// answering /up at once (nothing listens), while node A's keeps answering
// 200, so a balancer checking /up sends new connections to A only.
describe('node crash: /up on the public ports', { timeout: 30000 }, () => {
  const { hosts } = require('./lib');
  const { setTimeout: delay } = require('node:timers/promises');
  const up = async (i) => {
    const { host, port } = hosts[i];
    const h = host.includes(':') ? `[${host}]` : host;
    try {
      const res = await fetch(`http://${h}:${port}/up`, { signal: AbortSignal.timeout(5000) });
      return res.status;
    } catch (_) {
      return 0; // refused: nothing listens
    }
  };

  test('SIGKILL of node B: B does not answer /up, A answers 200 throughout', async () => {
    assert.equal(await up(A), 200, 'node A is ready');
    const pid = Number(process.env.HC_KILL_PID_B);
    let alive = true;
    try {
      process.kill(pid, 0);
    } catch (_) {
      alive = false;
    }
    if (alive) {
      assert.equal(await up(B), 200, 'node B is ready before the kill');
      process.kill(pid, 'SIGKILL');
    }
    // A poll with a deadline: nothing tells a test when a port closes.
    const deadline = Date.now() + 5000;
    for (let status; (status = await up(B)) !== 0;) {
      assert.ok(Date.now() < deadline, `node B still answers /up (${status}) 5 s after the kill`);
      await delay(20);
    }
    for (let i = 0; i < 5; i++) {
      assert.equal(await up(A), 200, 'node A stays ready after B is gone');
    }
  });
});

describe('Laravel Echo after the crash', { timeout: 15000 }, () => {
  after(() => {
    echo.closeEchoes();
    if (echoCrash.auth) echoCrash.auth.close();
  });

  test('SIGKILL of node B: Echo\'s leaving() fires on node A for the member only B held', async () => {
    const { seen } = echoCrash;
    assert.ok(seen, 'the Echo members were set up before the kill');
    const pid = Number(process.env.HC_KILL_PID_B);
    try {
      process.kill(pid, 'SIGKILL'); // when this block runs alone; else B is dead already
    } catch (err) {
      assert.equal(err.code, 'ESRCH', `SIGKILL of wsnode B: ${err}`);
    }
    const budget = deadAfterMs + scanIntervalMs + 2000;
    await echo.until(() => echoCrash.lostAt !== undefined && seen.leaving.length > 0, budget + 1000,
      () => `alice's leaving for bob ${JSON.stringify(seen)}`);
    assert.deepEqual(seen.leaving.map((l) => l.user), [echo.users['bob-token']]);
    const took = seen.leaving[0].at - echoCrash.lostAt;
    assert.ok(took <= budget, `leaving for bob ${took} ms after node B was lost, budget ${budget} ms`);
  });
});
