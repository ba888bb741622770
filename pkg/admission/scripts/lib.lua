-- lib.lua: shared by every admission script. Per channel:
--   KEYS[1] cap      STRING  capacity override (PUT .../capacity)
--   KEYS[2] slots    ZSET    user -> slot expiry (ms): admitted users
--   KEYS[3] wait     ZSET    user -> arrival sequence: the waiting list
--   KEYS[4] seen     ZSET    user -> last check-in (ms) of each waiter
--   KEYS[5] seq      STRING  arrival counter
--   KEYS[6] members  HASH    the presence members (owned by counts; read only)
--   KEYS[7] grace    SET     slot holders who left and are within their grace
--   KEYS[8] hold     ZSET    user -> end (ms) of the hold a subscribe the
--                            gate let in put on their seat: a grace, time
--                            enough for the node to record the member
--   KEYS[9] complete STRING  the app's: from when (ms) the members hold
--                            every live node's (owned by counts; read only)
--   KEYS[10..] the app's reaps under way and their reaping hashes (counts;
--                            read only, see below)
-- ARGV, the same in every script: ARGV[1] user, ARGV[2] the apps file's
-- capacity rule (0: none), ARGV[3] ticket ms, ARGV[4] grace ms, ARGV[5]
-- dropout ms, ARGV[6] the member limit (0: none); waiters.lua adds users.
-- Times come from Redis's clock, so every replica agrees on them.
--
-- A seat is held by membership, a slot or a hold, and occupancy counts the
-- distinct users holding one. Between join.lua and the node's flush the
-- new member exists only in the gate: the hold keeps the seat taken until
-- it ends, whatever DELETE does to the slot or the user's other sockets do
-- to the membership, so the member's arrival never adds a user the gate did
-- not count (a node records a subscribe within milliseconds; a node stalled
-- longer than the grace is as good as dead).
-- uses: exact
local K = {cap = KEYS[1], slots = KEYS[2], wait = KEYS[3], seen = KEYS[4], seq = KEYS[5], members = KEYS[6], grace = KEYS[7], hold = KEYS[8], complete = KEYS[9]}

-- Membership is read as counts reads it (counts.ExactLua, prepended): a
-- user whose sockets are all on nodes known dead, whose reaps are under
-- way, is no member and holds no seat as such. A script that finds other
-- reaps than the caller declared answers STATUS_REAPS having done nothing;
-- the caller runs it again declaring them.
local HS, REAPS = reaping(10)
if not HS then return {STATUS_REAPS, REAPS} end
local CH = members_channel(10, K.members)

-- incomplete returns how long (ms) until the members hold every live
-- node's: 0 once they do, and -1 when no node registered since Redis's
-- data began (a fresh Redis, or one that lost its data: the nodes'
-- republish sets the time). Until then members may be missing, so a seat
-- that looks free may not be: nobody new is seated or admitted.
local function incomplete(now)
  local v = redis.call('GET', K.complete)
  if not v then return -1 end
  return math.max(tonumber(v) - now, 0)
end

-- The channel's override, else the app's prefix rule; 0 means no limit.
-- An override above MAX_CAPACITY (prepended by admission.go: capacity.Max),
-- written before there was a maximum, counts as the maximum: a larger
-- number would not reach the caller exact.
local function capacity(rule)
  local v = redis.call('GET', K.cap)
  if v then return math.min(tonumber(v), MAX_CAPACITY) end
  return tonumber(rule)
end

-- seats is the one rule of how many users a channel seats, and whether it
-- keeps a waiting list. A capacity (the override, else the apps file's
-- prefix rule) makes a listed channel (admission, with a FIFO list) of
-- that many seats, or of the member limit if it is smaller: a ticket must
-- never admit a user the member limit would then refuse. Without one the
-- member limit alone seats users, first come first served, with no list.
-- 0 seats: no limit at all.
local function seats()
  local cap, limit = capacity(ARGV[2]), tonumber(ARGV[6])
  if cap > 0 then
    if limit > 0 and limit < cap then cap = limit end
    return cap, true
  end
  return limit, false
end

local function is_member(u)
  return live_of(HS, K.members, CH, {u})[u] == true
end

-- members is how many users are members: one HLEN while no reap is under
-- way, else O(members * reaps).
local function members()
  return user_count(HS, K.members, CH)
end

-- is_held: a node's subscribe holds u's seat at now (ms). A hold that
-- ended holds nothing, swept or not.
local function is_held(u, now)
  return tonumber(redis.call('ZSCORE', K.hold, u) or 0) > now
end

-- hold keeps u's seat taken until at least until (ms). Every presence
-- channel gets holds (the member limit is a capacity too), most of them
-- never swept by a later call, so the key expires keep (ms) after its last
-- hold ends: long enough for any call in between to sweep and report the
-- ended ones.
local function hold(u, untilms, keep)
  local h = tonumber(redis.call('ZSCORE', K.hold, u) or 0)
  if h < untilms then redis.call('ZADD', K.hold, untilms, u) end
  local last = redis.call('ZRANGE', K.hold, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', K.hold, tonumber(last[2]) + keep)
end

-- sweep ends the holds past their end, frees the expired slots of users who
-- are neither members nor held (unused tickets, leavers past their grace)
-- and renews the others' slots, so a member who leaves keeps at least the
-- grace; it strikes waiters silent past the dropout time. A user whose
-- hold ends is freed if nothing else holds their seat. Returns the freed
-- users and the dropped waiters.
local function sweep(now, grace, dropout)
  local freed = {}
  local ended = redis.call('ZRANGEBYSCORE', K.hold, '-inf', now)
  if #ended > 0 then
    redis.call('ZREMRANGEBYSCORE', K.hold, '-inf', now)
    for _, u in ipairs(ended) do
      if not is_member(u) and not redis.call('ZSCORE', K.slots, u) then
        redis.call('SREM', K.grace, u)
        freed[#freed + 1] = u
      end
    end
  end
  for _, u in ipairs(redis.call('ZRANGEBYSCORE', K.slots, '-inf', now)) do
    if is_member(u) or is_held(u, now) then
      redis.call('ZADD', K.slots, now + grace, u)
    else
      redis.call('ZREM', K.slots, u)
      redis.call('SREM', K.grace, u)
      freed[#freed + 1] = u
    end
  end
  local dropped = redis.call('ZRANGEBYSCORE', K.seen, '-inf', now - dropout)
  for _, u in ipairs(dropped) do
    redis.call('ZREM', K.wait, u)
    redis.call('ZREM', K.seen, u)
  end
  return freed, dropped
end

-- not_members returns the users of list who are not members, reading
-- membership with one HMGET per 1,000 (not one HEXISTS each; live_of): this
-- runs on every check.
local function not_members(list)
  local live, out = live_of(HS, K.members, CH, list), {}
  for _, u in ipairs(list) do
    if not live[u] then out[#out + 1] = u end
  end
  return out
end

-- occupancy: distinct users among the members, the slot holders and the
-- held. (Holds last a grace from a subscribe, at most one per seat, and
-- most of them are members by then.) Two HMGETs and no call per user.
local function occupancy()
  local slots = redis.call('ZRANGE', K.slots, 0, -1)
  local n = members() + #not_members(slots)
  local slotted = {}
  for _, u in ipairs(slots) do slotted[u] = true end
  for _, u in ipairs(not_members(redis.call('ZRANGE', K.hold, 0, -1))) do
    if not slotted[u] then n = n + 1 end
  end
  return n
end

-- promote admits waiters from the head of the list while there is room,
-- none while the members are incomplete (a gate no node registered with
-- yet is taken as complete: an app may admit before any socket).
local function promote(now, cap, ticket, occ)
  local promoted = {}
  if incomplete(now) > 0 then return occ, promoted end
  while occ < cap do
    local head = redis.call('ZPOPMIN', K.wait)
    if #head == 0 then break end
    redis.call('ZREM', K.seen, head[1])
    redis.call('ZADD', K.slots, now + ticket, head[1])
    occ = occ + 1
    promoted[#promoted + 1] = head[1]
  end
  return occ, promoted
end

-- settle: sweep then promote; returns occupancy, promoted, dropped, freed.
local function settle(now, cap, ticket, grace, dropout)
  local freed, dropped = sweep(now, grace, dropout)
  local occ, promoted = promote(now, cap, ticket, occupancy())
  return occ, promoted, dropped, freed
end
