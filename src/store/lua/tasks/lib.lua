-- What every task script shares, put before each (`store/redis/tasks.rs`): the task table's
-- rules of `forkscope_core::tasks::TaskTable`, at Redis's clock. Each script touches one task,
-- KEYS[1], and what lives under its hash tag `{t:HOME}` (its idempotency key's entry), so a
-- script runs on one slot. ARGV[1..3]: lease_ms, retain_ms, tombstone_ms; the operation's own
-- follow. A reply starts with a code: 1 done, 0 nothing to do, 2 lost to an earlier end (its
-- status follows), -1 key reused (the task follows), -3 unknown, -4 expired (when), -5 already
-- terminal (its status), -6 stale epoch (the held one), -8 rolled back (the steps held, fewer
-- than the runner wrote), -9 needs admission, -10 the key names another task (which), -11 the
-- reader was told more than the store holds (the steps held).
local lease_ms = tonumber(ARGV[1])
local retain_ms = tonumber(ARGV[2])
local tomb_ms = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

local FIELDS = {'status', 'created', 'updated', 'ttl', 'steps', 'done', 'runner', 'epoch',
  'lease', 'outcome', 'ended', 'delay'}

-- Every write that changes a task tells the replicas' listens on this channel (TASK_CHANGES in
-- store/changes.rs): a listen anywhere wakes at once, with no tick.
local function changed(task)
  redis.call('PUBLISH', 'fs:tasks:changed', task)
end

local STATUSES = {working = true, completed = true, failed = true, cancelled = true}
local NUMBERS = {'created', 'updated', 'ttl', 'steps', 'done', 'runner', 'epoch', 'lease'}
-- What an operation reads of its task before it acts: in one HMGET (a call from Lua costs more
-- than the field it reads). The outcome is read only by a reply that carries it (with_fields).
local READ = {'gone', 'status', 'created', 'updated', 'ttl', 'steps', 'done', 'runner', 'epoch',
  'lease'}

-- A record no script writes stops every operation on it, named by its key: a write would
-- build on it, and a read would report it as a task it is not.
local function check(task, rec)
  if not STATUSES[rec.status] then
    error({err = 'corrupt task record ' .. task .. ': status'})
  end
  for _, field in ipairs(NUMBERS) do
    if not tonumber(rec[field]) then
      error({err = 'corrupt task record ' .. task .. ': ' .. field})
    end
  end
end

-- The TTL, through the same path as any end, applied to `task` before an operation reads it:
-- past its TTL an unfinished task is failed; past its TTL and retain_ms it is deleted, leaving
-- a tombstone for tomb_ms. Its key's entry expires by itself at the same time (`create.lua`
-- gives it the same deadline; a create that finds an entry whose task is gone replaces it), and
-- the sets the caps count drop it by their scores: no script touches a key it was not given.
-- Returns 'live' and the record as it now stands (READ's fields by name), 'none', or 'gone'
-- and when.
local function state(task)
  local values = redis.call('HMGET', task, unpack(READ))
  local rec = {}
  for i, field in ipairs(READ) do rec[field] = values[i] end
  if rec.gone then return 'gone', tonumber(rec.gone) end
  -- No field a task has: no task, or a record no script wrote (check names it).
  if not rec.status and redis.call('EXISTS', task) == 0 then return 'none' end
  check(task, rec)
  local expires = tonumber(rec.created) + tonumber(rec.ttl)
  if now >= expires + retain_ms then
    redis.call('DEL', task)
    redis.call('HSET', task, 'gone', now)
    redis.call('PEXPIRE', task, tomb_ms)
    changed(task)
    return 'gone', now
  end
  if now >= expires and rec.status == 'working' then
    redis.call('HSET', task, 'status', 'failed', 'ended', 'ttl', 'updated', now)
    rec.status = 'failed'
    changed(task)
  end
  return 'live', nil, rec
end

-- The reply `code`, then `extra`, then the task's fields (FIELDS, in order).
local function with_fields(code, extra, task)
  local reply = {code}
  if extra ~= nil then table.insert(reply, extra) end
  for _, v in ipairs(redis.call('HMGET', task, unpack(FIELDS))) do table.insert(reply, v) end
  return reply
end

local function missing(s, at)
  if s == 'gone' then return {-4, at} end
  return {-3}
end

-- What a runner's write checks: the task lives, is not terminal, and is held at `epoch`. The
-- refusal, or nil and the record.
local function writable(task, epoch)
  local s, at, rec = state(task)
  if s ~= 'live' then return missing(s, at) end
  if rec.status ~= 'working' then return {-5, rec.status} end
  local held = tonumber(rec.epoch)
  if epoch and epoch ~= held then return {-6, held} end
  return nil, rec
end

-- The store was found rolled back under the task: it holds `holds` steps of the `applied` its
-- runner wrote or its reader was told (both as stored, strings). Failed, typed, so none runs
-- again: EndedBy::RolledBack, spelled 'rolled_back:HOLDS:APPLIED' in the `ended` field.
local function rolled_back(holds, applied)
  return 'rolled_back:' .. holds .. ':' .. applied
end

-- TaskTable::step: the runner under `epoch` committed step `done`, its lease renewed, and
-- `...` (field, value pairs) written with it; the refusal, or nil once written (no PUBLISH: the
-- caller tells). Steps are written in order: a store holding fewer than the one before forgot
-- them.
local function take_step(task, epoch, done, ...)
  local refused, rec = writable(task, epoch)
  if refused then return refused end
  local held = tonumber(rec.done)
  if held + 1 < done then return {-8, held} end
  redis.call('HSET', task, 'done', math.max(held, done), 'updated', now, 'lease', now + lease_ms,
    ...)
  return nil
end

-- A runner took the task under the next epoch: TaskTable::adopt.
local function adopt(task, runner)
  redis.call('HINCRBY', task, 'epoch', 1)
  redis.call('HSET', task, 'runner', runner, 'lease', now + lease_ms, 'updated', now)
  changed(task)
end

local task = KEYS[1]
