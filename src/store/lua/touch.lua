-- The one idle-expiry rule, prepended to every script that touches a session (StoreMachine, in the
-- core, keeps the same rule): a request refreshes the session's record and the records of the stream
-- it reads, each for the idle time; a finished stream keeps the retention it was given when it
-- finished. A key that is gone stays gone (PEXPIRE does not create).
local function touch(meta, stream, log, idle_ms)
  redis.call('PEXPIRE', meta, idle_ms)
  if stream and redis.call('HGET', stream, 'state') ~= 'finished' then
    redis.call('PEXPIRE', stream, idle_ms)
    redis.call('PEXPIRE', log, idle_ms)
  end
end
