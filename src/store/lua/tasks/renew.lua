-- TaskTable::renew: the runner under epoch ARGV[4] lives, its writes having left ARGV[5] steps.
local refused = writable(task, tonumber(ARGV[4]))
if refused then return refused end
local held = tonumber(redis.call('HGET', task, 'done'))
if held < tonumber(ARGV[5]) then return {-8, held} end
redis.call('HSET', task, 'lease', now + lease_ms)
return {1}
