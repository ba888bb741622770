-- lib.lua: shared by every admission script. Per channel:
--   KEYS[1] cap      STRING  capacity override (PUT .../capacity)
--   KEYS[2] slots    ZSET    user -> slot expiry (ms): admitted users
--   KEYS[3] wait     ZSET    user -> arrival sequence: the waiting list
--   KEYS[4] seen     ZSET    user -> last check-in (ms) of each waiter
--   KEYS[5] seq      STRING  arrival counter
--   KEYS[6] members  HASH    the presence members (owned by counts; read only)
--   KEYS[7] grace    SET     slot holders who left and are within their grace
-- Times come from Redis's clock, so every replica agrees on them.
local K = {cap = KEYS[1], slots = KEYS[2], wait = KEYS[3], seen = KEYS[4], seq = KEYS[5], members = KEYS[6], grace = KEYS[7]}

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The channel's override, else the app's prefix rule; 0 means no limit.
local function capacity(rule)
  local v = redis.call('GET', K.cap)
  if v then return tonumber(v) end
  return tonumber(rule)
end

local function is_member(u)
  return redis.call('HEXISTS', K.members, u) == 1
end

-- sweep frees the expired slots of users who are not members (unused
-- tickets, leavers past their grace) and renews members' slots, so a member
-- who leaves keeps at least the grace; it strikes waiters silent past the
-- dropout time. Returns the freed users and the dropped waiters.
local function sweep(now, grace, dropout)
  local freed = {}
  for _, u in ipairs(redis.call('ZRANGEBYSCORE', K.slots, '-inf', now)) do
    if is_member(u) then
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

-- occupancy: distinct users among the members and the slot holders. The
-- slot holders' membership is read with one HMGET per 1,000 (not one
-- HEXISTS each): this runs on every check.
local function occupancy()
  local n = redis.call('HLEN', K.members)
  local slots = redis.call('ZRANGE', K.slots, 0, -1)
  for i = 1, #slots, 1000 do
    local vals = redis.call('HMGET', K.members, unpack(slots, i, math.min(i + 999, #slots)))
    for j = 1, #vals do
      if not vals[j] then n = n + 1 end
    end
  end
  return n
end

-- promote admits waiters from the head of the list while there is room.
local function promote(now, cap, ticket, occ)
  local promoted = {}
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
