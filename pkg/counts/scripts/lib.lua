-- lib.lua (prelude lib) is prepended to apply.lua and reap_slice.lua,
-- after the event log's (eventlog.Prelude: log_spec, log_open, log_mark).
-- Field names of a node's contribution hash (see keys.go):
--   c:<channel>          the node's sockets subscribed to channel
--   m:<channel>\n<user>  the node's sockets of user in presence channel
--   n                    the node's open sockets (connections)
-- KEYS[1] and KEYS[2] are each script's own; then, the same in both:
--   KEYS[3] global  ZSET channel -> sockets cluster-wide
--   KEYS[4] and KEYS[5] the app's event log and its index, if ARGV[2] says
--   to log; then every other key the unit touches (K below), and the
--   script's own.
-- ARGV, the same in both (keys.go unitArgs); each script's own follow:
--   ARGV[1] key prefix of the app ("<prefix>:{app}:")
--   ARGV[2] what the unit logs to the app's event log: an eventlog.Spec's
--           Arg, '' for nothing
--   ARGV[3] name prefix of channels whose edges are never logged (the
--           server's internal ones, protocol.InternalPrefix)
--   ARGV[4] name prefix of those whose counts are not (presence channels,
--           which announce members instead: protocol.Kind.AnnouncesCounts)
-- K names the app's keys a unit may touch, all in {app}'s slot; those
-- derived from ARGV[1] are each checked against KEYS (missing_keys).
-- uses: now_ms, eventlog
local K = {
  global = KEYS[3],
  conns = ARGV[1] .. 'conns', -- STRING open sockets cluster-wide
  seq = ARGV[1] .. 'seq',     -- STRING the version of the app's last counts
}
-- A presence channel's HASH user -> sockets cluster-wide, and its HASH
-- user -> user_info.
function K.members(ch) return ARGV[1] .. 'members:' .. ch end
function K.info(ch) return ARGV[1] .. 'info:' .. ch end
-- LOG is what the unit logs to the app's event log, K.log: nil for
-- nothing, else log_spec's {max = entry cap, budget = bytes, wants =
-- {event name = true}}. Edges of channels starting with unlogged are never
-- logged, counts of those starting with uncounted neither.
local LOG = log_spec(ARGV[2])
if LOG then K.log = KEYS[4] end
local unlogged, uncounted = ARGV[3] or '', ARGV[4] or ''

-- Every key a script touches is declared in KEYS, so Redis Cluster routes
-- (or refuses, with TRYAGAIN/ASK) the whole script during a slot
-- migration instead of failing it halfway on a key that moved. declared
-- is that set; missing_keys (below) checks a unit's fields against it
-- before anything is written.
local declared = {}
for _, k in ipairs(KEYS) do declared[k] = true end

-- before[k] and after[k] hold a touched global value as it was before this
-- unit and as it is now, so net edges can be reported (a replace may take a
-- value down and back up) without reading anything twice.
local touched_ch, touched_m, before, after = {}, {}, {}, {}

local function split_member(rest)
  local sep = string.find(rest, '\n', 1, true)
  return string.sub(rest, 1, sep - 1), string.sub(rest, sep + 1)
end

-- field_keys lists the derived keys a contribution field touches.
local function field_keys(f)
  local kind = string.sub(f, 1, 1)
  if kind == 'm' then
    local ch = split_member(string.sub(f, 3))
    return {K.members(ch), K.info(ch)}
  elseif kind == 'n' then
    return {K.conns}
  end
  return {}
end

-- missing_keys returns the fields (of a flat field, value list) whose keys
-- the caller did not declare; the caller must retry declaring them.
local function missing_keys(list)
  local missing = {}
  for i = 1, #list, 2 do
    for _, k in ipairs(field_keys(list[i])) do
      if not declared[k] then
        table.insert(missing, list[i])
        break
      end
    end
  end
  return missing
end

local function apply_field(f, n, info)
  local kind = string.sub(f, 1, 1)
  if kind == 'c' then
    local ch = string.sub(f, 3)
    local k = 'c' .. ch
    local v = tonumber(redis.call('ZINCRBY', K.global, n, ch))
    if before[k] == nil then
      before[k] = v - n
      table.insert(touched_ch, ch)
    end
    after[k] = v
    if v <= 0 then
      redis.call('ZREM', K.global, ch)
    end
  elseif kind == 'm' then
    local ch, user = split_member(string.sub(f, 3))
    local mk, ik = K.members(ch), K.info(ch)
    local k = 'm' .. ch .. '\n' .. user
    local v = tonumber(redis.call('HINCRBY', mk, user, n))
    if before[k] == nil then
      before[k] = v - n
      table.insert(touched_m, {ch, user, ik, k})
    end
    after[k] = v
    if v <= 0 then
      redis.call('HDEL', mk, user)
      redis.call('HDEL', ik, user)
    elseif info then
      redis.call('HSET', ik, user, info)
    end
  elseif kind == 'n' then
    if tonumber(redis.call('INCRBY', K.conns, n)) <= 0 then
      redis.call('DEL', K.conns)
    end
  end
end

-- call_in_chunks calls cmd on key with the values of args, a few thousand
-- at a time (Lua's unpack takes fewer than 8,000), and returns the reply
-- (of one chunk; the elements of all in order when there are several).
-- #args may be odd only below a chunk.
local function call_in_chunks(cmd, key, args)
  if #args <= 4000 then
    return redis.call(cmd, key, unpack(args))
  end
  local out = {}
  for i = 1, #args, 4000 do
    local r = redis.call(cmd, key, unpack(args, i, math.min(i + 3999, #args)))
    if type(r) == 'table' then
      for j = 1, #r do out[#out + 1] = r[j] end
    end
  end
  return out
end

-- apply_channels adds ns[i] to the global count of channel chs[i] for each
-- i, as apply_field does for a 'c' field, with its bookkeeping, but in three
-- commands whatever their number (ZMSCORE, then one ZADD of the counts
-- still positive and one ZREM of the others), not one or two per channel:
-- most of a reap slice's fields are channels. A channel is listed once.
local function apply_channels(chs, ns)
  if #chs == 0 then return end
  local was = call_in_chunks('ZMSCORE', K.global, chs)
  local zadd, zrem, na, nr = {}, {}, 0, 0
  local nt = #touched_ch
  for i, ch in ipairs(chs) do
    -- A score read is a numeric string; arithmetic converts it once
    -- (tonumber would twice), false (no score) is 0.
    local k, old = 'c' .. ch, was[i] and was[i] + 0 or 0
    local v = old + ns[i]
    if before[k] == nil then
      before[k] = old
      nt = nt + 1
      touched_ch[nt] = ch
    end
    after[k] = v
    if v > 0 then
      zadd[na + 1], zadd[na + 2], na = v, ch, na + 2
    elseif was[i] then
      zrem[nr + 1], nr = ch, nr + 1
    end
  end
  if na > 0 then call_in_chunks('ZADD', K.global, zadd) end
  if nr > 0 then call_in_chunks('ZREM', K.global, zrem) end
end

-- next_version returns the version of this unit's changes (see
-- changes): above every earlier unit's of the app, whose last K.seq
-- keeps, and never below this shard's clock in microseconds. So a shard
-- that lost the key (a restart without persistence, a failover to a
-- replica behind) still counts up from where its predecessor was, unless
-- the app ran over a million units a second.
local function next_version()
  local t = redis.call('TIME')
  local v = math.max(tonumber(redis.call('GET', K.seq) or '0') + 1,
    tonumber(t[1]) * 1000000 + tonumber(t[2]))
  redis.call('SET', K.seq, string.format('%d', v))
  return v
end

-- changes lists the net effect of this unit: {version, channel, new count,
-- ...} for the touched channels whose count moved (just {version} if only
-- members did, empty if nothing), and {1|0, channel, user, info} for every
-- presence member that joined (0 -> >0) or left (>0 -> 0). The version
-- orders this unit's counts and member edges after every earlier unit's
-- of the app, whichever node ran it, so a receiver can drop a count that
-- arrives after a newer one, and a member edge that a member list read
-- with a later K.seq already holds.
local function changes()
  local chans, edges = {}, {}
  for _, ch in ipairs(touched_ch) do
    local now = math.max(after['c' .. ch], 0)
    if now ~= before['c' .. ch] then
      table.insert(chans, ch)
      table.insert(chans, now)
    end
  end
  for _, t in ipairs(touched_m) do
    local ch, user, ik, k = t[1], t[2], t[3], t[4]
    local was, now = before[k], after[k]
    if was <= 0 and now > 0 then
      table.insert(edges, 1)
      table.insert(edges, ch)
      table.insert(edges, user)
      table.insert(edges, redis.call('HGET', ik, user) or '')
    elseif was > 0 and now <= 0 then
      table.insert(edges, 0)
      table.insert(edges, ch)
      table.insert(edges, user)
      table.insert(edges, '')
    end
  end
  if #chans > 0 or #edges > 0 then
    table.insert(chans, 1, next_version())
  end
  return chans, edges
end

local function starts(ch, prefix)
  return prefix ~= '' and string.sub(ch, 1, #prefix) == prefix
end

-- log_events logs this unit's changes to the app's event log when the
-- caller gave it (LOG; a stream the webhook deliverers read), as
-- markers (see log_mark in the event log's Lua) of the events the app's
-- webhooks ask for: exactly the edges this unit made, in the same unit, so
-- a crash can lose a change only together with its event. Per unit, a
-- channel's occupied comes before its members' events and its count, and
-- its vacated after them. Like every event they are held to the log's
-- byte budget; a marker pending already for the same channel (and user)
-- takes a change at no cost, so what clients do costs the log at most one
-- entry per channel, member and kind while its webhooks are behind.
local function log_events(edges)
  if not LOG then return end
  local t = string.format('%d', now_ms())
  local h
  local function mark(name, ch, user)
    if LOG.wants[name] then
      h = h or log_open(K.log, LOG.max, LOG.budget) -- read only by units that log something
      log_mark(h, t, name, ch, user)
    end
  end
  local vacated = {}
  for _, ch in ipairs(touched_ch) do
    local was, now = math.max(before['c' .. ch], 0), math.max(after['c' .. ch], 0)
    if starts(ch, unlogged) then
      -- never: an internal channel has no webhooks
    elseif was == 0 and now > 0 then
      mark('channel_occupied', ch)
    elseif was > 0 and now == 0 then
      table.insert(vacated, ch)
    end
  end
  for i = 1, #edges, 4 do
    local name = 'member_removed'
    if edges[i] == 1 then name = 'member_added' end
    if not starts(edges[i + 1], unlogged) then
      mark(name, edges[i + 1], edges[i + 2])
    end
  end
  for _, ch in ipairs(touched_ch) do
    local was, now = math.max(before['c' .. ch], 0), math.max(after['c' .. ch], 0)
    if now > 0 and now ~= was and not starts(ch, unlogged) and not starts(ch, uncounted) then
      mark('subscription_count', ch)
    end
  end
  for _, ch in ipairs(vacated) do
    mark('channel_vacated', ch)
  end
end
