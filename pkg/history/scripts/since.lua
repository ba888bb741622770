-- since.lua: the events of a channel's history after a serial, and
-- whether any that followed it are gone (trimmed, given up to the budget,
-- expired, or lost by Redis), read in one unit.
-- KEYS[1] the channel's stream (history.Key)
-- ARGV[1] the serial ('' : from the oldest held), ARGV[2] entries at most
-- Returns {lost (0 or 1), entries...} as XRANGE gives them.
-- uses: stream_ids
local key, since, limit = KEYS[1], ARGV[1], tonumber(ARGV[2])

if redis.call('EXISTS', key) == 0 then
  return {since ~= '' and 1 or 0}
end
local lost = 0
if since ~= '' then
  local info = redis.call('XINFO', 'STREAM', key)
  for i = 1, #info, 2 do
    if info[i] == 'max-deleted-entry-id' and stream_id_after(info[i + 1], since) then lost = 1 end
  end
end
local entries
if since == '' then
  entries = redis.call('XRANGE', key, '-', '+', 'COUNT', limit)
else
  entries = redis.call('XRANGE', key, '(' .. since, '+', 'COUNT', limit)
end
local out = {lost}
for i = 1, #entries do out[i + 1] = entries[i] end
return out
