-- sweep.lua: forget index slots (see lib.lua) whose marker is no longer in
-- the log: trimmed before any deliverer claimed it (no webhook's filter
-- let it through, or the entry cap cut it). Run a slice at a time with
-- the cursor it returns, so the index never outgrows the log for long.
-- KEYS[1] the event log, KEYS[2] its index
-- ARGV[1] the HSCAN cursor (0 to start), ARGV[2] fields to look at
-- Returns {next cursor ('0': done), slots forgotten}.
-- uses: eventlog
local h = {key = KEYS[1], index = KEYS[2]}
local res = redis.call('HSCAN', h.index, ARGV[1], 'COUNT', tonumber(ARGV[2]))
local kv, gone = res[2], 0
for i = 1, #kv, 2 do
  if string.find(kv[i], '\n', 1, true) and not log_live(h, kv[i + 1]) then
    redis.call('HDEL', h.index, kv[i])
    gone = gone + 1
  end
end
return {res[1], gone}
