// lib.js: shared helpers for the compatibility suite (suite/*.test.js).
//
// The suite drives real pusher-js 8 clients (node build) against two headcount
// wsnodes and signs every channel authorization, user signin and HTTP API
// request with the real `pusher` Node SDK 5. Targets come from the
// environment, set by test/e2e/compat_test.go (TestPusherJSCompat):
//
//   HC_WS_HOSTS          host:port,host:port of wsnode A and wsnode B
//   HC_APP_ID, HC_APP_KEY, HC_APP_SECRET
//                        the app (client events enabled)
//   HC_APP2_ID, HC_APP2_KEY, HC_APP2_SECRET
//                        optional second app with client events disabled
//   HC_APP3_ID, HC_APP3_KEY, HC_APP3_SECRET
//                        optional third app with subscription_count enabled
//   HC_APP4_ID, HC_APP4_KEY, HC_APP4_SECRET
//                        optional fourth app with enableUserAuthentication
//   HC_USER_AUTH_TIMEOUT_MS
//                        the wsnodes' --user-auth-timeout (default 30000)
//   HC_API               httpapi host:port
//   HC_KILL_PID_B        pid of wsnode B (99-sigkill.test.js SIGKILLs it)
//   HC_DEAD_AFTER_MS, HC_SCAN_INTERVAL_MS
//                        the cleaners' --dead-after and --scan-interval
//                        (default 2000 and 250)
//
// Every wait is bounded and event-driven (re-checked on every frame or state
// change of any client) or, for the HTTP API, a short poll with a deadline.
'use strict';

const crypto = require('node:crypto');
const { EventEmitter } = require('node:events');
const { setTimeout: delay } = require('node:timers/promises');
const PusherJS = require('pusher-js');
const PusherServer = require('pusher');

function env(name, def) {
  const v = process.env[name];
  if (v === undefined || v === '') {
    if (def !== undefined) return def;
    throw new Error(`${name} is not set: run the suite through test/e2e (go test -run TestPusherJSCompat ./test/e2e/)`);
  }
  return v;
}

function hostPort(s) {
  const m = /^(.+):(\d{1,5})$/.exec(s.trim());
  if (!m) throw new Error(`${JSON.stringify(s)} is not host:port`);
  return { host: m[1].replace(/^\[(.*)\]$/, '$1'), port: Number(m[2]) };
}

const hosts = env('HC_WS_HOSTS').split(',').filter((s) => s.trim() !== '').map(hostPort);
if (hosts.length < 2) throw new Error(`HC_WS_HOSTS must name two wsnodes, got ${JSON.stringify(process.env.HC_WS_HOSTS)}`);
const A = 0;
const B = 1;
const api = hostPort(env('HC_API'));
const deadAfterMs = Number(env('HC_DEAD_AFTER_MS', '2000'));
const scanIntervalMs = Number(env('HC_SCAN_INTERVAL_MS', '250'));

// One master key per run: the SDK derives each encrypted channel's
// shared_secret from it; the server never sees it.
const encryptionMasterKeyBase64 = crypto.randomBytes(32).toString('base64');

function serverSDK(app, secret) {
  return new PusherServer({
    appId: app.id,
    key: app.key,
    secret: secret || app.secret,
    host: api.host,
    port: api.port,
    useTLS: false,
    timeout: 5000,
    encryptionMasterKeyBase64,
  });
}

const app = { id: env('HC_APP_ID'), key: env('HC_APP_KEY'), secret: env('HC_APP_SECRET') };
const app2 = process.env.HC_APP2_KEY
  ? { id: env('HC_APP2_ID'), key: env('HC_APP2_KEY'), secret: env('HC_APP2_SECRET') }
  : null;
const app3 = process.env.HC_APP3_KEY
  ? { id: env('HC_APP3_ID'), key: env('HC_APP3_KEY'), secret: env('HC_APP3_SECRET') }
  : null;
const app4 = process.env.HC_APP4_KEY
  ? { id: env('HC_APP4_ID'), key: env('HC_APP4_KEY'), secret: env('HC_APP4_SECRET') }
  : null;
const userAuthTimeoutMs = Number(env('HC_USER_AUTH_TIMEOUT_MS', '30000'));
const server = serverSDK(app);
// Same app id and key, wrong secret: signatures it makes must be refused.
const wrongServer = serverSDK(app, app.secret + '-wrong');

// A unique suffix so that tests never share a channel or a user.
function uid() {
  return `${Date.now().toString(36)}${crypto.randomBytes(3).toString('hex')}`;
}

// bus ticks on every frame and state change of every client; waitUntil
// re-evaluates its condition on each tick.
const bus = new EventEmitter();
bus.setMaxListeners(0);

function describeOf(what) {
  try {
    return typeof what === 'function' ? what() : String(what);
  } catch (err) {
    return `(describe failed: ${err})`;
  }
}

// waitUntil resolves with cond()'s first truthy value, re-checking it on every
// client frame or state change, and rejects after ms.
function waitUntil(cond, ms, what) {
  return new Promise((resolve, reject) => {
    let timer = null;
    const check = () => {
      let v;
      try {
        v = cond();
      } catch (err) {
        done();
        reject(err);
        return;
      }
      if (v) {
        done();
        resolve(v);
      }
    };
    const done = () => {
      clearTimeout(timer);
      bus.off('tick', check);
    };
    // unref: a wait must not keep a test file's process alive once its
    // clients are closed (the test would then fail as cancelled, not hang).
    timer = setTimeout(() => {
      done();
      reject(new Error(`timed out after ${ms} ms waiting for ${describeOf(what)}`));
    }, ms).unref();
    bus.on('tick', check);
    check();
  });
}

const allClients = new Set();

function short(v, n = 300) {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return s && s.length > n ? s.slice(0, n) + '…' : s;
}

// Client is one real pusher-js connection to wsnode A or B that records every
// frame it receives (already decoded by pusher-js) in .frames.
//
// opts.presence: {user_id, user_info} put in channel_data for presence
//   channels (omit it to subscribe to presence on the strength of a signin).
// opts.user: {id, user_info} used by pusher.signin().
// opts.authorize(socketId, channelName): returns the auth object, replacing
//   the default (correct) authorization.
// opts.app: the app ({key, ...}) to connect to; the default app otherwise.
class Client {
  constructor(name, node, opts = {}) {
    this.name = name;
    this.node = node;
    this.opts = opts;
    this.frames = [];
    this.states = [];
    this.errors = [];
    this.closed = false;
    this.pending = new Set(); // cancels subscribe() waits when the client closes
    const { host, port } = hosts[node];
    this.where = `${host}:${port}`;
    const theApp = opts.app || app;
    this.sdk = theApp === app ? server : serverSDK(theApp);
    this.pusher = new PusherJS(theApp.key, {
      cluster: 'local', // required by pusher-js 8; unused since wsHost is set
      wsHost: host,
      wsPort: port,
      forceTLS: false,
      enabledTransports: ['ws'],
      enableStats: false,
      channelAuthorization: { customHandler: (params, cb) => this.authorizeChannel(params, cb) },
      userAuthentication: { customHandler: (params, cb) => this.authenticateUser(params, cb) },
    });
    this.pusher.connection.bind('message', (ev) => {
      // A copy: pusher-js keeps (and later mutates) objects such as the
      // presence hash it receives.
      const data = ev.data !== null && typeof ev.data === 'object' ? JSON.parse(JSON.stringify(ev.data)) : ev.data;
      this.frames.push({ event: ev.event, channel: ev.channel, data, user_id: ev.user_id, at: Date.now() });
      bus.emit('tick');
    });
    this.pusher.connection.bind('state_change', (s) => {
      this.states.push(s.current);
      bus.emit('tick');
    });
    this.pusher.connection.bind('error', (err) => {
      this.errors.push(err);
      bus.emit('tick');
    });
    allClients.add(this);
  }

  // authorizeChannel is pusher-js's channelAuthorization.customHandler:
  // ({socketId, channelName}, callback(error, {auth, channel_data?, shared_secret?})).
  authorizeChannel({ socketId, channelName }, cb) {
    let auth;
    try {
      if (this.opts.authorize) auth = this.opts.authorize(socketId, channelName);
      else if (channelName.startsWith('presence-') && this.opts.presence) {
        auth = this.sdk.authorizeChannel(socketId, channelName, this.opts.presence);
      } else auth = this.sdk.authorizeChannel(socketId, channelName);
    } catch (err) {
      cb(err, null);
      return;
    }
    cb(null, auth);
  }

  // authenticateUser is pusher-js's userAuthentication.customHandler:
  // ({socketId}, callback(error, {auth, user_data})).
  authenticateUser({ socketId }, cb) {
    if (!this.opts.user) {
      cb(new Error(`${this.name} has no user to sign in`), null);
      return;
    }
    let auth;
    try {
      auth = this.sdk.authenticateUser(socketId, this.opts.user);
    } catch (err) {
      cb(err, null);
      return;
    }
    cb(null, auth);
  }

  get state() {
    return this.pusher.connection.state;
  }

  get socketId() {
    return this.pusher.connection.socket_id;
  }

  dump(n = 12) {
    const tail = this.frames.slice(-n).map((f) => `${f.event}${f.channel ? ' ' + f.channel : ''}${f.data !== undefined ? ' ' + short(f.data, 160) : ''}${f.user_id ? ' user_id=' + f.user_id : ''}`);
    return `[${this.name} on ${this.where}, state ${this.state}, socket ${this.socketId}; last frames: ${tail.length ? tail.join(' | ') : 'none'}${this.errors.length ? '; errors: ' + short(this.errors.map((e) => e && (e.error || e.data || e.type || String(e))), 400) : ''}]`;
  }

  async connected(ms = 5000) {
    await waitUntil(() => this.state === 'connected', ms, () => `${this.name} to connect ${this.dump()}`);
    return this.socketId;
  }

  // subscribe resolves with {channel, data} on pusher:subscription_succeeded
  // (data is the Members object on presence channels) and rejects on
  // pusher:subscription_error or after ms.
  subscribe(name, ms = 5000) {
    const ch = this.pusher.subscribe(name);
    return new Promise((resolve, reject) => {
      const cleanup = () => {
        clearTimeout(timer);
        this.pending.delete(cancel);
        ch.unbind('pusher:subscription_succeeded', ok);
        ch.unbind('pusher:subscription_error', bad);
      };
      const cancel = () => {
        cleanup();
        reject(new Error(`${this.name}: closed while subscribing to ${name} ${this.dump()}`));
      };
      this.pending.add(cancel);
      const ok = (data) => {
        cleanup();
        resolve({ channel: ch, data });
      };
      const bad = (data) => {
        cleanup();
        const err = new Error(`${this.name}: pusher:subscription_error on ${name}: ${short(data)} ${this.dump()}`);
        err.data = data;
        reject(err);
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`${this.name}: no pusher:subscription_succeeded on ${name} within ${ms} ms ${this.dump()}`));
      }, ms).unref();
      ch.bind('pusher:subscription_succeeded', ok);
      ch.bind('pusher:subscription_error', bad);
    });
  }

  // subscriptionError resolves with the data of pusher:subscription_error on
  // name and rejects if the subscription succeeds instead, or after ms.
  subscriptionError(name, ms = 5000) {
    return this.subscribe(name, ms).then(
      () => {
        throw new Error(`${this.name}: subscription to ${name} succeeded, want pusher:subscription_error ${this.dump()}`);
      },
      (err) => {
        if (err.data !== undefined) return err.data;
        throw err;
      },
    );
  }

  // bindCollect records every (data, metadata) of eventName on channel.
  collect(channelName, eventName) {
    const got = [];
    this.pusher.channel(channelName).bind(eventName, (data, metadata) => {
      got.push({ data, metadata });
      bus.emit('tick');
    });
    return got;
  }

  // count returns how many recorded frames match event, channel and pred.
  count(event, channel, pred = () => true) {
    return this.frames.filter((f) => f.event === event && (channel === undefined || f.channel === channel) && pred(f)).length;
  }

  // waitFrame resolves with the first recorded frame (at index >= since)
  // matching event, channel and pred.
  waitFrame(event, channel, pred = () => true, ms = 5000, since = 0) {
    return waitUntil(
      () => this.frames.slice(since).find((f) => f.event === event && (channel === undefined || f.channel === channel) && pred(f)),
      ms,
      () => `${this.name} to receive ${event}${channel ? ' on ' + channel : ''} ${this.dump()}`,
    );
  }

  // waitAny resolves with the first recorded frame (at index >= since) for
  // which pred holds.
  waitAny(pred, ms = 5000, since = 0, what = 'a matching frame') {
    return waitUntil(() => this.frames.slice(since).find(pred), ms, () => `${this.name} to receive ${what} ${this.dump()}`);
  }

  signin() {
    this.pusher.signin();
  }

  close() {
    if (this.closed) return;
    this.closed = true;
    for (const cancel of [...this.pending]) cancel();
    try {
      this.pusher.disconnect();
    } catch (_) {
      // already gone
    }
    allClients.delete(this);
  }
}

function closeAll() {
  for (const c of [...allClients]) c.close();
}

// memberIds lists the user ids of a pusher-js Members object, sorted.
function memberIds(members) {
  const ids = [];
  members.each((m) => ids.push(m.id));
  return ids.sort();
}

// NotImplemented is thrown by channelInfo when the HTTP API answers 501.
class NotImplemented extends Error {}

// channelInfo GETs /apps/{id}/channels/{name}?info=... through the pusher SDK.
async function channelInfo(name, info) {
  try {
    const res = await server.get({ path: `/channels/${name}`, params: info ? { info } : {} });
    return await res.json();
  } catch (err) {
    if (err && err.status === 501) throw new NotImplemented(`HTTP API answers 501 for ${name}?info=${info}: ${String(err.body || '').trim()}`);
    if (err && err.status) throw new Error(`GET /channels/${name}?info=${info}: HTTP ${err.status}: ${String(err.body || '').trim()}`);
    throw err;
  }
}

// pollChannel polls channelInfo every 50 ms until pred(body) holds, and throws
// with the last answer after ms. NotImplemented is thrown at once.
async function pollChannel(name, info, pred, ms, what) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      last = await channelInfo(name, info);
      if (pred(last)) return last;
    } catch (err) {
      if (err instanceof NotImplemented) throw err;
      last = String(err.message || err);
    }
    if (Date.now() >= deadline) {
      throw new Error(`timed out after ${ms} ms waiting for ${what}: last answer for ${name}?info=${info}: ${short(last)}`);
    }
    await delay(50);
  }
}

module.exports = {
  A,
  B,
  hosts,
  app,
  app2,
  app3,
  app4,
  userAuthTimeoutMs,
  server,
  wrongServer,
  deadAfterMs,
  scanIntervalMs,
  uid,
  waitUntil,
  Client,
  closeAll,
  memberIds,
  channelInfo,
  pollChannel,
  NotImplemented,
};
