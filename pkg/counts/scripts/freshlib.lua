-- freshlib.lua is prepended to fresh.lua and channel.lua.
-- freshness reads how fresh an app's counts are, by the clock of the shard
-- that holds them (the clock apply.lua stamps last-seen times with), so no
-- httpapi clock is ever compared with a node's. O(log nodes).
-- Returns {now ms, registered nodes, oldest last-seen ms (now when none),
-- nodes whose last-seen is at least stale_ms old}.
local function freshness(nodes, stale_ms)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local oldest = redis.call('ZRANGE', nodes, 0, 0, 'WITHSCORES')
  local stale = redis.call('ZCOUNT', nodes, '-inf', now - tonumber(stale_ms))
  return {now, redis.call('ZCARD', nodes), tonumber(oldest[2] or now), stale}
end
