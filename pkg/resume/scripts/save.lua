-- save.lua: record the serials a page acknowledged, never moving a
-- channel's serial backwards.
-- KEYS[1] the (app, id) hash (resume.keys.state)
-- ARGV[1] the hash's TTL in ms, then channel, serial pairs
-- Returns the number of channels moved forward.
-- uses: none
local key, ttl = KEYS[1], tonumber(ARGV[1])

-- later reports whether stream id a is after b (ids are two integers that
-- may pass 2^53, so they are compared as digit strings).
local function later(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if not bm then return true end
  if not am then return false end
  if #am ~= #bm then return #am > #bm end
  if am ~= bm then return am > bm end
  if #as ~= #bs then return #as > #bs end
  return as > bs
end

local moved = 0
for i = 2, #ARGV - 1, 2 do
  local cur = redis.call('HGET', key, ARGV[i])
  if not cur or later(ARGV[i + 1], cur) then
    redis.call('HSET', key, ARGV[i], ARGV[i + 1])
    moved = moved + 1
  end
end
if redis.call('EXISTS', key) == 1 then
  redis.call('PEXPIRE', key, ttl)
end
return moved
