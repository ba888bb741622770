-- conns.lua: the app's open sockets, as exactlib.lua reads them.
-- Read-only; O(reaps under way).
-- KEYS[1] conns STRING, KEYS[2..] the reaps and their reaping hashes
-- (exactlib.lua); ARGV none
-- Returns {STATUS_REAPS, reaps} (exactlib.lua), else {open sockets}.
-- uses: exact
local hs, ids = reaping(2)
if not hs then return {STATUS_REAPS, ids} end
local n = live(hs, {'n', redis.call('GET', KEYS[1]) or '0'}, function(f) return f end)
return {tonumber(n[2] or '0')}
