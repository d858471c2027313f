-- TaskTable::read: the task, adopted first by ARGV[4] when it works past its lease (its runner
-- stopped renewing): one script per poll of a working task. ARGV[5], ARGV[6]: the steps the
-- reader was told done ('' for nothing told) and '1' if it was told the end; a working task
-- holding less was rolled back under the read (Seen::forgotten_by): -11 and the steps held,
-- and nothing adopted.
local s, at = state(task)
if s ~= 'live' then return missing(s, at) end
if ARGV[5] ~= '' then
  local done = tonumber(redis.call('HGET', task, 'done'))
  local working = redis.call('HGET', task, 'status') == 'working'
  if working and (done < tonumber(ARGV[5]) or ARGV[6] == '1') then return {-11, done} end
end
local adopted = 0
if redis.call('HGET', task, 'status') == 'working'
  and now >= tonumber(redis.call('HGET', task, 'lease')) then
  adopt(task, ARGV[4])
  adopted = 1
end
return with_fields(1, adopted, task)
