-- reap_slice.lua: subtract some fields of a contribution being reaped (see
-- reap.lua) from the global counts and delete exactly those fields, in one
-- atomic unit. A field is subtracted by the unit that deletes it, so
-- however many cleaners drain the same reap, each field is subtracted
-- once: a field another unit took already is absent here and skipped.
-- KEYS[1] reaps    SET of the reaps under way
-- KEYS[2] reaping  HASH the contribution being reaped
-- KEYS[3..] as lib.lua says: the global counts, the event log and its
--         index if the unit logs, then the other keys the fields touch
-- ARGV[1..4] as lib.lua says: the app's key prefix and what to log
-- ARGV[5] the reaping key's suffix (its entry in KEYS[1])
-- ARGV[6..] the fields to take (the caller read their names by HSCAN; a
--         field listed twice is taken once)
-- Returns {STATUS_UNDECLARED, fields} if present fields touch keys not
-- declared (nothing written), else {fields subtracted, changed channels, member edges (see
-- changes() in lib.lua), fields left in the reaping hash}. The unit that
-- takes the last field also drops the reap from KEYS[1].
-- uses: status, now_ms, eventlog, lib
local reaps, reaping = KEYS[1], KEYS[2]

-- taken: the fields present, which this unit subtracts and deletes, each
-- once however often it is listed; the channels' ('c') go to
-- apply_channels together, the others (members, connections) one by one to
-- apply_field.
local taken, seen, chs, ns, others = {}, {}, {}, {}, {}
local nt, nc, no = 0, 0, 0
if #ARGV >= 6 then
  local vals = redis.call('HMGET', reaping, unpack(ARGV, 6))
  for i = 6, #ARGV do
    local f, v = ARGV[i], vals[i - 5]
    if v and not seen[f] then
      seen[f] = true
      nt = nt + 1
      taken[nt] = f
      if string.byte(f) == 99 then -- 'c'
        nc = nc + 1
        chs[nc], ns[nc] = string.sub(f, 3), -v -- v: a numeric string
      else
        others[no + 1], others[no + 2], no = f, v, no + 2
      end
    end
  end
end
local missing = missing_keys(others)
if #missing > 0 then
  return {STATUS_UNDECLARED, missing}
end
for i = 1, #others, 2 do
  apply_field(others[i], -tonumber(others[i + 1]), nil)
end
apply_channels(chs, ns)
if nt > 0 then
  call_in_chunks('HDEL', reaping, taken)
end
local left = redis.call('HLEN', reaping)
if left == 0 then
  redis.call('SREM', reaps, ARGV[5])
end
local chans, edges = changes()
log_events(edges)
return {nt, chans, edges, left}
