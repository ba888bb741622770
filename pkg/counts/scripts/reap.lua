-- reap.lua: the first unit of a node's removal. It re-checks the node's
-- staleness by this shard's clock, unregisters it (so its further deltas
-- are refused and it republishes from scratch) and moves its contribution,
-- untouched, under a key of this reap alone (RENAME: O(1)). The global
-- counts still include that contribution; reap_slice.lua subtracts it a
-- slice at a time. A node that republishes meanwhile writes a new
-- contribution hash, which no slice of this reap ever reads. The node's
-- epoch (KEYS[5]) goes with its registration: a retire sets a fresh one, so
-- apply.lua refuses every unit the node sent before (see apply.lua); a reap
-- deletes it, so the hash holds registered nodes only.
-- KEYS[1] nodes    ZSET node -> last-seen
-- KEYS[2] node     HASH the node's contribution
-- KEYS[3] reaping  HASH where the contribution goes (unique to this reap)
-- KEYS[4] reaps    SET of the reaps under way (their reaping keys' suffix)
-- KEYS[5] epochs   HASH node -> token of its current contribution
-- KEYS[6] complete STRING from when (ms) the app's counts hold every live
--         node's contribution (keys.go, completeKey)
-- ARGV[1] node id
-- ARGV[2] dead-after in ms: reap only if last-seen is at least this old by
--         this shard's clock (re-checked here, so a node that came back after
--         the cleaner looked is spared); -1 reaps unconditionally (a node
--         removing itself on a graceful stop).
-- ARGV[3] the reaping key's suffix, recorded in KEYS[4]
-- ARGV[4] '1': the node itself retires its contribution to republish it
--         (Recorder): no check, and the node stays registered, with an
--         empty contribution its deltas then fill; else '0'.
-- ARGV[5] when retiring, the node's new epoch (a fresh random token)
-- ARGV[6] when retiring, the settle time (ms): how long every live node
--         takes to find its contribution gone and republish
-- ARGV[7] when retiring, the epoch the node last republished under ('' for
--         its first republish in the app)
-- Returns {STATUS_SPARED} if nothing was reaped (statuses: keys.go), else {fields moved, ms from the
-- node's last-seen to this reap by this shard's clock (0 when retiring)}.
-- uses: status, now_ms, eventlog
local nodes, node, reaping, reaps, epochs, complete = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, dead_after, retire = ARGV[1], tonumber(ARGV[2]), ARGV[4] == '1'

if retire and (ARGV[5] or '') == '' then
  return redis.error_reply('a retire needs an epoch')
end
local now = now_ms()
local seen = redis.call('ZSCORE', nodes, id)
if retire then
  -- A node that republished before and is not registered lost its
  -- contribution: Redis lost its data (or reaped the node while alive),
  -- so other nodes' may be gone too, until each has republished. The
  -- counts are complete a settle time from now, not earlier. The first
  -- registration Redis sees of a node without such a past makes them
  -- complete at once (a fresh Redis).
  local ready = now
  if (ARGV[7] or '') ~= '' and not seen then ready = now + tonumber(ARGV[6]) end
  local was = tonumber(redis.call('GET', complete) or '-1')
  if was < 0 or ready > math.max(was, now) then
    redis.call('SET', complete, string.format('%d', ready))
  end
  seen = now
elseif not seen then
  -- An epoch of a node not registered is no one's (one an older cleaner
  -- left, which did not know of epochs): drop it.
  redis.call('HDEL', epochs, id)
  return {STATUS_SPARED}
elseif dead_after >= 0 and tonumber(seen) > now - dead_after then
  return {STATUS_SPARED}
end
if redis.call('EXISTS', reaping) == 1 then
  return redis.error_reply('reaping key exists already: ' .. reaping)
end
local n = redis.call('HLEN', node)
if n > 0 then
  redis.call('RENAME', node, reaping)
  redis.call('SADD', reaps, ARGV[3])
end
if retire then
  redis.call('ZADD', nodes, now, id)
  redis.call('HSET', epochs, id, ARGV[5])
else
  redis.call('ZREM', nodes, id)
  redis.call('HDEL', epochs, id)
end
return {n, now - tonumber(seen)}
