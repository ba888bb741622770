// dashboard.js: polls /dashboard/api/overview (and the chosen channel's
// members) once a second and redraws in place. Everything shown comes from
// the signed HTTP API through this httpapi; names and ids are user data, so
// they only ever go into textContent. The data-* attributes are what the
// browser test (test/compat/browser) reads.
'use strict';

(() => {
  const REFRESH_MS = 1000;
  // A reaped node stays on screen this long, marked gone, so a crash is seen.
  const GONE_KEEP_MS = 60000;

  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  let app = params.get('app') || '';
  let memberChannel = params.get('channel') || '';
  let memberChannelChosen = memberChannel !== '';
  const knownNodes = new Map(); // id -> {node, goneAt}
  const leaseHistory = []; // {holder, at}
  let lastHolder = null;

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === 'class') e.className = v;
      else if (k.startsWith('data-')) e.setAttribute(k, String(v));
      else e[k] = v;
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function ago(ms) {
    if (ms < 1000) return `${ms} ms ago`;
    if (ms < 60000) return `${(ms / 1000).toFixed(1)} s ago`;
    return `${Math.round(ms / 60000)} min ago`;
  }

  function replaceRows(tbody, rows, emptyText, columns) {
    tbody.replaceChildren(...rows);
    if (rows.length === 0) {
      tbody.append(el('tr', {}, el('td', { class: 'empty', colSpan: columns }, emptyText)));
    }
  }

  async function getJSON(url) {
    const res = await fetch(url, { cache: 'no-store' });
    const text = await res.text();
    if (!res.ok) throw new Error(`${res.status}: ${text.trim()}`);
    return JSON.parse(text);
  }

  function renderApps(ov) {
    const sel = $('app');
    if (sel.options.length !== ov.apps.length) {
      sel.replaceChildren(...ov.apps.map((id) => el('option', { value: id }, id)));
    }
    sel.value = ov.app;
    app = ov.app;
  }

  function renderNodes(status) {
    const now = Date.now();
    const present = new Set();
    for (const n of status.nodes) {
      present.add(n.id);
      knownNodes.set(n.id, { node: n, goneAt: null });
    }
    for (const [id, k] of knownNodes) {
      if (present.has(id)) continue;
      if (k.goneAt === null) k.goneAt = now;
      if (now - k.goneAt > GONE_KEEP_MS) knownNodes.delete(id);
    }
    const rows = [];
    let alive = 0;
    let stale = 0;
    for (const [id, k] of [...knownNodes].sort((a, b) => a[0].localeCompare(b[0]))) {
      let state = 'alive';
      let label = 'alive';
      let seen = ago(k.node.age_ms);
      let conns = k.node.connections;
      if (k.goneAt !== null) {
        state = 'gone';
        label = 'reaped';
        seen = `gone ${ago(now - k.goneAt)}`;
        conns = 0;
      } else if (k.node.stale) {
        state = 'stale';
        label = 'stale';
        stale++;
      } else {
        alive++;
      }
      rows.push(el('tr', { 'data-node': id, 'data-state': state, 'data-connections': conns },
        el('td', { class: 'name' }, id),
        el('td', {}, el('span', { class: `pill ${state}` }, label)),
        el('td', { class: 'num' }, seen),
        el('td', { class: 'num conns' }, conns)));
    }
    // Every node shown is reaped (or none is left to show): say what is
    // true now, whatever this page saw before.
    const tbody = $('nodes').tBodies[0];
    replaceRows(tbody, rows, 'no node holds a connection of this app', 4);
    if (rows.length > 0 && alive + stale === 0) {
      tbody.append(el('tr', { 'data-none': 'true' }, el('td', { class: 'empty', colSpan: 4 },
        'no node holds a connection of this app now')));
    }
    $('nodes').dataset.live = alive + stale;
    $('nodes-meta').textContent = `${alive} alive · ${stale} stale · ${status.connections} connections`;
    $('nodes-note').textContent = `stale: no heartbeat for ${status.stale_after_ms / 1000} s, still counted until the cleaner reaps it · reaped: its sockets were subtracted`;
    $('nodes').dataset.connections = status.connections;
  }

  function renderLease(c) {
    const box = $('lease');
    box.dataset.held = c.held;
    box.dataset.holder = c.holder || '';
    if (c.held && c.holder !== lastHolder) {
      leaseHistory.unshift({ holder: c.holder, at: new Date() });
      leaseHistory.length = Math.min(leaseHistory.length, 5);
    }
    lastHolder = c.held ? c.holder : null;
    const dl = el('dl', { class: 'kv' },
      el('dt', {}, 'state'),
      el('dd', {}, c.held ? el('span', { class: 'pill alive' }, 'held · one cleaner active')
        : el('span', { class: 'pill gone' }, 'free · no cleaner active')),
      el('dt', {}, 'holder'),
      el('dd', { class: 'holder' }, c.held ? c.holder : '—'),
      el('dt', {}, 'expires in'),
      el('dd', {}, c.held ? `${(c.expires_in_ms / 1000).toFixed(1)} s (renewed every third of its TTL)` : '—'));
    const history = el('ul', { class: 'history' }, ...leaseHistory.map((h, i) =>
      el('li', {}, `${h.at.toLocaleTimeString()} `, el('span', { class: 'holder' }, h.holder),
        i === 0 ? ' took the lease' : ' held it')));
    box.replaceChildren(dl, ...(leaseHistory.length > 1
      ? [el('p', { class: 'muted' }, 'holders seen (a new one is a failover):'), history] : []));
  }

  function renderChannels(ov) {
    const top = ov.channels.length ? ov.channels[0].subscription_count : 1;
    const rows = ov.channels.map((c, i) => {
      const presence = c.name.startsWith('presence-');
      const users = c.user_count === undefined ? '' : c.user_count;
      return el('tr', {
        'data-channel': c.name, 'data-subscriptions': c.subscription_count, 'data-users': users,
        class: `${presence ? 'clickable' : ''} ${c.name === memberChannel ? 'selected' : ''}`,
        onclick: presence ? () => chooseMembers(c.name) : null,
      },
      el('td', { class: 'num muted' }, i + 1),
      el('td', { class: 'name' }, c.name),
      el('td', { class: 'num bar' }, el('i'), el('span', {}, c.subscription_count)),
      el('td', { class: 'num' }, users));
    });
    rows.forEach((r, i) => {
      r.querySelector('.bar > i').style.width = `${Math.max(2, (100 * ov.channels[i].subscription_count) / top)}%`;
    });
    replaceRows($('channels').tBodies[0], rows, 'no occupied channel', 4);
    $('channels-meta').textContent = ov.stale_nodes > 0
      ? `${ov.stale_nodes} stale node(s) still counted: their sockets leave the counts when the cleaner reaps them`
      : 'every count is backed by a live node';
  }

  function chooseMembers(name) {
    memberChannel = name;
    memberChannelChosen = true;
    refreshMembers();
  }

  function renderMemberChoices(ov) {
    const presence = ov.channels.filter((c) => c.name.startsWith('presence-')).map((c) => c.name);
    if (!memberChannelChosen || !memberChannel) {
      memberChannel = presence.includes('presence-room-demo') ? 'presence-room-demo' : (presence[0] || '');
    }
    const names = [...new Set([memberChannel, ...presence].filter(Boolean))];
    const sel = $('member-channel');
    const current = [...sel.options].map((o) => o.value).join('\n');
    if (current !== names.join('\n')) {
      sel.replaceChildren(...names.map((n) => el('option', { value: n }, n)));
    }
    sel.value = memberChannel;
  }

  async function refreshMembers() {
    const box = $('members');
    box.dataset.channel = memberChannel;
    if (!memberChannel) {
      box.replaceChildren(el('li', { class: 'empty' }, 'no presence channel is occupied'));
      return;
    }
    try {
      const res = await getJSON(`/dashboard/api/members?app=${encodeURIComponent(app)}&channel=${encodeURIComponent(memberChannel)}`);
      const items = res.users.map((u) => el('li', { 'data-member': u.id }, u.id));
      box.replaceChildren(...(items.length ? items : [el('li', { class: 'empty' }, 'nobody is in this channel')]));
    } catch (err) {
      box.replaceChildren(el('li', { class: 'error' }, String(err.message || err)));
    }
  }

  function renderLists(adm) {
    const rows = adm.channels.map((c) => el('tr', {
      'data-list': c.channel, 'data-capacity': c.capacity, 'data-occupancy': c.occupancy, 'data-waiting': c.waiting,
    },
    el('td', { class: 'name' }, c.channel),
    el('td', { class: 'num' }, c.capacity),
    el('td', {}, `${c.occupancy} / ${c.capacity}`, el('div', { class: 'gauge', 'data-full': c.occupancy >= c.capacity }, el('i'))),
    el('td', { class: 'num' }, c.waiting)));
    rows.forEach((r, i) => {
      const c = adm.channels[i];
      r.querySelector('.gauge > i').style.width = `${Math.min(100, (100 * c.occupancy) / c.capacity)}%`;
    });
    replaceRows($('lists').tBodies[0], rows, 'no capacity-limited channel in use', 4);
  }

  function renderAudit(a) {
    const box = $('audit');
    box.dataset.differences = a.differences;
    const verdict = a.differences === 0
      ? el('div', { class: 'verdict ok' }, '✓ consistent: every global count is the sum of the live nodes’ contributions')
      : el('div', { class: 'verdict bad' }, `✗ drift: ${a.differences} difference(s)`);
    const meta = el('p', { class: 'muted' }, `${a.nodes} node(s) audited · checked ${ago(a.age_ms)} (at most every 5 s)`);
    let table = null;
    if (a.drift.length) {
      table = el('table', {},
        el('thead', {}, el('tr', {}, el('th', {}, 'kind'), el('th', {}, 'entry'), el('th', { class: 'num' }, 'stored'), el('th', { class: 'num' }, 'sum of nodes'))),
        el('tbody', {}, ...a.drift.map((d) => el('tr', {},
          el('td', {}, d.kind),
          el('td', { class: 'name' }, [d.channel, d.user, d.node, d.field].filter(Boolean).join(' · ') || 'connections'),
          el('td', { class: 'num' }, d.present ? d.have : 'absent'),
          el('td', { class: 'num' }, d.want)))));
    }
    box.replaceChildren(verdict, meta, ...(table ? [table] : []));
  }

  function part(name, ov, render) {
    if (ov[name]) {
      try {
        render(ov[name]);
      } catch (err) {
        return `${name}: ${err.message}`;
      }
    }
    return ov.errors && ov.errors[name] ? `${name}: ${ov.errors[name]}` : null;
  }

  async function refresh() {
    const live = $('live');
    try {
      const ov = await getJSON(`/dashboard/api/overview?app=${encodeURIComponent(app)}`);
      renderApps(ov);
      const errors = [
        part('status', ov, (s) => { renderNodes(s); renderLease(s.cleaner); }),
        part('admission', ov, renderLists),
        part('audit', ov, renderAudit),
      ];
      renderChannels(ov);
      if (ov.errors && ov.errors.channels) errors.push(`channels: ${ov.errors.channels}`);
      if (ov.errors && ov.errors.users) errors.push(`users: ${ov.errors.users}`);
      renderMemberChoices(ov);
      await refreshMembers();
      $('errors').textContent = errors.filter(Boolean).join('\n');
      live.dataset.ok = 'true';
      live.textContent = `live · ${new Date().toLocaleTimeString()}`;
      document.body.dataset.loaded = 'true';
    } catch (err) {
      live.dataset.ok = 'false';
      live.textContent = `offline: ${err.message || err}`;
    }
  }

  async function loop() {
    try {
      await refresh();
    } finally {
      setTimeout(loop, REFRESH_MS);
    }
  }

  $('app').addEventListener('change', (e) => {
    app = e.target.value;
    knownNodes.clear();
    memberChannel = '';
    memberChannelChosen = false;
    refresh();
  });
  $('member-channel').addEventListener('change', (e) => chooseMembers(e.target.value));
  loop();
})();
