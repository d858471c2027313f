-- forkscope_core::replica::store::StoreMachine::adopt, atomically in Redis.
-- Takes a tool call over when its lease has expired by this store's clock and is still at the
-- epoch the replica read: bumps the lease epoch, so the old runner's late steps are refused.
-- KEYS[1] meta, KEYS[2] stream, KEYS[3] log; ARGV: expected lease epoch, owner, lease_ms,
-- idle_ms
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
touch(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[4]))
local lease = redis.call('HGET', KEYS[2], 'lease')
if lease ~= ARGV[1] then return {-2, tonumber(lease or 0)} end
if redis.call('HGET', KEYS[2], 'state') ~= 'live' then return {-3} end
local untl = tonumber(redis.call('HGET', KEYS[2], 'luntil'))
if untl > now then return {-4, untl - now} end
local bumped = redis.call('HINCRBY', KEYS[2], 'lease', 1)
redis.call('HSET', KEYS[2], 'lowner', ARGV[2], 'luntil', now + tonumber(ARGV[3]))
return {1, bumped, tonumber(redis.call('HGET', KEYS[2], 'done'))}
