-- candidates.lua: the nodes whose node-level last-seen is at least grace
-- and at most window old, by the liveness shard's clock, oldest first, with
-- their last-seen and whether they recorded a confirmed subscription. It
-- first drops entries older than window: those nodes are the heartbeat's
-- (dead-after) to judge, so the sets hold only nodes seen within it.
-- KEYS[1] seen, KEYS[2] subscribed
-- ARGV[1] grace ms, ARGV[2] window ms, ARGV[3] at most this many nodes
-- Returns {node, last-seen ms, 1 if subscribed else 0, ...}
-- uses: now_ms
local now = now_ms()
local oldest = now - tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. oldest)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. oldest)
local found = redis.call('ZRANGEBYSCORE', KEYS[1], oldest, now - tonumber(ARGV[1]), 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for i = 1, #found, 2 do
  out[#out + 1] = found[i]
  out[#out + 1] = found[i + 1]
  out[#out + 1] = redis.call('ZSCORE', KEYS[2], found[i]) and 1 or 0
end
return out
