-- claim.lua: a deliverer claims markers (see lib.lua) it is about to post,
-- and learns what each is to say: the state of its channel or member now.
-- Claiming one frees its slot, so the next change of that state logs a
-- new marker (after this one, which is being told).
-- KEYS[1] the event log, KEYS[2] its index, KEYS[3] the app's channel
--         counts (a ZSET channel -> subscriptions: counts.ChannelsKey), then
--         the member hashes (user -> sockets) the member markers name
-- ARGV[1] the log's entry cap (eventlog.MaxEntries), ARGV[2] its byte budget
-- then per marker: id, kind ('o', 'm' or 's'), the event's name, channel,
--         user ('' unless a member marker), members hash ('' likewise)
-- Returns per marker:
--   'x' it is no longer in the log: nothing to post
--   'd' deferred: the channel was occupied again after this marker and no
--       deliverer has told that yet (its channel_occupied marker is
--       unclaimed), so what this marker says now belongs after that: a copy
--       of it is logged after it (unless a later marker of its own follows
--       it already, or the budget refuses it), and nothing is posted now.
--       (A channel_vacated marker after this one needs no such care: if
--       the channel is still vacated, this marker says nothing or what
--       goes before the vacated, a member's leave; if it is occupied again,
--       that vacated says nothing.)
--   for 'o' and 'm': '1' if the state is still the one the event names (post
--       it), else '0' (the change was undone: post nothing)
--   for 's': the channel's subscription count now ('0': vacated, post
--       nothing)
-- uses: now_ms, eventlog
local h = {key = KEYS[1], index = KEYS[2]}
local counts = KEYS[3]
local max_entries, budget = ARGV[1], ARGV[2]

-- id_before compares stream ids "ms-seq".
local function id_before(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, bm = tonumber(am), tonumber(bm)
  if am ~= bm then return am < bm end
  return tonumber(as) < tonumber(bs)
end

local opened
local out = {}
for i = 3, #ARGV, 6 do
  local id, kind, name, ch, user, members = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  local slot = kind .. '\n' .. ch
  if kind == 'm' then slot = slot .. '\n' .. user end
  local live, occ = log_live(h, id), nil
  if live and kind ~= 'o' then
    -- The channel's unclaimed channel_occupied marker, if it comes after
    -- this one.
    occ = redis.call('HGET', h.index, 'o\n' .. ch)
    if occ and id_before(id, occ) then
      local e = redis.call('XRANGE', h.key, occ, occ)[1]
      if not (e and cjson.decode(log_field(e[2], 'ev')).name == 'channel_occupied') then occ = nil end
    else
      occ = nil
    end
  end
  if not live then
    table.insert(out, 'x')
  elseif occ then
    local cur = redis.call('HGET', h.index, slot)
    if not (cur and id_before(occ, cur) and log_live(h, cur)) then
      opened = opened or log_open(h.key, max_entries, budget)
      local ev = {name = name, channel = ch}
      if kind == 'm' then ev.user_id = user end
      local copy = log_add(opened, string.format('%d', now_ms()), cjson.encode(ev), kind)
      if copy then
        redis.call('HSET', h.index, slot, copy)
      elseif cur == id then
        redis.call('HDEL', h.index, slot)
      end
    end
    table.insert(out, 'd')
  else
    if redis.call('HGET', h.index, slot) == id then
      redis.call('HDEL', h.index, slot)
    end
    if kind == 's' then
      table.insert(out, string.format('%d', tonumber(redis.call('ZSCORE', counts, ch) or '0')))
    elseif kind == 'o' then
      local occupied = tonumber(redis.call('ZSCORE', counts, ch) or '0') > 0
      table.insert(out, (occupied == (name == 'channel_occupied')) and '1' or '0')
    else
      local present = redis.call('HEXISTS', members, user) == 1
      table.insert(out, (present == (name == 'member_added')) and '1' or '0')
    end
  end
end
return out
