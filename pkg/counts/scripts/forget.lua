-- forget.lua: delete a node's node-level entries, unless it wrote since the
-- caller read its last-seen (a node that is alive keeps them).
-- KEYS[1] seen, KEYS[2] subscribed, KEYS[3] addr
-- ARGV[1] node id, ARGV[2] the last-seen (ms) the caller read, or -1 to
-- delete whatever it is (a node stopping gracefully)
-- Returns 1 if deleted, 0 if spared.
-- uses: none
if ARGV[2] ~= '-1' then
  local seen = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if seen and tonumber(seen) ~= tonumber(ARGV[2]) then
    return 0
  end
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
