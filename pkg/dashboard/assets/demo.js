// demo.js: the demo room. The visitor picks a name; the server (/demo/api,
// playing the app server) asks the admission API for a seat, and pusher-js
// subscribes to the capacity-limited presence channel. Without a seat the
// wsnode refuses the subscription (AdmissionRequired) but keeps the socket
// as a waiter and sends its place as it changes; when it is admitted the
// page subscribes again on the same channel object (README, Admission).
'use strict';

(() => {
  // Belt and braces: the wsnode checks in connected waiters itself.
  const CHECKIN_MS = 3000;
  // How often the room line (seats taken, waiting) is read: as often as
  // the dashboard redraws, so both show a change together.
  const ROOM_MS = 1000;
  const STORAGE_KEY = 'headcount-demo-visitor';

  const $ = (id) => document.getElementById(id);
  let cfg = null;
  let me = null; // {id, name}
  let pusher = null;
  let channel = null;
  let subscribing = false;
  // waiterRegistered: a refused subscription told the wsnode we wait.
  let waiterRegistered = false;
  let checkinTimer = null;
  let roomTimer = null;

  function setStatus(state, text) {
    const s = $('status');
    s.dataset.state = state;
    s.textContent = text;
    document.body.dataset.state = state;
    $('position-box').hidden = state !== 'waiting';
    const inside = state === 'admitted' || state === 'waiting' || state === 'joining';
    $('leave').hidden = !inside;
    $('join').hidden = inside;
    $('name').disabled = inside;
    if (state !== 'admitted') renderMembers();
  }

  function showPosition(position, waiting) {
    $('position').textContent = `#${position}`;
    $('position').dataset.position = position;
    $('position-text').textContent = `of ${waiting} waiting · keep this page open to keep your place`;
  }

  function showRoom(answer) {
    if (answer.capacity === undefined) return;
    const room = $('room');
    room.dataset.occupancy = answer.occupancy;
    room.dataset.waiting = answer.waiting;
    room.textContent = `room: ${answer.occupancy} of ${answer.capacity} seats taken · ${answer.waiting} waiting`;
  }

  // readRoom redraws the room line from the gate: an admitted visitor no
  // longer checks in, and would otherwise keep the count of their join.
  async function readRoom() {
    let answer;
    try {
      const res = await fetch('/demo/api/room', { cache: 'no-store' });
      if (!res.ok) return; // the next read may work; the line keeps the last one
      answer = await res.json();
    } catch (err) {
      return;
    }
    if (me) showRoom(answer);
  }

  function startRoomReads() {
    stopRoomReads();
    roomTimer = setInterval(readRoom, ROOM_MS);
  }

  function stopRoomReads() {
    if (roomTimer !== null) clearInterval(roomTimer);
    roomTimer = null;
  }

  function renderMembers() {
    const list = $('members');
    const items = [];
    if (channel && channel.subscribed) {
      channel.members.each((m) => {
        const name = m.info && typeof m.info.name === 'string' ? m.info.name : m.id;
        const li = document.createElement('li');
        li.dataset.member = m.id;
        li.textContent = m.id === me.id ? `${name} (you)` : name;
        li.title = m.id;
        if (m.id === me.id) li.className = 'me';
        items.push(li);
      });
    }
    if (items.length === 0 && document.body.dataset.state === 'waiting') {
      const li = document.createElement('li');
      li.className = 'empty';
      li.textContent = 'you see who is here once you are in';
      items.push(li);
    }
    list.replaceChildren(...items);
    $('member-count').textContent = channel && channel.subscribed ? `${channel.members.count}` : '';
  }

  async function post(path, body) {
    const res = await fetch(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    const text = await res.text();
    if (!res.ok) throw new Error(`${res.status}: ${text.trim()}`);
    return text ? JSON.parse(text) : {};
  }

  function fail(err) {
    setStatus('error', `Something went wrong: ${err.message || err}`);
  }

  function connect() {
    if (pusher) return;
    const host = cfg.ws_host || location.hostname;
    pusher = new Pusher(cfg.key, {
      cluster: 'local', // required by pusher-js 8; unused since wsHost is set
      wsHost: host,
      wsPort: cfg.ws_port,
      wssPort: cfg.ws_port,
      forceTLS: false,
      enabledTransports: ['ws'],
      enableStats: false,
      channelAuthorization: {
        customHandler: ({ socketId, channelName }, callback) => {
          post('/demo/api/auth', { socket_id: socketId, channel_name: channelName, user_id: me.id, name: me.name })
            .then((a) => callback(null, a), (err) => callback(err, null));
        },
      },
    });
    pusher.connection.bind('state_change', ({ current }) => {
      $('conn').textContent = `WebSocket ${current} · ws://${host}:${cfg.ws_port} · user id ${me ? me.id : ''}`;
      if (current !== 'connected') {
        // pusher-js subscribes again itself on reconnecting.
        waiterRegistered = false;
        subscribing = false;
      }
    });
  }

  function bindChannel(ch) {
    ch.bind('pusher:subscription_succeeded', () => {
      subscribing = false;
      stopCheckins();
      setStatus('admitted', 'You are in the room.');
      renderMembers();
    });
    ch.bind('pusher:subscription_error', (e) => {
      subscribing = false;
      if (e && e.type === 'AdmissionRequired') {
        // On the list: the wsnode now sends our place as it changes. Not on
        // it (the seat ran out meanwhile): the next check-in puts us back.
        waiterRegistered = /number \d+ of \d+/.test(e.error || '');
        return;
      }
      fail(new Error(`subscription refused: ${JSON.stringify(e)}`));
    });
    ch.bind('pusher:member_added', renderMembers);
    ch.bind('pusher:member_removed', renderMembers);
    ch.bind('headcount:admission_waiting', ({ position, waiting }) => {
      setStatus('waiting', 'The room is full: you are on the waiting list.');
      showPosition(position, waiting);
    });
    ch.bind('headcount:admission_admitted', () => {
      setStatus('joining', 'A seat is free: joining…');
      subscribe();
    });
    ch.bind('headcount:admission_dropped', () => {
      waiterRegistered = false;
      checkIn();
    });
  }

  function subscribe() {
    if (subscribing || (channel && channel.subscribed)) return;
    subscribing = true;
    if (!channel) {
      channel = pusher.subscribe(cfg.channel);
      bindChannel(channel);
    } else {
      channel.subscribe(); // same object, same bindings
    }
  }

  // checkIn asks for a seat; asked again, it is the check-in that keeps a
  // waiter's place.
  async function checkIn() {
    if (!me) return;
    let answer;
    try {
      answer = await post('/demo/api/join', { user_id: me.id });
    } catch (err) {
      fail(err);
      return;
    }
    if (!me) return; // left meanwhile
    showRoom(answer);
    if (answer.status === 'admitted') {
      if (!(channel && channel.subscribed)) {
        setStatus('joining', 'You have a seat: joining…');
        subscribe();
      }
      return;
    }
    if (!(channel && channel.subscribed)) {
      setStatus('waiting', 'The room is full: you are on the waiting list.');
      showPosition(answer.position, answer.waiting);
      // A refused subscription registers this socket as a waiter.
      if (!waiterRegistered) subscribe();
    }
  }

  function startCheckins() {
    stopCheckins();
    checkinTimer = setInterval(() => {
      if (!(channel && channel.subscribed)) checkIn();
    }, CHECKIN_MS);
  }

  function stopCheckins() {
    if (checkinTimer !== null) clearInterval(checkinTimer);
    checkinTimer = null;
  }

  function slug(name) {
    const s = name.toLowerCase().normalize('NFKD').replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '');
    return s.slice(0, 40) || 'guest';
  }

  function randomSuffix() {
    const b = new Uint8Array(3);
    crypto.getRandomValues(b);
    return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  }

  async function join(name) {
    if (!me || me.name !== name) me = { id: `${slug(name)}-${randomSuffix()}`, name };
    sessionStorage.setItem(STORAGE_KEY, JSON.stringify(me)); // a reload keeps the seat
    setStatus('joining', 'Asking for a seat…');
    connect();
    await checkIn();
    startCheckins();
    startRoomReads();
  }

  async function leave() {
    stopCheckins();
    stopRoomReads();
    const leaving = me;
    if (pusher) {
      if (channel && channel.subscribed) pusher.unsubscribe(cfg.channel);
      pusher.disconnect();
    }
    pusher = null;
    channel = null;
    subscribing = false;
    waiterRegistered = false;
    me = null;
    sessionStorage.removeItem(STORAGE_KEY);
    try {
      await post('/demo/api/leave', { user_id: leaving.id });
      setStatus('left', 'You left: your seat (or place in line) went to the next visitor.');
    } catch (err) {
      fail(err);
    }
    $('room').textContent = '';
    delete $('room').dataset.occupancy;
    delete $('room').dataset.waiting;
    $('conn').textContent = '';
  }

  async function start() {
    try {
      const res = await fetch('/demo/api/config', { cache: 'no-store' });
      if (!res.ok) throw new Error(`${res.status}: ${(await res.text()).trim()}`);
      cfg = await res.json();
    } catch (err) {
      fail(err);
      return;
    }
    Pusher.logToConsole = false;
    $('channel').textContent = cfg.channel;
    $('capacity').textContent = cfg.capacity > 0 ? `capacity ${cfg.capacity}` : 'no capacity set: everyone is admitted';
    $('join-form').addEventListener('submit', (e) => {
      e.preventDefault();
      const name = $('name').value.trim();
      if (name) join(name).catch(fail);
    });
    $('leave').addEventListener('click', () => leave());
    document.body.dataset.ready = 'true';
    const saved = sessionStorage.getItem(STORAGE_KEY);
    if (saved) {
      try {
        me = JSON.parse(saved);
        $('name').value = me.name;
        await join(me.name);
      } catch (err) {
        sessionStorage.removeItem(STORAGE_KEY);
        me = null;
      }
    }
  }

  start();
})();
