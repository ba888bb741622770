-- freshlib.lua (prelude fresh) is prepended to fresh.lua, channel.lua and
-- top.lua. KEYS, ARGV: none of its own; the caller passes its nodes key
-- and stale-after.
-- freshness reads how fresh an app's counts are, by the clock of the shard
-- that holds them (the clock apply.lua stamps last-seen times with), so no
-- httpapi clock is ever compared with a node's. O(log nodes).
-- Returns {now ms, registered nodes, oldest last-seen ms (now when none),
-- nodes whose last-seen is at least stale_ms old}.
-- uses: now_ms
local function freshness(nodes, stale_ms)
  local now = now_ms()
  local oldest = redis.call('ZRANGE', nodes, 0, 0, 'WITHSCORES')
  local stale = redis.call('ZCOUNT', nodes, '-inf', now - tonumber(stale_ms))
  return {now, redis.call('ZCARD', nodes), tonumber(oldest[2] or now), stale}
end
