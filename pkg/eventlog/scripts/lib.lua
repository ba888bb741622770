-- lib.lua (prelude eventlog, eventlog.Prelude) is prepended to this
-- package's scripts and to the count scripts that log their edges in the
-- same unit: appending to an app's event log (a stream, eventlog.Key)
-- with byte accounting, a byte budget, and markers. Each entry has the fields
--   t   unix ms by this shard's clock
--   ev  the event as JSON
--   o   the entry's byte offset: the sizes of every entry appended before
--       it since the log was last empty, where an entry's size is #t + #ev
--   k   only on a marker (see log_mark): its kind, 'o', 'm' or 's'
-- so the log holds (o + size) of its last entry minus o of its first. A
-- trim (the deliverers' XTRIM MINID, the MAXLEN below) removes entries from
-- the head and lowers that difference by exactly what it removed: there is
-- no counter to keep in step, so none can drift from the stream.
--
-- Beside the log, its index (the log's key .. '-index', a hash) holds
--   <kind>\n<channel>[\n<user>]  the id of the marker of that kind, channel
--                                (and user) no deliverer has claimed yet
--   dropped     events refused for the byte budget, ever (see log_add)
--   noticed     the value of dropped when the last events_dropped was logged
--   dropped_at  unix ms of the first refusal since then
-- KEYS, ARGV: none of its own; the caller passes log_open the log's key
-- and its entry cap and budget.
-- uses: none

-- log_spec reads what eventlog.Spec.Arg packs: nil for no log, else
-- {max = entry cap, budget = bytes, wants = {event name = true}}.
local function log_spec(arg)
  local max, budget, names = string.match(arg or '', '^(%d+) (%d+) (.+)$')
  if not max then return nil end
  local wants = {}
  for name in string.gmatch(names, '[^,]+') do wants[name] = true end
  return {max = max, budget = budget, wants = wants}
end

local function log_field(fields, name)
  for i = 1, #fields, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return nil -- a value, for tonumber
end

-- log_end returns the offset after an entry. An entry written before
-- offsets existed (no o) is taken to start at 0, so a log that still holds
-- such entries undercounts all but the last of them; they leave it as they
-- are delivered.
local function log_end(fields)
  local o = tonumber(log_field(fields, 'o')) or 0
  return o + #(log_field(fields, 't') or '') + #(log_field(fields, 'ev') or '')
end

-- log_open reads the state of the log at key: the bytes it holds, the
-- offset its next entry starts at, and the refusals not told yet. Three
-- O(log n) reads. max_entries (the caller's ARGV: eventlog.MaxEntries) caps
-- the log, approximately, whatever it holds; budget caps its bytes (0:
-- none; see log_add).
local function log_open(key, max_entries, budget)
  local h = {key = key, index = key .. '-index', max = max_entries, budget = tonumber(budget) or 0,
    bytes = 0, next = 0}
  local last = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)[1]
  if last then
    local first = redis.call('XRANGE', key, '-', '+', 'COUNT', 1)[1]
    h.next = log_end(last[2])
    h.bytes = math.max(h.next - (tonumber(log_field(first[2], 'o')) or 0), 0)
  end
  local d = redis.call('HMGET', h.index, 'dropped', 'noticed', 'dropped_at')
  h.dropped, h.noticed, h.dropped_at = tonumber(d[1]) or 0, tonumber(d[2]) or 0, d[3]
  return h
end

-- log_xadd appends one entry, whatever the budget; kind marks a marker.
local function log_xadd(h, t, ev, kind)
  local id
  if kind then
    id = redis.call('XADD', h.key, 'MAXLEN', '~', h.max, '*', 't', t, 'ev', ev,
      'o', string.format('%d', h.next), 'k', kind)
  else
    id = redis.call('XADD', h.key, 'MAXLEN', '~', h.max, '*', 't', t, 'ev', ev,
      'o', string.format('%d', h.next))
  end
  local size = #t + #ev
  h.next = h.next + size
  h.bytes = h.bytes + size
  return id
end

-- log_notice returns the events_dropped notice of the refusals not told
-- yet (see log_add), or nil if there are none.
local function log_notice(h, t)
  if h.dropped <= h.noticed then return nil end
  return cjson.encode({name = 'events_dropped', channel = '',
    dropped = h.dropped - h.noticed, since_ms = tonumber(h.dropped_at) or tonumber(t)})
end

local function log_told(h, t, notice)
  log_xadd(h, t, notice)
  h.noticed, h.dropped_at = h.dropped, nil
  redis.call('HSET', h.index, 'noticed', string.format('%d', h.dropped))
  redis.call('HDEL', h.index, 'dropped_at')
end

-- log_add appends one event (JSON) stamped t (a string) to an opened log,
-- and returns its id; or, when that would take the log past its byte
-- budget, refuses it: nothing is written but the count of refusals, and it
-- returns false. The first event let in after refusals is preceded by an
-- events_dropped notice saying how many went missing since when, so a
-- receiver that asks for it learns where the gap is. The check and the
-- append are one atomic unit on the log's shard, so the budget holds
-- however many processes append at once.
local function log_add(h, t, ev, kind)
  local notice = log_notice(h, t)
  local need = #t + #ev
  if notice then need = need + #t + #notice end
  if h.budget > 0 and h.bytes + need > h.budget then
    h.dropped = h.dropped + 1
    redis.call('HINCRBY', h.index, 'dropped', 1)
    if not h.dropped_at then
      h.dropped_at = t
      redis.call('HSET', h.index, 'dropped_at', t)
    end
    return false
  end
  if notice then log_told(h, t, notice) end
  return log_xadd(h, t, ev, kind)
end

-- log_tell appends the notice of the refusals not told yet on its own, if
-- there are any and it fits, so receivers learn of them once the log has
-- room even if no event follows; it reports whether it did.
local function log_tell(h, t)
  local notice = log_notice(h, t)
  if not notice or (h.budget > 0 and h.bytes + #t + #notice > h.budget) then
    return false
  end
  log_told(h, t, notice)
  return true
end

-- Markers. A change of state (a channel occupied or vacated, a member added
-- or removed, a channel's subscription count) is logged as a marker: an
-- entry that says the state of its channel (or member) changed, whose
-- webhook event is decided when a deliverer claims it (claim.lua), from the
-- state then. While a marker of a kind, channel (and user) is unclaimed,
-- further changes of it log nothing: the marker will tell the state they
-- left. So changes that cancel out (occupied, then vacated before any
-- receiver heard of it; a reload's vacated, then occupied) and counts
-- superseded by later ones cost no entry, whatever clients do, and a
-- receiver that is down or slow leaves at most one unclaimed marker per
-- channel, member and kind in the log.
local marker_kinds = {channel_occupied = 'o', channel_vacated = 'o',
  member_added = 'm', member_removed = 'm', subscription_count = 's'}

-- marker_slot is the index field of name's marker for channel ch (and
-- user), or nil if name is not the name of a marker.
local function marker_slot(name, ch, user)
  local kind = marker_kinds[name]
  if kind == 'm' then
    return 'm\n' .. ch .. '\n' .. user, kind
  elseif kind then
    return kind .. '\n' .. ch, kind
  end
  return nil
end

-- log_live reports whether entry id is still in the log (not trimmed).
local function log_live(h, id)
  return #redis.call('XRANGE', h.key, id, id) > 0
end

-- log_mark logs name (an event of marker_kinds) for channel ch (and user)
-- as a marker, unless one of its kind, channel and user is unclaimed still.
local function log_mark(h, t, name, ch, user)
  local slot, kind = marker_slot(name, ch, user)
  local pending = redis.call('HGET', h.index, slot)
  if pending and log_live(h, pending) then
    return
  end
  local ev = {name = name, channel = ch}
  if user then ev.user_id = user end
  local id = log_add(h, t, cjson.encode(ev), kind)
  if id then
    redis.call('HSET', h.index, slot, id)
  elseif pending then
    redis.call('HDEL', h.index, slot)
  end
end
