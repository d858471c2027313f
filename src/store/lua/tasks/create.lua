-- TaskTable::create. KEYS[1] the new task, KEYS[2] its idempotency key's entry (a hash: the
-- arguments it was made with, and its task), KEYS[3] the task the caller read that entry to
-- name (KEYS[1] again when none): all under one tag, so a task found by its key is a declared
-- key too. ARGV[4..]: steps, ttl, runner, key ('' for none), arguments, id, delay, the id found
-- ('' for none), and what the caps said (`admit.lua`): '1' admitted, '0' refused, 'p' while
-- their answer comes beside this script's (`store/redis/tasks/create.rs`): an unkeyed task is
-- made then, known to no one until the caller answers, which withdraws it should the caps
-- refuse it (`withdraw.lua`); a keyed one, which its key names at once, waits for the answer.
-- The entry is given the task's own deadline for deletion, so the two go together without a
-- script touching both.
local steps, ttl, runner, key, args = ARGV[4], tonumber(ARGV[5]), ARGV[6], ARGV[7], ARGV[8]
local id, delay, found = ARGV[9], ARGV[10], ARGV[11]
local admitted = ARGV[12] == '1' or (ARGV[12] == 'p' and key == '')
if key ~= '' then
  local entry = redis.call('HMGET', KEYS[2], 'args', 'task')
  if entry[2] then
    -- The caller named another task (or none): it reads the entry again and names this one.
    if entry[2] ~= found then return {-10, entry[2]} end
    if state(KEYS[3]) == 'live' then
      if entry[1] ~= args then return {-1, entry[2]} end
      return with_fields(0, entry[2], KEYS[3])
    end
    -- Its task is gone: the entry is replaced below.
  end
end
if not admitted then return {-9} end
redis.call('HSET', task, 'status', 'working', 'created', now, 'updated', now, 'ttl', ttl,
  'steps', steps, 'done', 0, 'runner', runner, 'epoch', 1, 'lease', now + lease_ms,
  'outcome', '', 'ended', '', 'delay', delay)
-- A hard bound, should nothing touch it again: deleted, then its tombstone's time.
redis.call('PEXPIRE', task, ttl + retain_ms + tomb_ms)
if key ~= '' then
  redis.call('HSET', KEYS[2], 'args', args, 'task', id)
  redis.call('PEXPIRE', KEYS[2], ttl + retain_ms)
end
changed(task)
return with_fields(1, id, task)
