-- repair.lua: set one global entry to the sum of the registered nodes'
-- contributions to it, in one atomic unit. The sum is read and the global
-- written in the same unit, so an apply or reap that ran before it is part
-- of the sum and one that runs after moves contribution and global together:
-- concurrent updates are kept, never overwritten. Node contributions are
-- only read, and so are those of reaps under way (see reap.lua), which the
-- globals include until their slices subtract them. O(registered nodes +
-- reaps under way).
-- KEYS[1] nodes    ZSET node -> last-seen
-- KEYS[2] global   ZSET channel -> sockets cluster-wide
-- ARGV[1] key prefix of the app ("<prefix>:{app}:")
-- ARGV[2] the contribution field whose global entry to repair (see lib.lua):
--         c:<channel>, m:<channel>\n<user> or n
-- KEYS[3..] every registered node's contribution hash, the set of reaps
--         under way and each one's hash, and the keys the
--         field writes (members/info, conns): declared, so the unit stays
--         whole during a Cluster slot migration.
-- Returns {1 if the entry changed else 0, its value now (0: absent)}, or
-- {STATUS_UNDECLARED, 0} if a key it needs was not declared (nothing
-- written: the caller retries with the nodes registered now).
-- uses: status, sources
local nodes, global = KEYS[1], KEYS[2]
local P, f = ARGV[1], ARGV[2]
local declared = {}
for _, k in ipairs(KEYS) do declared[k] = true end
local sources = contribution_keys(P, redis.call('ZRANGE', nodes, 0, -1), declared)
if not sources then return {STATUS_UNDECLARED, 0} end
local need = {}
if string.sub(f, 1, 1) == 'm' then
  local rest = string.sub(f, 3)
  local sep = string.find(rest, '\n', 1, true)
  if sep then
    local ch = string.sub(rest, 1, sep - 1)
    table.insert(need, P .. 'members:' .. ch)
    table.insert(need, P .. 'info:' .. ch)
  end
elseif f == 'n' then
  table.insert(need, P .. 'conns')
end
for _, k in ipairs(need) do
  if not declared[k] then return {STATUS_UNDECLARED, 0} end
end

local sum = 0
for _, src in ipairs(sources) do
  sum = sum + (tonumber(redis.call('HGET', src[2], f)) or 0)
end
-- A count is never negative: a (corrupt) negative sum leaves no entry.
local want = math.max(sum, 0)
-- '%d', not tostring: a large count must stay an integer HINCRBY can take.
local wants = string.format('%d', want)

local kind, before = string.sub(f, 1, 1), false
if kind == 'c' then
  local ch = string.sub(f, 3)
  before = redis.call('ZSCORE', global, ch)
  if want > 0 then
    redis.call('ZADD', global, wants, ch)
  else
    redis.call('ZREM', global, ch)
  end
elseif kind == 'm' then
  local rest = string.sub(f, 3)
  local sep = string.find(rest, '\n', 1, true)
  if not sep then
    return redis.error_reply('bad member field ' .. f)
  end
  local ch, user = string.sub(rest, 1, sep - 1), string.sub(rest, sep + 1)
  local mk = P .. 'members:' .. ch
  before = redis.call('HGET', mk, user)
  if want > 0 then
    redis.call('HSET', mk, user, wants)
  else
    -- As apply.lua does when a member leaves: its user_info goes too.
    redis.call('HDEL', mk, user)
    redis.call('HDEL', P .. 'info:' .. ch, user)
  end
elseif f == 'n' then
  before = redis.call('GET', P .. 'conns')
  if want > 0 then
    redis.call('SET', P .. 'conns', wants)
  else
    redis.call('DEL', P .. 'conns')
  end
else
  return redis.error_reply('unknown field ' .. f)
end

local changed = 0
if (not before and want > 0) or (before and (want == 0 or tonumber(before) ~= want)) then
  changed = 1
end
return {changed, want}
