-- append.lua: append events to an app's event log (see lib.lua), in
-- order, refusing each bounded one that would take the log over its byte
-- budget. Every appender of every node runs this (or the count scripts,
-- which share lib.lua) on the log's shard, so the budget holds across
-- nodes without any lock.
-- KEYS[1] the event log
-- ARGV[1] the log's entry cap (eventlog.MaxEntries)
-- ARGV[2] byte budget of bounded events; 0 for none
-- then, per event: "1" if bounded else "0", the event as JSON
-- Returns {bounded events refused, bytes the log holds after}.
local h = log_open(KEYS[1], ARGV[1])
local budget = tonumber(ARGV[2])
local t = string.format('%d', now_ms())
local refused = 0
for i = 3, #ARGV, 2 do
  local ev = ARGV[i + 1]
  if ARGV[i] == '1' and budget > 0 and h.bytes + #t + #ev > budget then
    refused = refused + 1
  else
    log_add(h, t, ev)
  end
end
return {refused, h.bytes}
