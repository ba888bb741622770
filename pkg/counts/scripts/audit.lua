-- audit.lua: recompute an app's global counts from its registered nodes'
-- contributions and list every global entry that differs from them. One
-- read-only script, so the comparison is atomic: no write lands between the
-- reads, and drift it reports is drift, never a write seen half-way.
-- Cost: O(contribution fields + occupied channels + presence members) of
-- the app, during which the shard serves no one else (see doc.go).
-- The contributions of reaps under way (see reap.lua) count as
-- contributions: the globals include them until their slices subtract them.
-- KEYS[1] nodes    ZSET node -> last-seen
-- KEYS[2] global   ZSET channel -> sockets cluster-wide
-- KEYS[3] conns    STRING open sockets cluster-wide
-- KEYS[4..] the contribution hash of every registered node, the set of
--         reaps under way and the hash of each, and the member
--         hash of every channel in ARGV[2..]: declared, so the unit stays
--         whole during a Cluster slot migration
-- ARGV[1] key prefix of the app ("<prefix>:{app}:"); the script derives
--         the names above from it only to check they were declared
-- ARGV[2..] channels whose member hash to compare: those with a member
--         hash (the caller found them by SCAN) and those the contributions
--         name. A member hash no contribution names is compared because
--         the SCAN found it; a channel that has neither has nothing to
--         compare.
-- Returns {-3, nodes_missing (0|1), channels} if a key it needs was not
-- declared (nothing is compared: the caller retries declaring the nodes
-- registered now and those channels), else {registered nodes, diffs},
-- diffs a flat list of 6-tuples
--   kind  'c' channel, 'm' presence member, 'n' connections, or 'x' a
--         contribution field that is zero, negative or not an integer
--   a     channel ('c', 'm'), node id ('x'; 'reaping:<id>' for a reap
--         under way), '' ('n')
--   b     user ('m'), the field ('x'), '' otherwise
--   want  sum over registered nodes (integer; 0: the entry must be absent)
--   have  the stored value as Redis holds it ('' when absent)
--   present 1 when the entry exists, else 0
local nodes, global, conns_key = KEYS[1], KEYS[2], KEYS[3]
local P = ARGV[1]
local declared = {}
for _, k in ipairs(KEYS) do declared[k] = true end

local diffs = {}
local function diff(kind, a, b, want, have, present)
  for _, v in ipairs({kind, a, b, want, have, present}) do
    table.insert(diffs, v)
  end
end

local function is_count(v)
  return v ~= nil and v > 0 and v == math.floor(v)
end

-- wrong reports whether a stored global value differs from want: a stored
-- entry must be a positive count equal to want; an absent one is right only
-- when want is 0 (or below: the bad contribution is reported as 'x').
local function wrong(raw, want)
  if not raw then
    return want > 0
  end
  local v = tonumber(raw)
  return not is_count(v) or v ~= want
end

local ch_want, m_want, n_want = {}, {}, 0
local ids = redis.call('ZRANGE', nodes, 0, -1)
local sources = contribution_keys(P, ids, declared)
if not sources then
  return {-3, 1, {}}
end
for _, src in ipairs(sources) do
  local id = src[1]
  local h = redis.call('HGETALL', src[2])
  for i = 1, #h, 2 do
    local f, raw = h[i], h[i + 1]
    local v = tonumber(raw)
    if not is_count(v) then
      diff('x', id, f, 0, raw, 1)
    end
    v = v or 0
    local kind = string.sub(f, 1, 1)
    if kind == 'c' then
      local ch = string.sub(f, 3)
      ch_want[ch] = (ch_want[ch] or 0) + v
    elseif kind == 'm' then
      local rest = string.sub(f, 3)
      local sep = string.find(rest, '\n', 1, true)
      if sep then
        local ch, user = string.sub(rest, 1, sep - 1), string.sub(rest, sep + 1)
        m_want[ch] = m_want[ch] or {}
        m_want[ch][user] = (m_want[ch][user] or 0) + v
      end
    elseif f == 'n' then
      n_want = n_want + v
    end
  end
end

-- Presence members of every channel the contributions name or the caller
-- found a member hash of; the hashes must have been declared.
local mchans, missing = {}, {}
for ch in pairs(m_want) do
  mchans[ch] = true
  if not declared[P .. 'members:' .. ch] then
    table.insert(missing, ch)
  end
end
if #missing > 0 then
  return {-3, 0, missing}
end
for i = 2, #ARGV do
  mchans[ARGV[i]] = true
end

-- Channels: every stored entry, then every wanted one not stored.
local have = redis.call('ZRANGE', global, 0, -1, 'WITHSCORES')
local stored = {}
for i = 1, #have, 2 do
  local ch, raw = have[i], have[i + 1]
  stored[ch] = true
  local want = ch_want[ch] or 0
  if wrong(raw, want) then
    diff('c', ch, '', want, raw, 1)
  end
end
for ch, want in pairs(ch_want) do
  if not stored[ch] and wrong(false, want) then
    diff('c', ch, '', want, '', 0)
  end
end

for ch in pairs(mchans) do
  local want = m_want[ch] or {}
  local h = redis.call('HGETALL', P .. 'members:' .. ch)
  local seen = {}
  for i = 1, #h, 2 do
    local user, raw = h[i], h[i + 1]
    seen[user] = true
    local w = want[user] or 0
    if wrong(raw, w) then
      diff('m', ch, user, w, raw, 1)
    end
  end
  for user, w in pairs(want) do
    if not seen[user] and wrong(false, w) then
      diff('m', ch, user, w, '', 0)
    end
  end
end

-- Connections.
local conns = redis.call('GET', conns_key)
if wrong(conns, n_want) then
  if conns then
    diff('n', '', '', n_want, conns, 1)
  else
    diff('n', '', '', n_want, '', 0)
  end
end

return {#ids, diffs}
