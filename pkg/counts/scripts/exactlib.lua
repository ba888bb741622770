-- exactlib.lua (prelude exact, counts.ExactPrelude) is prepended to every
-- script that reads counts, after STATUS_REAPS, RETIRE_PREFIX, REAP_WINDOW
-- and TOP_WINDOW (scripts.go prepends them from exact.go). A reap renames a dead node's contribution under
-- a key of its own (reap.lua) and each of its slices subtracts from the
-- globals exactly the fields it deletes there (reap_slice.lua), so after
-- every unit a global minus what the reaping hashes still hold of it is
-- the sum of the registered (live) contributions. These reads return that,
-- so a node's sockets leave every read the moment it is known dead.
-- A retire's reap (its id starts with RETIRE_PREFIX) holds a live node's
-- contribution being republished: it stays counted, and is not declared,
-- while its node is registered. A node known dead mid-republish is not
-- (reap.lua unregisters it), and its retire then goes like any reap.
-- KEYS[at] is the app's reaps SET, KEYS[at+1] its nodes ZSET, KEYS[at+2..]
-- the reaping hash of each other reap the caller believes under way
-- (keys.go: reapingKey is the reaps key's sibling "reaping:<id>", id
-- "<nonce>:<node>"). Field names are lib.lua's. ARGV: none of its own.
-- uses: none

-- reaping returns the reaping hashes of the reaps under way (usually
-- none), or nil and the reaps' ids when the caller declared other keys: it
-- must retry declaring those (a reap started or ended since it looked), as
-- no script may touch a key it did not declare.
local function reaping(at)
  local reaps, nodes = KEYS[at], KEYS[at + 1]
  local prefix = string.sub(reaps, 1, -6) .. 'reaping:' -- 'reaps' -> 'reaping:'
  local ids = {}
  for _, id in ipairs(redis.call('SMEMBERS', reaps)) do
    local colon = string.find(id, ':', 1, true)
    if string.sub(id, 1, #RETIRE_PREFIX) ~= RETIRE_PREFIX or
        (colon and not redis.call('ZSCORE', nodes, string.sub(id, colon + 1))) then
      ids[#ids + 1] = id
    end
  end
  if #ids ~= #KEYS - at - 1 then return nil, ids end
  local given = {}
  for i = at + 2, #KEYS do given[KEYS[i]] = true end
  local hs = {}
  for i, id in ipairs(ids) do
    hs[i] = prefix .. id
    if not given[hs[i]] then return nil, ids end
  end
  return hs
end

-- held returns, for each of fields, what the reaping hashes hs still hold
-- of it in all: one HMGET per reap and 4,000 fields, O(#fields * #hs).
local function held(hs, fields)
  local out = {}
  for i = 1, #fields do out[i] = 0 end
  for _, h in ipairs(hs) do
    for i = 1, #fields, 4000 do
      local j = math.min(i + 3999, #fields)
      local vs = redis.call('HMGET', h, unpack(fields, i, j))
      for k = 1, j - i + 1 do
        if vs[k] then out[i + k - 1] = out[i + k - 1] + vs[k] end
      end
    end
  end
  return out
end

-- live takes a flat {name, count, ...} list read from a global (the
-- channel counts, or a presence channel's members) and returns it with
-- what hs hold of each name's field (field(name)) subtracted, without the
-- names left at 0 or below (vacant, or gone), counts as decimal strings.
local function live(hs, kv, field)
  if #hs == 0 then return kv end
  local fields = {}
  for i = 1, #kv, 2 do fields[#fields + 1] = field(kv[i]) end
  local h = held(hs, fields)
  local out = {}
  for i = 1, #kv, 2 do
    local n = kv[i + 1] - h[(i + 1) / 2]
    if n > 0 then
      out[#out + 1] = kv[i]
      out[#out + 1] = string.format('%d', n)
    end
  end
  return out
end

local function channel_field(ch) return 'c:' .. ch end

-- member_field(ch) names, for live, a user's field in presence channel ch.
local function member_field(ch)
  return function(user) return 'm:' .. ch .. '\n' .. user end
end

-- live_of returns, as a set, the users of list who are members of
-- presence channel ch (members hash m) with sockets left once what hs hold
-- is subtracted: one HMGET per 1,000 users, and as many per reap.
local function live_of(hs, m, ch, list)
  local kv = {}
  for i = 1, #list, 1000 do
    local vals = redis.call('HMGET', m, unpack(list, i, math.min(i + 999, #list)))
    for j = 1, #vals do
      if vals[j] then
        kv[#kv + 1] = list[i + j - 1]
        kv[#kv + 1] = vals[j]
      end
    end
  end
  local set = {}
  kv = live(hs, kv, member_field(ch))
  for i = 1, #kv, 2 do set[kv[i]] = true end
  return set
end

-- members_channel returns the presence channel whose members hash is m, a
-- sibling of the reaps set KEYS[at] (keys.go: membersKey is
-- "members:<channel>"), for scripts given the hash but not the channel.
local function members_channel(at, m)
  return string.sub(m, #KEYS[at] - #'reaps' + #'members:' + 1)
end

-- live_members returns {user, sockets, ...} of presence channel ch, whose
-- members hash is m, as live does. O(members * #hs): members are bounded
-- by the channel's member cap (the admission gate); the internal
-- signed-in channel, which has none, is read by AreMembers only.
local function live_members(hs, m, ch)
  return live(hs, redis.call('HGETALL', m), member_field(ch))
end

-- user_count is the number of live_members: one HLEN while no reap is
-- under way.
local function user_count(hs, m, ch)
  if #hs == 0 then return redis.call('HLEN', m) end
  return #live_members(hs, m, ch) / 2
end

-- held_channels returns the channels the reaping hashes hs hold sockets of,
-- each with what they hold in all, as one HSCAN of REAP_WINDOW per reap
-- finds them, and whether those scans found every one: a reap of up to
-- about REAP_WINDOW fields is read whole, a larger one in part, so the
-- work never grows with a node's size. O(REAP_WINDOW * #hs * #hs).
local function held_channels(hs)
  local names, seen, complete = {}, {}, true
  for _, h in ipairs(hs) do
    local r = redis.call('HSCAN', h, '0', 'MATCH', 'c:*', 'COUNT', REAP_WINDOW)
    if r[1] ~= '0' then complete = false end
    for i = 1, #r[2], 2 do
      if not seen[r[2][i]] then
        seen[r[2][i]] = true
        names[#names + 1] = r[2][i]
      end
    end
  end
  local h, out = held(hs, names), {}
  for i, f in ipairs(names) do out[string.sub(f, 3)] = h[i] end
  return out, complete
end

-- global_of returns the global counts (ZSET g) of the channels of held
-- (held_channels), as numbers, nil for a vacant one: one ZMSCORE per 1,000.
local function global_of(g, held)
  local names, out = {}, {}
  for ch in pairs(held) do names[#names + 1] = ch end
  for i = 1, #names, 1000 do
    local vs = redis.call('ZMSCORE', g, unpack(names, i, math.min(i + 999, #names)))
    for k = 1, #vs do
      if vs[k] then out[names[i + k - 1]] = tonumber(vs[k]) end
    end
  end
  return out
end

-- vacant_live counts the channels of global ZSET g that only the reaps hs
-- hold sockets of (vacant once those leave), as far as held_channels finds
-- them, and whether it found all: ZCARD minus it is the occupied channels,
-- exact when complete, else above the truth by at most what was not found.
local function vacant_live(hs, g)
  if #hs == 0 then return 0, true end
  local held, complete = held_channels(hs)
  local n = 0
  for ch, s in pairs(global_of(g, held)) do
    if s - held[ch] <= 0 then n = n + 1 end
  end
  return n, complete
end

-- beats: a channel of count n and name a comes before one of count m and
-- name b on the leaderboard (most first, equal counts in reverse name
-- order, as ZREVRANGE orders them).
local function beats(n, a, m, b)
  if n ~= m then return n > m end
  return a > b
end

-- live_rank is the 0-based leaderboard place of channel ch, of live count
-- n and global count s (ZSET g), among the channels as the reaps hs leave
-- them: its place by the globals (ZREVRANK when n is s, else counted
-- around n, O(log^2 channels)), less the channels that beat it by their
-- global count but not by their live one. Exact when held_channels finds
-- every channel of the reaps; else it may place ch lower, never higher.
local function live_rank(hs, g, ch, n, s)
  if #hs == 0 then return redis.call('ZREVRANK', g, ch) end
  local r
  if n == s then
    r = redis.call('ZREVRANK', g, ch)
  else
    local above = redis.call('ZCOUNT', g, '(' .. n, '+inf')
    -- The channels of count n hold places above.. in reverse name order:
    -- find how many of them have a name above ch.
    local lo, hi = 0, redis.call('ZCOUNT', g, n, n)
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if redis.call('ZREVRANGE', g, above + mid, above + mid)[1] > ch then lo = mid + 1 else hi = mid end
    end
    r = above - 1 + lo -- ch's own global is above n
  end
  local held = held_channels(hs)
  for x, gx in pairs(global_of(g, held)) do
    if x ~= ch and beats(gx, x, n, ch) and not beats(gx - held[x], x, n, ch) then r = r - 1 end
  end
  return r
end
