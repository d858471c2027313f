-- forkscope_core::replica::store::StoreMachine::set_log_level, atomically in Redis: the level a
-- session's client set with logging/setLevel, as its rank, in the session's record, where
-- append.lua reads it.
-- KEYS[1] meta; ARGV: the level's rank, idle_ms
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('HSET', KEYS[1], 'log', ARGV[1])
touch(KEYS[1], nil, nil, tonumber(ARGV[2]))
return 1
