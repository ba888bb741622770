-- reap.lua: remove a node: subtract its contribution from the global counts,
-- delete it and its last-seen entry, in one atomic unit. Running it twice, or
-- from two cleaners at once, subtracts once: the second run finds no entry.
-- KEYS[1] nodes, KEYS[2] node, KEYS[3] global, KEYS[4] the event log if
-- ARGV[4] > 0, then the other keys the node's contribution touches (as in
-- apply.lua)
-- ARGV[1] node id
-- ARGV[2] dead-after in ms: reap only if last-seen is at least this old by
--         this shard's clock (re-checked here, so a node that came back after
--         the cleaner looked is spared); -1 reaps unconditionally (a node
--         removing itself on a graceful stop).
-- ARGV[3] key prefix of the app ("<prefix>:{app}:")
-- ARGV[4] the event log's entry cap, or 0 for no log (as in apply.lua)
-- Returns {-1} if nothing was reaped, {-3, fields} if the contribution has
-- fields whose keys were not declared (nothing written: retry declaring
-- them), else {fields subtracted, changed
-- channels, member edges (see changes() in lib.lua), ms from the node's
-- last-seen to this reap by this shard's clock}.
local nodes, node = KEYS[1], KEYS[2]
local id, dead_after = ARGV[1], tonumber(ARGV[2])
P = ARGV[3]
open_log(ARGV[4])

local seen = redis.call('ZSCORE', nodes, id)
if not seen then
  return {-1}
end
local now = now_ms()
if dead_after >= 0 and tonumber(seen) > now - dead_after then
  return {-1}
end
local old = redis.call('HGETALL', node)
local missing = missing_keys(old)
if #missing > 0 then
  return {-3, missing}
end
for i = 1, #old, 2 do
  apply_field(old[i], -tonumber(old[i + 1]), nil)
end
redis.call('DEL', node)
redis.call('ZREM', nodes, id)
local chans, edges = changes()
log_events(edges)
return {#old / 2, chans, edges, now - tonumber(seen)}
