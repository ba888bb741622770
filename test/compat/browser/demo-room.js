#!/usr/bin/env node
// demo-room.js: the dashboard and the demo room in a real headless Chromium
// (Debian's /usr/bin/chromium, driven by playwright-core; no browser is ever
// downloaded). Run by test/e2e/dashboard_test.go (TestDashboardInBrowser)
// against a cluster it started: redis, wsnodes A and B, a cleaner, and
// httpapi with --dashboard and a capacity of 1 on presence-room-demo.
//
// It opens the dashboard and two demo room pages: the first visitor is
// admitted, the second waits at position 1; closing the first admits the
// second (after the 1 s grace). Then it prints "KILL" on stdout and waits
// for a line on stdin: meanwhile the Go side SIGKILLs wsnode B, and the
// dashboard must show B gone and the counts without B's sockets. Then the
// second visitor leaves. Last, it prints "STOP" and waits for a line: the
// Go side SIGSTOPs wsnode A, which the dashboard must show stale, then
// reaped, and then say that no node holds a connection. "OK" on stdout
// means every check passed; any failure exits 1 with the reason and the
// pages' text on stderr.
//
// Environment:
//   HC_HTTP            httpapi host:port
//   HC_NODE_A, HC_NODE_B   the wsnodes' ids (B is killed, A stopped)
//   HC_CLEANER         the cleaner's --node-id, shown as the lease holder
//   HC_NEWS_BEFORE, HC_NEWS_AFTER   subscriptions of "news" before and after the kill
//   HC_SPORTS          subscriptions of "sports" (all on B)
//   HC_CONNS_AFTER     the app's connections after the kill and the first visitor's exit
//   HC_SCREENSHOT_DIR  if set, write dashboard.png and demo-room.png there
//   HC_STEP_TIMEOUT_MS bound of each wait (default 20000)
'use strict';

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');

const CHROMIUM = '/usr/bin/chromium';

function env(name, def) {
  const v = process.env[name];
  if (v === undefined || v === '') {
    if (def !== undefined) return def;
    throw new Error(`${name} is not set: run this through go test -run TestDashboardInBrowser ./test/e2e/`);
  }
  return v;
}

function log(msg) {
  process.stderr.write(`demo-room.js: ${msg}\n`);
}

const major = Number(process.versions.node.split('.')[0]);
if (major < 20) {
  log(`Node ${process.versions.node} is too old: playwright-core needs Node 20 or later`);
  process.exit(1);
}
if (!fs.existsSync(CHROMIUM)) {
  log(`${CHROMIUM} is missing: install Debian's chromium (as root: bash scripts/ensure-deps.sh, or apt-get install chromium chromium-driver)`);
  process.exit(1);
}
const { chromium } = require('playwright-core');

const base = `http://${env('HC_HTTP')}`;
const nodeA = env('HC_NODE_A');
const nodeB = env('HC_NODE_B');
const cleaner = env('HC_CLEANER');
const newsBefore = Number(env('HC_NEWS_BEFORE'));
const newsAfter = Number(env('HC_NEWS_AFTER'));
const sports = Number(env('HC_SPORTS'));
const connsAfter = Number(env('HC_CONNS_AFTER'));
const shots = process.env.HC_SCREENSHOT_DIR || '';
const stepTimeout = Number(env('HC_STEP_TIMEOUT_MS', '20000'));
const ROOM = 'presence-room-demo';

const pages = [];
// pageErrors collects uncaught exceptions of every page: any is a failure.
const pageErrors = [];

function track(name, page) {
  pages.push({ name, page });
  page.on('pageerror', (err) => pageErrors.push(`${name}: ${err.message}`));
}

// waitFor polls cond (run in the page) until it is truthy; it fails after
// stepTimeout with what it waited for.
async function waitFor(page, what, cond, arg) {
  log(`waiting: ${what}`);
  try {
    await page.waitForFunction(cond, arg, { timeout: stepTimeout, polling: 100 });
  } catch (err) {
    throw new Error(`timed out after ${stepTimeout} ms waiting for ${what}: ${err.message.split('\n')[0]}`);
  }
}

async function openDemo(context, name) {
  const page = await context.newPage();
  track(`demo room (${name})`, page);
  await page.goto(`${base}/demo`);
  await waitFor(page, `the demo page of ${name} to load`, () => document.body.dataset.ready === 'true');
  await page.fill('#name', name);
  await page.click('#join');
  return page;
}

// screenshot saves the page cut to its content: a short viewport, then the
// full page.
async function screenshot(page, file) {
  const size = page.viewportSize();
  await page.setViewportSize({ width: size.width, height: 400 });
  await page.screenshot({ path: file, fullPage: true });
  await page.setViewportSize(size);
}

const status = (page) => page.$eval('#status', (e) => e.dataset.state);

async function main() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'headcount-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1360, height: 900 },
    deviceScaleFactor: 1,
  });
  try {
    await run(context);
  } catch (err) {
    for (const { name, page } of pages) {
      if (page.isClosed()) continue;
      const text = await page.evaluate(() => document.body.innerText).catch((e) => `(unreadable: ${e.message})`);
      log(`--- ${name} shows ---\n${text}\n---`);
    }
    throw err;
  } finally {
    await context.close().catch(() => {});
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

async function run(context) {
  const dash = await context.newPage();
  track('dashboard', dash);
  await dash.goto(`${base}/dashboard`);
  await waitFor(dash, 'the dashboard to load', () => document.body.dataset.loaded === 'true');
  await waitFor(dash, `both wsnodes alive on the dashboard and news at ${newsBefore}, sports at ${sports}`,
    ([a, b, news, sp]) => {
      const alive = (id) => document.querySelector(`tr[data-node="${id}"][data-state="alive"]`);
      const subs = (ch) => document.querySelector(`tr[data-channel="${ch}"]`)?.dataset.subscriptions;
      return alive(a) && alive(b) && subs('news') === String(news) && subs('sports') === String(sp);
    }, [nodeA, nodeB, newsBefore, sports]);

  // Capacity 1: the first visitor is admitted, the second waits at #1.
  const ada = await openDemo(context, 'Ada');
  await waitFor(ada, 'Ada admitted, alone in the room, no position shown', () =>
    document.querySelector('#status').dataset.state === 'admitted' &&
    document.querySelectorAll('#members li').length === 1 &&
    getComputedStyle(document.querySelector('#position-box')).display === 'none');
  const grace = await openDemo(context, 'Grace');
  await waitFor(grace, 'Grace waiting at position 1', () =>
    document.querySelector('#status').dataset.state === 'waiting' &&
    document.querySelector('#position').dataset.position === '1');
  if ((await status(ada)) !== 'admitted') throw new Error('Ada lost her seat when Grace came');
  // Ada joined before anyone waited; her room line follows the list.
  await waitFor(ada, "Ada's room line showing 1 seat taken and 1 waiting", () =>
    document.querySelector('#room').dataset.waiting === '1' && document.querySelector('#room').dataset.occupancy === '1');

  await waitFor(dash, `the dashboard showing ${ROOM}: 1 member (ada), capacity 1, 1 waiting`, (room) => {
    const ch = document.querySelector(`tr[data-channel="${room}"]`);
    const list = document.querySelector(`tr[data-list="${room}"]`);
    const members = [...document.querySelectorAll('#members li[data-member]')].map((li) => li.dataset.member);
    return ch && ch.dataset.subscriptions === '1' && ch.dataset.users === '1' &&
      list && list.dataset.capacity === '1' && list.dataset.occupancy === '1' && list.dataset.waiting === '1' &&
      document.querySelector('#members').dataset.channel === room &&
      members.length === 1 && members[0].startsWith('ada-');
  }, ROOM);
  await waitFor(dash, `the audit consistent and the lease held by ${cleaner}`, (name) =>
    document.querySelector('#audit').dataset.differences === '0' &&
    document.querySelector('#lease').dataset.held === 'true' &&
    document.querySelector('#lease').dataset.holder.startsWith(`${name}/`), cleaner);
  if (shots) {
    await screenshot(dash, path.join(shots, 'dashboard.png'));
    await screenshot(grace, path.join(shots, 'demo-room.png'));
    log(`screenshots written to ${shots}`);
  }

  // Ada closes her tab: after the grace her seat goes to the head of the list.
  const closedAt = Date.now();
  await ada.close();
  await waitFor(grace, 'Grace admitted once Ada left, no position shown', () =>
    document.querySelector('#status').dataset.state === 'admitted' &&
    [...document.querySelectorAll('#members li')].length === 1 &&
    getComputedStyle(document.querySelector('#position-box')).display === 'none');
  log(`Grace admitted ${Date.now() - closedAt} ms after Ada closed her tab`);
  await waitFor(dash, `the dashboard showing grace in ${ROOM} and nobody waiting`, (room) => {
    const list = document.querySelector(`tr[data-list="${room}"]`);
    const members = [...document.querySelectorAll('#members li[data-member]')].map((li) => li.dataset.member);
    return list && list.dataset.occupancy === '1' && list.dataset.waiting === '0' &&
      members.length === 1 && members[0].startsWith('grace-');
  }, ROOM);

  // wsnode B dies the hard way; its sockets must leave the counts.
  await ask('KILL');
  const killedAt = Date.now();
  await waitFor(dash, `${nodeB} shown gone (reaped), news at ${newsAfter}, sports gone, ${connsAfter} connections`,
    ([a, b, news, conns]) => {
      const subs = (ch) => document.querySelector(`tr[data-channel="${ch}"]`)?.dataset.subscriptions;
      return document.querySelector(`tr[data-node="${b}"][data-state="gone"]`) &&
        document.querySelector(`tr[data-node="${a}"][data-state="alive"]`) &&
        subs('news') === String(news) && subs('sports') === undefined &&
        document.querySelector('#nodes').dataset.connections === String(conns);
    }, [nodeA, nodeB, newsAfter, connsAfter]);
  log(`dashboard showed ${nodeB} reaped and the counts corrected ${Date.now() - killedAt} ms after the kill`);
  await waitFor(dash, 'the audit still consistent after the reap', () =>
    document.querySelector('#audit').dataset.differences === '0' &&
    Number(document.querySelector('#audit').textContent.match(/(\d+) node\(s\) audited/)?.[1]) === 1);

  // Leave gives the seat back at once.
  await grace.click('#leave');
  await waitFor(grace, 'Grace out of the room', () => document.querySelector('#status').dataset.state === 'left');
  await waitFor(dash, `${ROOM} empty on the dashboard`, (room) => {
    const list = document.querySelector(`tr[data-list="${room}"]`);
    return !document.querySelector(`tr[data-channel="${room}"]`) && (!list || list.dataset.occupancy === '0');
  }, ROOM);
  // wsnode A hangs: it keeps its Redis connection, so it is stale until
  // its last heartbeat is dead-after old, then reaped; then no node is left.
  await ask('STOP');
  const stoppedAt = Date.now();
  await waitFor(dash, `${nodeA} shown stale`, (a) =>
    document.querySelector(`tr[data-node="${a}"][data-state="stale"]`) !== null, nodeA);
  log(`dashboard showed ${nodeA} stale ${Date.now() - stoppedAt} ms after SIGSTOP`);
  await waitFor(dash, `${nodeA} shown reaped and no node holding a connection`, (a) =>
    document.querySelector(`tr[data-node="${a}"][data-state="gone"]`) !== null &&
    document.querySelector('#nodes').dataset.live === '0' &&
    /no node holds a connection of this app now/.test(document.querySelector('#nodes').textContent), nodeA);
  log(`dashboard showed ${nodeA} reaped ${Date.now() - stoppedAt} ms after SIGSTOP`);

  if (pageErrors.length) throw new Error(`uncaught errors in the pages: ${pageErrors.join('; ')}`);
  process.stdout.write('OK\n');
}

// ask prints what on stdout and waits for the Go side's line on stdin
// saying it has been done.
function ask(what) {
  process.stdout.write(`${what}\n`);
  return new Promise((resolve, reject) => {
    const rl = readline.createInterface({ input: process.stdin });
    const closed = () => reject(new Error(`stdin closed before ${what} was confirmed`));
    rl.once('line', () => {
      rl.off('close', closed);
      rl.close();
      resolve();
    });
    rl.once('close', closed);
  });
}

main().then(() => process.exit(0), (err) => {
  log(`FAILED: ${err.stack || err}`);
  process.exit(1);
});
