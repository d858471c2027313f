-- TaskTable::cancel: the same compare-and-set as settle; the reply says which end won.
local s, at, rec = state(task)
if s ~= 'live' then return missing(s, at) end
if rec.status ~= 'working' then return {2, rec.status} end
redis.call('HSET', task, 'status', 'cancelled', 'ended', 'cancel', 'updated', now)
changed(task)
return {1}
