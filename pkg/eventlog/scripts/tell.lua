-- tell.lua: log the events_dropped notice of the refusals not told yet, if
-- there are any and it fits (see log_tell in lib.lua).
-- KEYS[1] the event log, KEYS[2] its index
-- ARGV[1] the log's entry cap (eventlog.MaxEntries), ARGV[2] its byte budget
-- Returns 1 if it logged the notice, else 0.
local h = log_open(KEYS[1], ARGV[1], ARGV[2])
if log_tell(h, string.format('%d', now_ms())) then
  return 1
end
return 0
