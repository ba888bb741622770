-- flight.lua: one attempt to get a shared full listing: the cached result,
-- or the lock that makes this caller the one to compute it.
-- KEYS[1] cache    STRING "<read-at ms> <occupied channels> <...>\n<body>"
-- KEYS[2] lock     STRING token, PX lock-ttl
-- KEYS[3] global   ZSET channel -> count (its ZCARD validates the cache)
-- KEYS[4] nodes    ZSET the app's registered nodes (so does its ZCARD: a
--         reap's first unit unregisters a dead node, whose sockets the
--         reads leave out from then, while the global counts hold them)
-- ARGV[1] token, ARGV[2] lock ttl in ms
-- ARGV[3] a cached result read after this time (ms) is taken even when the
--         number of occupied channels or nodes has changed since (a waiter takes the
--         result of the computation it waited for)
-- Returns {FLIGHT_CACHED, now, value} (use it), {FLIGHT_COMPUTE, now} (lock
-- taken: compute), or {FLIGHT_WAIT, now, lock pttl, read-at of a rejected
-- cached result or 0} (wait); the flight prelude declares the three
-- (scripts.go, from shared_listing.go).
-- uses: flight, now_ms
local now = now_ms()
local rejected = 0
local v = redis.call('GET', KEYS[1])
if v then
  local at, card, nodes = string.match(v, '^(%d+) (%d+) (%d+) ')
  at, card, nodes = tonumber(at), tonumber(card), tonumber(nodes)
  local same = card == redis.call('ZCARD', KEYS[3]) and nodes == redis.call('ZCARD', KEYS[4])
  if at and (same or at > tonumber(ARGV[3])) then
    return {FLIGHT_CACHED, now, v}
  end
  rejected = at or 0
end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {FLIGHT_COMPUTE, now}
end
return {FLIGHT_WAIT, now, redis.call('PTTL', KEYS[2]), rejected}
