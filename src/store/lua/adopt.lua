-- Takes a tool call over when its lease has expired by this store's clock and is still at the
-- epoch the replica read: bumps the lease epoch, so the old runner's late steps are refused.
-- KEYS[1] stream; ARGV: expected lease epoch, owner, lease_ms
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local lease = redis.call('HGET', KEYS[1], 'lease')
if lease ~= ARGV[1] then return {-2, tonumber(lease or 0)} end
if redis.call('HGET', KEYS[1], 'state') ~= 'live' then return {-3} end
local untl = tonumber(redis.call('HGET', KEYS[1], 'luntil'))
if untl > now then return {-4, untl - now} end
local bumped = redis.call('HINCRBY', KEYS[1], 'lease', 1)
redis.call('HSET', KEYS[1], 'lowner', ARGV[2], 'luntil', now + tonumber(ARGV[3]))
return {1, bumped, tonumber(redis.call('HGET', KEYS[1], 'done'))}
