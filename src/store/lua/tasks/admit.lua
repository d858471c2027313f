-- The caps of TaskTable::create, on their own slot (`{tasks}`): KEYS[1] the tasks held,
-- scored by when each is deleted (the bound on memory), KEYS[2] the working ones, scored by
-- when their TTL fails them (the cap). ARGV: the task's key, ttl, retain_ms, max_tasks,
-- max_held. Admits the task into both, or refuses: -2 full (working), -7 full (held). An entry
-- leaves by its score; a task that ends early leaves the working set by `release.lua`.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local member, ttl, retain_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local max_tasks, max_held = tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[2]) >= max_tasks then return {-2} end
if redis.call('ZCARD', KEYS[1]) >= math.max(max_held, max_tasks) then return {-7} end
redis.call('ZADD', KEYS[1], now + ttl + retain_ms, member)
redis.call('ZADD', KEYS[2], now + ttl, member)
return {1}
