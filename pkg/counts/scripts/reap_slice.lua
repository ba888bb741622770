-- reap_slice.lua: subtract some fields of a contribution being reaped (see
-- reap.lua) from the global counts and delete exactly those fields, in one
-- atomic unit. A field is subtracted by the unit that deletes it, so
-- however many cleaners drain the same reap, each field is subtracted
-- once: a field another unit took already is absent here and skipped.
-- KEYS[1] reaps    SET of the reaps under way
-- KEYS[2] reaping  HASH the contribution being reaped
-- KEYS[3] global, KEYS[4] and KEYS[5] the event log and its index if ARGV[3]
--         says to log, then the other keys the fields touch (as in apply.lua)
-- ARGV[1] the reaping key's suffix (its entry in KEYS[1])
-- ARGV[2] key prefix of the app ("<prefix>:{app}:")
-- ARGV[3], ARGV[4], ARGV[5] what to log, and the channels whose edges and
--         counts are not logged (as ARGV[4..6] of apply.lua)
-- ARGV[6..] the fields to take (the caller read their names by HSCAN)
-- Returns {-3, fields} if present fields touch keys not declared (nothing
-- written), else {fields subtracted, changed channels, member edges (see
-- changes() in lib.lua), fields left in the reaping hash}. The unit that
-- takes the last field also drops the reap from KEYS[1].
local reaps, reaping = KEYS[1], KEYS[2]
P = ARGV[2]
open_log(ARGV[3], ARGV[4], ARGV[5])

local list = {}
if #ARGV >= 6 then
  local fields = {}
  for i = 6, #ARGV do table.insert(fields, ARGV[i]) end
  local vals = redis.call('HMGET', reaping, unpack(fields))
  for i, f in ipairs(fields) do
    if vals[i] then
      table.insert(list, f)
      table.insert(list, vals[i])
    end
  end
end
local missing = missing_keys(list)
if #missing > 0 then
  return {-3, missing}
end
for i = 1, #list, 2 do
  apply_field(list[i], -tonumber(list[i + 1]), nil)
  redis.call('HDEL', reaping, list[i])
end
local left = redis.call('HLEN', reaping)
if left == 0 then
  redis.call('SREM', reaps, ARGV[1])
end
local chans, edges = changes()
log_events(edges)
return {#list / 2, chans, edges, left}
