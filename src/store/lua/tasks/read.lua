-- TaskTable::read: the task, adopted first by ARGV[4] ('' for no adopter: the reader's own
-- runner still runs it) when it works past its lease (its runner stopped renewing): one script
-- per poll of a working task. ARGV[5], ARGV[6]: the steps the reader was told done ('' for
-- nothing told) and '1' if it was told the end; a working task holding less was rolled back
-- under the read (Seen::forgotten_by): it is ended failed, rolled back, in this same script,
-- nothing is adopted, and the reply is -11 and the steps held.
local s, at, rec = state(task)
if s ~= 'live' then return missing(s, at) end
local working = rec.status == 'working'
if ARGV[5] ~= '' and working then
  if tonumber(rec.done) < tonumber(ARGV[5]) or ARGV[6] == '1' then
    redis.call('HSET', task, 'status', 'failed', 'ended', rolled_back(rec.done, ARGV[5]),
      'updated', now)
    changed(task)
    return {-11, rec.done}
  end
end
local adopted = 0
if ARGV[4] ~= '' and working and now >= tonumber(rec.lease) then
  adopt(task, ARGV[4])
  adopted = 1
end
return with_fields(1, adopted, task)
