-- forkscope_core::replica::store::StoreMachine::open_stream (its first half: the number), atomically in Redis.
-- Allocates the next stream number of a session, or -1 when the session is gone (never
-- recreates it: a store that restarted empty answers 404, as the transport prescribes).
-- KEYS[1] meta; ARGV[1] idle_ms
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
touch(KEYS[1], nil, nil, tonumber(ARGV[1]))
return redis.call('HINCRBY', KEYS[1], 'streams', 1)
