-- TaskTable::read: the task, adopted first by ARGV[4] when it works past its lease (its runner
-- stopped renewing): one script per poll of a working task.
local s, at = state(task)
if s ~= 'live' then return missing(s, at) end
local adopted = 0
if redis.call('HGET', task, 'status') == 'working'
  and now >= tonumber(redis.call('HGET', task, 'lease')) then
  adopt(task, ARGV[4])
  adopted = 1
end
return with_fields(1, adopted, task)
