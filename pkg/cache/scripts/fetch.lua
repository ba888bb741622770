-- fetch.lua: a new subscriber's read of a cache channel's last event.
--
-- KEYS[1] the channel's entry (cache:<channel>)
-- KEYS[2] the channel's miss marker (cache-miss:<channel>)
-- ARGV[1] how long a reported miss stays reported, in ms; 0: the app has no
--         cache_miss webhook, so report nothing
--
-- Returns {entry, pttl_ms} on a hit; on a miss {FETCH_REPORT} when this
-- miss is the one to report to the webhook, else {FETCH_MISS}. O(1).
-- uses: status
local v = redis.call('GET', KEYS[1])
if v then
  return {v, redis.call('PTTL', KEYS[1])}
end
local window = tonumber(ARGV[1])
if window > 0 and redis.call('SET', KEYS[2], '1', 'NX', 'PX', window) then
  return {FETCH_REPORT}
end
return {FETCH_MISS}
