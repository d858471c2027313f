-- TaskTable::adopt: the task under the next epoch, ARGV[4]'s, when it works past its lease.
local s, _, rec = state(task)
if s ~= 'live' then return {0} end
if rec.status ~= 'working' then return {0} end
if now < tonumber(rec.lease) then return {0} end
adopt(task, ARGV[4])
return with_fields(1, nil, task)
