-- stream_ids.lua (luascript.StreamIDs): stream ids ("<ms>-<seq>", the
-- channels' serials) compared as two integers, which may pass 2^53, so as
-- digit strings. A string that is not an id comes before any that is, so
-- a malformed one never hides a real one (history.After says the same in
-- Go).
-- KEYS: none. ARGV: none.
-- uses: none
local function stream_id_after(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if not bm then return am ~= nil end
  if not am then return false end
  if #am ~= #bm then return #am > #bm end
  if am ~= bm then return am > bm end
  if #as ~= #bs then return #as > #bs end
  return as > bs
end
