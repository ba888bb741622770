-- reap.lua: remove a node: subtract its contribution from the global counts,
-- delete it and its last-seen entry, in one atomic unit. Running it twice, or
-- from two cleaners at once, subtracts once: the second run finds no entry.
-- KEYS[1] nodes, KEYS[2] node, KEYS[3] global (as in apply.lua)
-- ARGV[1] node id
-- ARGV[2] dead-after in ms: reap only if last-seen is at least this old by
--         this shard's clock (re-checked here, so a node that came back after
--         the cleaner looked is spared); -1 reaps unconditionally (a node
--         removing itself on a graceful stop).
-- Returns the number of channels subtracted, or -1 if nothing was reaped.
local nodes, node, global = KEYS[1], KEYS[2], KEYS[3]
local id, dead_after = ARGV[1], tonumber(ARGV[2])

local seen = redis.call('ZSCORE', nodes, id)
if not seen then
  return -1
end
if dead_after >= 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if tonumber(seen) > now - dead_after then
    return -1
  end
end
local old = redis.call('HGETALL', node)
for i = 1, #old, 2 do
  if tonumber(redis.call('ZINCRBY', global, -tonumber(old[i + 1]), old[i])) <= 0 then
    redis.call('ZREM', global, old[i])
  end
end
redis.call('DEL', node)
redis.call('ZREM', nodes, id)
return #old / 2
