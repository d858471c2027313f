-- TaskTable::renew: the runner under epoch ARGV[4] lives, its writes having left ARGV[5] steps.
local refused, rec = writable(task, tonumber(ARGV[4]))
if refused then return refused end
local held = tonumber(rec.done)
if held < tonumber(ARGV[5]) then return {-8, held} end
redis.call('HSET', task, 'lease', now + lease_ms)
return {1}
