-- nodeseen.lua: record a node's node-level last-seen on the liveness shard,
-- by its clock, and whether the node's liveness subscription is confirmed.
-- It also records where the node's admin port answers GET /liveness, for
-- the cleaner's watch.
-- KEYS[1] seen (node -> ms), KEYS[2] subscribed (node -> ms), KEYS[3] addr
-- (node -> host:port)
-- ARGV[1] node id, ARGV[2] '1' when the node's subscription is confirmed,
-- ARGV[3] '1' when the call only records a confirmation: the last-seen,
-- which says when the node last wrote its counts, is then only set if the
-- node has none yet; ARGV[4] the node's admin address, '' for none.
-- uses: now_ms
local now = now_ms()
if ARGV[3] == '1' then
  redis.call('ZADD', KEYS[1], 'NX', now, ARGV[1])
else
  redis.call('ZADD', KEYS[1], now, ARGV[1])
end
if ARGV[2] == '1' then
  redis.call('ZADD', KEYS[2], now, ARGV[1])
end
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
else
  redis.call('HDEL', KEYS[3], ARGV[1])
end
return now
