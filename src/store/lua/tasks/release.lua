-- A task leaves the caps' sets: KEYS[1] the held, KEYS[2] the working. ARGV[1] the task's key;
-- ARGV[2] 'ended' (it no longer works: the working set only) or 'unused' (admitted, never made).
redis.call('ZREM', KEYS[2], ARGV[1])
if ARGV[2] == 'unused' then redis.call('ZREM', KEYS[1], ARGV[1]) end
return {1}
