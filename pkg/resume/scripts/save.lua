-- save.lua: record the serials a page acknowledged, never moving a
-- channel's serial backwards.
-- KEYS[1] the (app, id) hash (resume.keys.state)
-- ARGV[1] the hash's TTL in ms, then channel, serial pairs
-- Returns the number of channels moved forward.
-- uses: stream_ids
local key, ttl = KEYS[1], tonumber(ARGV[1])

local moved = 0
for i = 2, #ARGV - 1, 2 do
  local cur = redis.call('HGET', key, ARGV[i])
  if not cur or stream_id_after(ARGV[i + 1], cur) then
    redis.call('HSET', key, ARGV[i], ARGV[i + 1])
    moved = moved + 1
  end
end
if redis.call('EXISTS', key) == 1 then
  redis.call('PEXPIRE', key, ttl)
end
return moved
