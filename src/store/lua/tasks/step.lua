-- TaskTable::step: the runner under epoch ARGV[4] committed step ARGV[5]; its lease renewed.
local refused = take_step(task, tonumber(ARGV[4]), tonumber(ARGV[5]))
if refused then return refused end
changed(task)
return {1}
