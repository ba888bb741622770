// echo.js: Laravel Echo clients configured by docs/MIGRATING.md's own
// example, for 15-laravel-echo.test.js and 99-sigkill.test.js.
//
// The guide's `new Echo({...})` block is read from the guide and run as
// written, with what a Vite build would supply given as arguments: the
// VITE_PUSHER_* values (a wsnode's host and port, scheme http), the Pusher
// class (pusher-js 8) and fetch, which sends the guide's relative
// /api/broadcasting/auth to AuthServer below. So the guide's snippet is the
// one the suite proves: change one and the other follows.
//
// AuthServer stands in for a Laravel app's broadcasting auth route: it
// answers what Laravel's PusherBroadcaster answers (pusher-http-php's
// authorizeChannel / authorizePresenceChannel), signed here by the pusher
// Node SDK with the same app secret and encryption master key.
'use strict';

const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const { EventEmitter } = require('node:events');
const PusherJS = require('pusher-js');
const { app, hosts, server } = require('./lib');

// laravel-echo 2 is an ES module ("type": "module"; its CommonJS build
// does not load under Node's require), so it is imported once, by
// AuthServer.listen, which every test file awaits first.
let Echo = null;
const guide = path.join(__dirname, '..', '..', '..', 'docs', 'MIGRATING.md');

// guideEcho compiles the guide's example into a function of what the page
// would have: (Echo, Pusher, env, fetch, apiToken) => the Echo instance.
function guideEcho() {
  const md = fs.readFileSync(guide, 'utf8');
  const m = /<!-- echo-example[^>]*-->\s*```js\n([\s\S]*?)```\s*<!-- \/echo-example -->/.exec(md);
  if (!m) throw new Error(`${guide} has no <!-- echo-example --> js block`);
  const body = m[1]
    .replace(/^import .*$/gm, '') // the module's imports are the function's arguments
    .replace('window.Echo = ', 'return ')
    .replaceAll('import.meta.env', 'env');
  if (!body.includes('return new Echo(')) throw new Error(`the guide's example does not assign window.Echo = new Echo(...)`);
  // eslint-disable-next-line no-new-func
  return new Function('Echo', 'Pusher', 'env', 'fetch', 'apiToken', body);
}
const makeEcho = guideEcho();

// ticks on every Echo callback the tests record; until re-checks on each.
const ticks = new EventEmitter();
ticks.setMaxListeners(0);
const tick = () => ticks.emit('tick');

// until resolves with cond()'s first truthy value, checked on every tick
// and every 50 ms, or rejects after ms.
function until(cond, ms, what) {
  return new Promise((resolve, reject) => {
    const check = () => {
      const v = cond();
      if (v) {
        done();
        resolve(v);
      }
    };
    const poll = setInterval(check, 50);
    const timer = setTimeout(() => {
      done();
      reject(new Error(`timed out after ${ms} ms waiting for ${typeof what === 'function' ? what() : what}`));
    }, ms);
    const done = () => {
      clearInterval(poll);
      clearTimeout(timer);
      ticks.off('tick', check);
    };
    ticks.on('tick', check);
    check();
  });
}

// Users by API token, as a Laravel app's Sanctum guard would find them.
const users = {
  'alice-token': { id: 1, name: 'Alice' },
  'bob-token': { id: 2, name: 'Bob' },
  'carol-token': { id: 3, name: 'Carol' },
};

class AuthServer {
  constructor() {
    this.requests = []; // {channel, status}
    this.server = http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const answer = (status, body) => {
          this.requests.push({ channel: body && body.channel, status });
          res.writeHead(status, { 'Content-Type': 'application/json' });
          res.end(JSON.stringify(body.answer));
        };
        const user = users[(req.headers.authorization || '').replace(/^Bearer /, '')];
        let params;
        try {
          params = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch (_) {
          params = {};
        }
        const channel = params.channel_name;
        if (req.method !== 'POST' || req.url !== '/api/broadcasting/auth') return answer(404, { channel, answer: {} });
        if (!user) return answer(403, { channel, answer: { message: 'Unauthenticated.' } });
        // Laravel's routes/channels.php would decide here; every user may
        // join every channel of these tests.
        const auth = channel.startsWith('presence-')
          ? server.authorizeChannel(params.socket_id, channel, { user_id: String(user.id), user_info: user })
          : server.authorizeChannel(params.socket_id, channel);
        return answer(200, { channel, answer: auth });
      });
    });
  }

  async listen() {
    Echo = Echo || (await import('laravel-echo')).default;
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.server.unref();
    this.base = `http://127.0.0.1:${this.server.address().port}`;
    return this;
  }

  close() {
    this.server.close();
  }
}

const echoes = new Set();

// echoOn returns an Echo connected to wsnode `node` (lib's A or B) as the
// user of apiToken, built by the guide's example.
function echoOn(auth, node, apiToken) {
  if (!Echo) throw new Error('echoOn before AuthServer.listen');
  const { host, port } = hosts[node];
  const env = {
    VITE_PUSHER_APP_KEY: app.key,
    VITE_PUSHER_HOST: host,
    VITE_PUSHER_PORT: String(port), // Vite's env values are strings
    VITE_PUSHER_SCHEME: 'http',
  };
  const pageFetch = (url, init) => fetch(new URL(url, auth.base), init);
  const echo = makeEcho(Echo, PusherJS, env, pageFetch, apiToken);
  echoes.add(echo);
  return echo;
}

function closeEchoes() {
  for (const e of echoes) e.disconnect();
  echoes.clear();
}

// subscribed resolves once Echo's channel is subscribed, rejects on its
// subscription error.
function subscribed(channel, ms = 5000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no subscription_succeeded for ${channel.name} in ${ms} ms`)), ms);
    channel.subscribed(() => {
      clearTimeout(timer);
      resolve(channel);
    });
    channel.error((err) => {
      clearTimeout(timer);
      reject(new Error(`subscription error on ${channel.name}: ${JSON.stringify(err)}`));
    });
  });
}

// repeatUntil runs act until cond holds, waiting up to 250 ms after each:
// a node misses an event published before its subscription reached Redis,
// as with Pusher, so the first may be lost.
async function repeatUntil(act, cond, what, ms = 10000) {
  const deadline = Date.now() + ms;
  for (;;) {
    await act();
    try {
      return await until(cond, 250, what);
    } catch (err) {
      if (Date.now() >= deadline) throw err;
    }
  }
}

module.exports = { AuthServer, echoOn, closeEchoes, subscribed, until, tick, repeatUntil, users };
