-- TaskTable::finish: the runner under epoch ARGV[4] commits its last step, ARGV[5], and its
-- result, ARGV[6] (JSON), as one write: the step, then the end by the same compare-and-set as
-- settle.lua (the step just landed, so it wins). Refused as the step is, nothing written.
local refused = take_step(task, tonumber(ARGV[4]), tonumber(ARGV[5]),
  'status', 'completed', 'outcome', ARGV[6], 'ended', '')
if refused then return refused end
changed(task)
return {1}
