-- sources.lua (prelude sources) is prepended to audit.lua and repair.lua.
-- KEYS, ARGV: none of its own; P is the app's key prefix
-- ("<prefix>:{app}:"), the caller's ARGV.
-- contribution_keys returns {label, key} for every contribution the global
-- counts include: each registered node's (label: its id) and each reap's
-- under way (label: 'reaping:<reap id>'), or nil if one of those keys (or
-- the set of reaps) was not declared: the caller retries declaring them.
-- uses: none
local function contribution_keys(P, ids, declared)
  local out = {}
  for _, id in ipairs(ids) do
    table.insert(out, {id, P .. 'node:' .. id})
  end
  if not declared[P .. 'reaps'] then
    return nil
  end
  for _, r in ipairs(redis.call('SMEMBERS', P .. 'reaps')) do
    table.insert(out, {'reaping:' .. r, P .. 'reaping:' .. r})
  end
  for _, src in ipairs(out) do
    if not declared[src[2]] then
      return nil
    end
  end
  return out
end
