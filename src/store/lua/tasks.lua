-- forkscope_core::tasks::TaskTable, atomically in Redis: one script, the operation in ARGV[1],
-- each doing what the table's method of the same name does.
-- KEYS[1] the task (a hash), KEYS[2] its idempotency key's entry (a hash; create only),
-- KEYS[3] the tasks held (a sorted set scored by when each is deleted), for the bound on memory;
-- KEYS[4] the working tasks (scored by when their TTL fails them), for the cap.
-- ARGV[2..6]: lease_ms, retain_ms, tombstone_ms, max_tasks, max_held (the core's constants);
-- then the operation's own. A reply starts with a code: 1 done, 0 nothing to do, 2 lost to an
-- earlier end (its status follows), -1 key reused (the task follows), -2 full (working), -7 full
-- (held), -3 unknown, -4 expired (when), -5 already terminal (its status), -6 stale epoch (the
-- held one), -8 rolled back (the steps held, fewer than the runner wrote).
-- The key entry and a found task are read by name: fine on one Redis (see ARCHITECTURE.md).
local op = ARGV[1]
local lease_ms = tonumber(ARGV[2])
local retain_ms = tonumber(ARGV[3])
local tomb_ms = tonumber(ARGV[4])
local max_tasks = tonumber(ARGV[5])
local max_held = tonumber(ARGV[6])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

local FIELDS = {'status', 'created', 'updated', 'ttl', 'steps', 'done', 'runner', 'epoch',
  'lease', 'outcome', 'ended', 'delay'}

-- The TTL, through the same path as any end, applied to `task` before an operation reads it:
-- past its TTL an unfinished task is failed; past its TTL and retain_ms it is deleted, leaving
-- a tombstone for tomb_ms, and its key goes with it. Returns 'live', 'none', or 'gone' and when.
-- Every write that changes a task tells the replicas' listens on this channel (TASK_CHANGES in
-- store/changes.rs): a listen anywhere wakes at once, with no tick.
local function changed(task)
  redis.call('PUBLISH', 'fs:tasks:changed', task)
end

local STATUSES = {working = true, completed = true, failed = true, cancelled = true}
local NUMBERS = {'created', 'updated', 'ttl', 'steps', 'done', 'runner', 'epoch', 'lease'}

-- A record no script writes stops every operation on it, named by its key: a write would
-- build on it, and a read would report it as a task it is not.
local function check(task)
  if not STATUSES[redis.call('HGET', task, 'status')] then
    error({err = 'corrupt task record ' .. task .. ': status'})
  end
  for _, field in ipairs(NUMBERS) do
    if not tonumber(redis.call('HGET', task, field)) then
      error({err = 'corrupt task record ' .. task .. ': ' .. field})
    end
  end
end

local function state(task)
  if redis.call('EXISTS', task) == 0 then return 'none' end
  local gone = redis.call('HGET', task, 'gone')
  if gone then return 'gone', tonumber(gone) end
  check(task)
  local expires = tonumber(redis.call('HGET', task, 'created')) + tonumber(redis.call('HGET', task, 'ttl'))
  if now >= expires + retain_ms then
    local key = redis.call('HGET', task, 'key')
    if key and key ~= '' then redis.call('DEL', key) end
    redis.call('DEL', task)
    redis.call('HSET', task, 'gone', now)
    redis.call('PEXPIRE', task, tomb_ms)
    redis.call('ZREM', KEYS[3], task)
    redis.call('ZREM', KEYS[4], task)
    return 'gone', now
  end
  if now >= expires and redis.call('HGET', task, 'status') == 'working' then
    redis.call('HSET', task, 'status', 'failed', 'ended', 'ttl', 'updated', now)
    redis.call('ZREM', KEYS[4], task)
    changed(task)
  end
  return 'live'
end

local function fields(task)
  return redis.call('HMGET', task, unpack(FIELDS))
end

local function missing(s, at)
  if s == 'gone' then return {-4, at} end
  return {-3}
end

-- What a runner's write checks: the task lives, is not terminal, and is held at `epoch`.
local function writable(task, epoch)
  local s, at = state(task)
  if s ~= 'live' then return missing(s, at) end
  local status = redis.call('HGET', task, 'status')
  if status ~= 'working' then return {-5, status} end
  local held = tonumber(redis.call('HGET', task, 'epoch'))
  if epoch and epoch ~= held then return {-6, held} end
  return nil
end

local task = KEYS[1]
if op == 'create' then
  local steps, ttl, runner, key, args = ARGV[7], tonumber(ARGV[8]), ARGV[9], ARGV[10], ARGV[11]
  if key ~= '' then
    local entry = redis.call('HMGET', KEYS[2], 'args', 'task')
    if entry[2] then
      local found = 'fs:task:{' .. entry[2] .. '}'
      if entry[1] ~= args then return {-1, entry[2]} end
      local s = state(found)
      if s == 'live' then
        local reply = {0, entry[2]}
        for _, v in ipairs(fields(found)) do table.insert(reply, v) end
        return reply
      end
      -- Its task is gone: the key goes with it (the entry is deleted by state()).
    end
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  if redis.call('ZCARD', KEYS[4]) >= max_tasks then return {-2} end
  if redis.call('ZCARD', KEYS[3]) >= math.max(max_held, max_tasks) then return {-7} end
  local id = ARGV[12]
  redis.call('HSET', task, 'status', 'working', 'created', now, 'updated', now, 'ttl', ttl,
    'steps', steps, 'done', 0, 'runner', runner, 'epoch', 1, 'lease', now + lease_ms,
    'outcome', '', 'ended', '', 'key', (key ~= '' and KEYS[2]) or '', 'delay', ARGV[13])
  -- A hard bound, should nothing touch it again: deleted, then its tombstone's time.
  redis.call('PEXPIRE', task, ttl + retain_ms + tomb_ms)
  redis.call('ZADD', KEYS[3], now + ttl + retain_ms, task)
  redis.call('ZADD', KEYS[4], now + ttl, task)
  if key ~= '' then
    redis.call('HSET', KEYS[2], 'args', args, 'task', id)
    redis.call('PEXPIRE', KEYS[2], ttl + retain_ms)
  end
  changed(task)
  local reply = {1, id}
  for _, v in ipairs(fields(task)) do table.insert(reply, v) end
  return reply
elseif op == 'get' then
  local s, at = state(task)
  if s ~= 'live' then return missing(s, at) end
  local reply = {1}
  for _, v in ipairs(fields(task)) do table.insert(reply, v) end
  return reply
elseif op == 'step' then
  local refused = writable(task, tonumber(ARGV[7]))
  if refused then return refused end
  local held = tonumber(redis.call('HGET', task, 'done'))
  -- Steps are written in order: a store holding fewer than the one before forgot them.
  if held + 1 < tonumber(ARGV[8]) then return {-8, held} end
  local done = math.max(held, tonumber(ARGV[8]))
  redis.call('HSET', task, 'done', done, 'updated', now, 'lease', now + lease_ms)
  changed(task)
  return {1}
elseif op == 'renew' then
  local refused = writable(task, tonumber(ARGV[7]))
  if refused then return refused end
  local held = tonumber(redis.call('HGET', task, 'done'))
  if held < tonumber(ARGV[8]) then return {-8, held} end
  redis.call('HSET', task, 'lease', now + lease_ms)
  return {1}
elseif op == 'settle' or op == 'cancel' then
  local s, at = state(task)
  if s ~= 'live' then return missing(s, at) end
  local status = redis.call('HGET', task, 'status')
  if status ~= 'working' then return {2, status} end
  if op == 'settle' and ARGV[7] ~= '' then
    local held = tonumber(redis.call('HGET', task, 'epoch'))
    if tonumber(ARGV[7]) ~= held then return {-6, held} end
  end
  redis.call('ZREM', KEYS[4], task)
  if op == 'cancel' then
    redis.call('HSET', task, 'status', 'cancelled', 'ended', 'cancel', 'updated', now)
  else
    redis.call('HSET', task, 'status', ARGV[8], 'outcome', ARGV[9], 'updated', now)
  end
  changed(task)
  return {1}
elseif op == 'read' then
  -- get, and adopt first when it works past its lease: one script per poll of a working task.
  local s, at = state(task)
  if s ~= 'live' then return missing(s, at) end
  local adopted = 0
  if redis.call('HGET', task, 'status') == 'working'
    and now >= tonumber(redis.call('HGET', task, 'lease')) then
    redis.call('HINCRBY', task, 'epoch', 1)
    redis.call('HSET', task, 'runner', ARGV[7], 'lease', now + lease_ms, 'updated', now)
    changed(task)
    adopted = 1
  end
  local reply = {1, adopted}
  for _, v in ipairs(fields(task)) do table.insert(reply, v) end
  return reply
elseif op == 'adopt' then
  local s = state(task)
  if s ~= 'live' then return {0} end
  if redis.call('HGET', task, 'status') ~= 'working' then return {0} end
  if now < tonumber(redis.call('HGET', task, 'lease')) then return {0} end
  redis.call('HINCRBY', task, 'epoch', 1)
  redis.call('HSET', task, 'runner', ARGV[7], 'lease', now + lease_ms, 'updated', now)
  changed(task)
  local reply = {1}
  for _, v in ipairs(fields(task)) do table.insert(reply, v) end
  return reply
elseif op == 'now' then
  return {now}
end
return redis.error_reply('unknown task operation ' .. op)
