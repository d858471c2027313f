-- forkscope_core::replica::store::StoreMachine::cancel, atomically in Redis.
-- notifications/cancelled, on whichever replica it lands: the session's running call with this
-- request id finishes where it is, with no result. Its runner's next write is refused as to a
-- finished stream, so it stops; its deliveries end once they have sent what was written.
-- KEYS[1] meta; ARGV: request id (as JSON text), retention_ms, idle_ms
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
touch(KEYS[1], nil, nil, tonumber(ARGV[3]))
local n = redis.call('HGET', KEYS[1], 'rid:' .. ARGV[1])
if not n then return {0} end
local prefix = string.sub(KEYS[1], 1, -6)
local stream, log = prefix .. ':s:' .. n, prefix .. ':log:' .. n
if redis.call('HGET', stream, 'state') ~= 'live' then return {0} end
redis.call('HSET', stream, 'state', 'finished')
redis.call('HDEL', KEYS[1], 'rid:' .. ARGV[1])
redis.call('PEXPIRE', stream, tonumber(ARGV[2]))
redis.call('PEXPIRE', log, tonumber(ARGV[2]))
return {1, tonumber(n)}
