-- take: spend points from one app's budget of one kind in a fixed window.
-- KEYS[1]  the window's hash: s = start (ms, Redis's clock), n = points spent
-- ARGV[1]  limit: points the window allows
-- ARGV[2]  points to spend now
-- ARGV[3]  window length (ms)
-- Returns {TAKE_ALLOWED or TAKE_REFUSED, points left in the window, ms
-- until it ends}.
-- A refusal spends nothing, so a caller over the budget is refused only
-- until the window ends. Constant work: one key, two fields.
-- uses: status, now_ms
local limit, points, window = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
local cur = redis.call('HMGET', KEYS[1], 's', 'n')
local start, spent = tonumber(cur[1]), tonumber(cur[2]) or 0
if not start or now - start >= window or now < start then
  start, spent = now, 0
end
local left = start + window - now
if spent + points > limit then
  return {TAKE_REFUSED, limit - spent, left}
end
spent = spent + points
redis.call('HSET', KEYS[1], 's', start, 'n', spent)
redis.call('PEXPIRE', KEYS[1], left)
return {TAKE_ALLOWED, limit - spent, left}
