-- TaskTable::get: the task as stored.
local s, at = state(task)
if s ~= 'live' then return missing(s, at) end
return with_fields(1, nil, task)
