-- audit.lua: one slice of an app's audit. It compares the global entries
-- of the fields it is given with the sum of every contribution the globals
-- include (registered nodes' and reaps' under way, see sources.lua), in one
-- read-only unit: no write lands between reading the two sides of an
-- entry, so drift it reports is drift, never a write seen half-way, even
-- while flushes land between slices. The caller walks the app by slices of
-- names (Store.Audit). Cost: O(contributions x fields given), in one
-- HMGET per contribution.
-- KEYS[1] nodes    ZSET node -> last-seen
-- KEYS[2] global   ZSET channel -> sockets cluster-wide
-- KEYS[3] conns    STRING open sockets cluster-wide
-- KEYS[4..] the contribution hash of every registered node, the set of
--         reaps under way and the hash of each, and the member hash of
--         every channel among the member fields given: declared, so the
--         unit stays whole during a Cluster slot migration
-- ARGV[1] key prefix of the app ("<prefix>:{app}:"); the script derives
--         the names above from it only to check they were declared
-- ARGV[2] 'g': the fields were read from the global side (the global
--         sorted set, member hashes, conns): compare each. 'o': they were
--         read from the contribution labelled ARGV[3]: report those of its
--         fields that are zero, negative or not an integer, and compare an
--         entry only if its global is absent (a present one is the global
--         side's to compare).
-- ARGV[3] the contribution's label ('o'), as contribution_keys names it
-- ARGV[4..] contribution field names (see lib.lua): c:<channel>,
--         m:<channel>\n<user>, n
-- Returns {STATUS_UNDECLARED, sources_missing (0|1), channels} if a key it
-- needs was not declared (nothing is compared: the caller retries
-- declaring the contributions registered now and those channels' member
-- hashes), else
-- {registered nodes, diffs}, diffs a flat list of 6-tuples
--   kind  'c' channel, 'm' presence member, 'n' connections, or 'x' a
--         contribution field that is zero, negative or not an integer
--   a     channel ('c', 'm'), the contribution's label ('x'), '' ('n')
--   b     user ('m'), the field ('x'), '' otherwise
--   want  sum over the contributions (integer; 0: the entry must be absent)
--   have  the stored value as Redis holds it ('' when absent)
--   present 1 when the entry exists, else 0
-- uses: status, sources
local nodes, global, conns_key = KEYS[1], KEYS[2], KEYS[3]
local P, mode, label = ARGV[1], ARGV[2], ARGV[3]
local declared = {}
for _, k in ipairs(KEYS) do declared[k] = true end

local ids = redis.call('ZRANGE', nodes, 0, -1)
local sources = contribution_keys(P, ids, declared)
if not sources then
  return {STATUS_UNDECLARED, 1, {}}
end

local function split_member(rest)
  local sep = string.find(rest, '\n', 1, true)
  if not sep then return nil end
  return string.sub(rest, 1, sep - 1), string.sub(rest, sep + 1)
end

local missing = {}
for i = 4, #ARGV do
  local f = ARGV[i]
  if string.sub(f, 1, 1) == 'm' then
    local ch = split_member(string.sub(f, 3))
    if ch and not declared[P .. 'members:' .. ch] then
      table.insert(missing, ch)
    end
  end
end
if #missing > 0 then
  return {STATUS_UNDECLARED, 0, missing}
end

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

-- stored returns the global value of field f (false when absent), and the
-- diff's kind, a and b; nil for a field that names no global entry.
local function stored(f)
  local kind = string.sub(f, 1, 1)
  if kind == 'c' then
    local ch = string.sub(f, 3)
    return redis.call('ZSCORE', global, ch), 'c', ch, ''
  elseif kind == 'm' then
    local ch, user = split_member(string.sub(f, 3))
    if not ch then return nil end
    return redis.call('HGET', P .. 'members:' .. ch, user), 'm', ch, user
  elseif f == 'n' then
    return redis.call('GET', conns_key), 'n', '', ''
  end
  return nil
end

if mode == 'o' then
  for _, src in ipairs(sources) do
    if src[1] == label and #ARGV >= 4 then
      local fields = {}
      for i = 4, #ARGV do table.insert(fields, ARGV[i]) end
      local vals = redis.call('HMGET', src[2], unpack(fields))
      for i, f in ipairs(fields) do
        if vals[i] and not is_count(tonumber(vals[i])) then
          diff('x', label, f, 0, vals[i], 1)
        end
      end
    end
  end
end

-- The entries to compare, then their sums: one HMGET per contribution,
-- not one HGET per entry and contribution.
local check = {}
for i = 4, #ARGV do
  local f = ARGV[i]
  local raw, kind, a, b = stored(f)
  if kind and not (mode == 'o' and raw) then
    table.insert(check, {f, raw, kind, a, b})
  end
end
if #check > 0 then
  local fields = {}
  for i, c in ipairs(check) do fields[i] = c[1] end
  local want = {}
  for i = 1, #check do want[i] = 0 end
  for _, src in ipairs(sources) do
    local vals = redis.call('HMGET', src[2], unpack(fields))
    for i = 1, #check do
      want[i] = want[i] + (tonumber(vals[i]) or 0)
    end
  end
  for i, c in ipairs(check) do
    local raw, kind, a, b = c[2], c[3], c[4], c[5]
    if wrong(raw, want[i]) then
      if raw then
        diff(kind, a, b, want[i], raw, 1)
      else
        diff(kind, a, b, want[i], '', 0)
      end
    end
  end
end

return {#ids, diffs}
