-- The adoption rule (forkscope_core::replica::store::StoreMachine's take_over), for adopt.lua
-- and resume.lua: takes a tool call over when its lease has expired by this store's clock and
-- is still at the epoch the replica read, bumping the lease epoch, so the old runner's late
-- steps are refused. Answers {1, lease, done}, {-4, remaining_ms}, or {-2}: lost (someone else
-- took it, it finished, or its record is gone).
local function take_over(meta, stream, log, expect, owner, lease_ms, idle_ms, now)
  touch(meta, stream, log, idle_ms)
  if redis.call('HGET', stream, 'lease') ~= expect then return {-2} end
  if redis.call('HGET', stream, 'state') ~= 'live' then return {-2} end
  local untl = tonumber(redis.call('HGET', stream, 'luntil'))
  if untl > now then return {-4, untl - now} end
  local bumped = redis.call('HINCRBY', stream, 'lease', 1)
  redis.call('HSET', stream, 'lowner', owner, 'luntil', now + lease_ms)
  return {1, bumped, tonumber(redis.call('HGET', stream, 'done'))}
end
