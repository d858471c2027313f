-- forkscope_core::replica::store::StoreMachine::attach, atomically in Redis.
-- A resume: bumps the stream epoch if it is still the one the replica decided on, and names the
-- new holder. Every later write or delivery at the old epoch is refused.
-- KEYS[1] meta, KEYS[2] stream, KEYS[3] log; ARGV: expected epoch, owner, idle_ms
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local epoch = redis.call('HGET', KEYS[2], 'epoch')
if epoch ~= ARGV[1] then return {-2, tonumber(epoch or 0), redis.call('HGET', KEYS[2], 'owner') or ''} end
local bumped = redis.call('HINCRBY', KEYS[2], 'epoch', 1)
redis.call('HSET', KEYS[2], 'owner', ARGV[2])
touch(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[3]))
return {1, bumped}
