-- stale.lua: list nodes whose last-seen is at least dead-after old, by the
-- clock of the shard that holds them (the same clock apply.lua wrote with).
-- KEYS[1] nodes
-- ARGV[1] dead-after in ms, ARGV[2] at most this many nodes
-- uses: now_ms
local now = now_ms()
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]), 'LIMIT', 0, tonumber(ARGV[2]))
