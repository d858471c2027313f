-- TaskTable::step: the runner under epoch ARGV[4] committed step ARGV[5]; its lease renewed.
local refused = writable(task, tonumber(ARGV[4]))
if refused then return refused end
local held = tonumber(redis.call('HGET', task, 'done'))
-- Steps are written in order: a store holding fewer than the one before forgot them.
if held + 1 < tonumber(ARGV[5]) then return {-8, held} end
redis.call('HSET', task, 'done', math.max(held, tonumber(ARGV[5])), 'updated', now,
  'lease', now + lease_ms)
changed(task)
return {1}
