-- TaskTable::settle: terminal once, by compare-and-set from working. ARGV[4] the runner's
-- epoch ('' for none), ARGV[5] the status, ARGV[6] the outcome (JSON, or ''), ARGV[7] the steps
-- the runner wrote (a store holding fewer was rolled back under it). ARGV[8]: '' for a settle;
-- for TaskTable::seal_rolled_back, the steps the runner applied (the end says both counts).
local s, at, rec = state(task)
if s ~= 'live' then return missing(s, at) end
if rec.status ~= 'working' then return {2, rec.status} end
if ARGV[4] ~= '' then
  local held = tonumber(rec.epoch)
  if tonumber(ARGV[4]) ~= held then return {-6, held} end
  local done = tonumber(rec.done)
  if done < tonumber(ARGV[7]) then return {-8, done} end
end
local ended = ''
if ARGV[8] ~= '' then ended = rolled_back(rec.done, ARGV[8]) end
redis.call('HSET', task, 'status', ARGV[5], 'outcome', ARGV[6], 'updated', now, 'ended', ended)
changed(task)
return {1}
