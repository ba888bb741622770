-- append.lua: append events to an app's event log (see lib.lua), in
-- order, refusing each that would take the log over its byte budget.
-- Every appender of every node runs this (or the count scripts, which
-- share lib.lua) on the log's shard, so the budget holds across nodes
-- without any lock.
-- KEYS[1] the event log, KEYS[2] its index
-- ARGV[1] the log's entry cap (eventlog.MaxEntries)
-- ARGV[2] byte budget; 0 for none
-- then the events as JSON
-- Returns {events refused, bytes the log holds after}.
-- uses: now_ms, eventlog
local h = log_open(KEYS[1], ARGV[1], ARGV[2])
local t = string.format('%d', now_ms())
local refused = 0
for i = 3, #ARGV do
  if not log_add(h, t, ARGV[i]) then
    refused = refused + 1
  end
end
return {refused, h.bytes}
