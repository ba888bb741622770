-- scan.lua: one step of a walk over an app's occupied channels (ZSCAN,
-- bounded by its COUNT), or, with cursor '', every one of them at once,
-- with their counts as exactlib.lua reads them. Read-only.
-- KEYS[1] global ZSET channel -> count, KEYS[2..] the reaps and their
-- reaping hashes (exactlib.lua)
-- ARGV[1] cursor ('' for one read of all), ARGV[2] MATCH glob ('' for
-- all), ARGV[3] COUNT
-- Returns {STATUS_REAPS, reaps} (exactlib.lua), else {next cursor ('0':
-- done), {channel, count, ...}}, vacant channels left out.
-- uses: exact
local hs, ids = reaping(2)
if not hs then return {STATUS_REAPS, ids} end
local next, kv = '0', nil
if ARGV[1] == '' then
  kv = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
else
  local r
  if ARGV[2] ~= '' then
    r = redis.call('ZSCAN', KEYS[1], ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])
  else
    r = redis.call('ZSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[3])
  end
  next, kv = r[1], r[2]
end
return {next, live(hs, kv, channel_field)}
