-- stale.lua: list nodes whose last-seen is at least dead-after old, by the
-- clock of the shard that holds them (the same clock apply.lua wrote with).
-- KEYS[1] nodes
-- ARGV[1] dead-after in ms, ARGV[2] at most this many nodes
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]), 'LIMIT', 0, tonumber(ARGV[2]))
