-- forkscope_core::replica::store::StoreMachine::adopt, atomically in Redis: a delivery that
-- finds its call's runner gone takes the call over (take_over.lua).
-- KEYS[1] meta, KEYS[2] stream, KEYS[3] log; ARGV: expected lease epoch, owner, lease_ms,
-- idle_ms
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
return take_over(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], tonumber(ARGV[3]),
  tonumber(ARGV[4]), now)
