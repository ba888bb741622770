-- now_ms.lua (luascript.NowMs): the shard's clock in unix milliseconds.
-- Every script that reads Redis's TIME as ms calls this, so all of them
-- round alike (down to the millisecond).
-- KEYS: none. ARGV: none.
-- uses: none
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
