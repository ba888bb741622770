-- watchnodes.lua: every node of seen with its last-seen, whether it
-- recorded a confirmed subscription, and its admin address ('' for none),
-- for the cleaner's watch. Addresses of nodes no longer in seen (dropped
-- past the window, or forgotten) are deleted on the way, so no address
-- outlives its node. O(nodes), whatever the number of apps.
-- KEYS[1] seen, KEYS[2] subscribed, KEYS[3] addr
-- ARGV[1] at most this many nodes
-- Returns {node, last-seen ms, 1 if subscribed else 0, address, ...}
-- uses: none
local found = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
local out = {}
for i = 1, #found, 2 do
  out[#out + 1] = found[i]
  out[#out + 1] = found[i + 1]
  out[#out + 1] = redis.call('ZSCORE', KEYS[2], found[i]) and 1 or 0
  out[#out + 1] = redis.call('HGET', KEYS[3], found[i]) or ''
end
local addrs = redis.call('HKEYS', KEYS[3])
for _, node in ipairs(addrs) do
  if not redis.call('ZSCORE', KEYS[1], node) then
    redis.call('HDEL', KEYS[3], node)
  end
end
return out
