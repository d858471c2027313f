-- forkscope_core::replica::store::StoreMachine::append, atomically in Redis.
-- Appends a batch of events to a stream's log, if the writer's epoch is current: the fence,
-- checked where the write lands. Sequence numbers come from the stream's high-water mark here,
-- so no two replicas ever issue the same id.
-- KEYS[1] meta, KEYS[2] stream, KEYS[3] log
-- ARGV: mode ('epoch' | 'lease' | 'none'), writer epoch, writer name, lease_ms, maxlen,
--       finish (0/1), done (progress after the batch, or -1), retention_ms, ttl_ms,
--       background number ('' for none), the batch ('' for none: a renewal), floor (the
--       high-water mark the writer's own last write returned; 0: none), skip ('1': raise the
--       mark to the floor first, rather than refuse), the background events' log level (its
--       rank: forkscope_core::vocabulary::LogLevel::rank)
-- The batch is one log entry, packed by the replica: `COUNT\n`, then `LEN\n` + data for each
-- event; the entry's id is its last event's sequence, so a batch costs one XADD.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local mode = ARGV[1]
-- The same comparison as forkscope_core::replica::admits.
if mode == 'epoch' then
  local epoch = redis.call('HGET', KEYS[2], 'epoch')
  if epoch ~= ARGV[2] then return {-2, tonumber(epoch or 0), redis.call('HGET', KEYS[2], 'owner') or ''} end
elseif mode == 'lease' then
  local lease = redis.call('HGET', KEYS[2], 'lease')
  if lease ~= ARGV[2] then return {-2, tonumber(lease or 0), redis.call('HGET', KEYS[2], 'lowner') or ''} end
end
if redis.call('HGET', KEYS[2], 'state') ~= 'live' then return {-3} end
-- The same comparison as forkscope_core::vocabulary::LogLevel::sends: a background event (a log
-- message) below the level the session's client set is withheld, by its choice.
if ARGV[10] ~= '' then
  local set = redis.call('HGET', KEYS[1], 'log')
  if set and tonumber(set) > tonumber(ARGV[14]) then return {-5} end
end
local hw = tonumber(redis.call('HGET', KEYS[2], 'hw'))
-- The same comparison as forkscope_core::replica::forgot: a mark below what the writer already
-- wrote means the store was restored from an older state; writing on would reuse ids.
local floor = tonumber(ARGV[12])
if hw < floor then
  if ARGV[13] ~= '1' then return {-4, hw} end
  -- Skipped, never issued again; a resume from before them is refused.
  redis.call('HSET', KEYS[2], 'gapfrom', hw + 1, 'gapto', floor)
  hw = floor
end
if ARGV[11] ~= '' then
  hw = hw + tonumber(string.match(ARGV[11], '^(%d+)\n'))
  -- Keeps the newest ARGV[5] events (whole batches: up to one batch more): an entry whose
  -- last event is older than that goes.
  local floor = hw - tonumber(ARGV[5]) + 1
  if floor > 1 then
    redis.call('XADD', KEYS[3], 'MINID', floor .. '-0', hw .. '-1', 'd', ARGV[11])
  else
    redis.call('XADD', KEYS[3], hw .. '-1', 'd', ARGV[11])
  end
end
redis.call('HSET', KEYS[2], 'hw', hw)
if ARGV[10] ~= '' then redis.call('HSET', KEYS[1], 'bg', ARGV[10]) end
if mode == 'lease' then
  redis.call('HSET', KEYS[2], 'luntil', now + tonumber(ARGV[4]))
  if ARGV[7] ~= '-1' then redis.call('HSET', KEYS[2], 'done', ARGV[7]) end
end
touch(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[9]))
if ARGV[6] == '1' then
  -- Finished: kept for its retention from now, and no longer refreshed.
  redis.call('HSET', KEYS[2], 'state', 'finished')
  -- A finished call can no longer be cancelled: its entry in the session's index goes.
  local rid = redis.call('HGET', KEYS[2], 'rid')
  if rid and redis.call('HGET', KEYS[1], 'rid:' .. rid) == string.match(KEYS[2], ':s:(%d+)$') then
    redis.call('HDEL', KEYS[1], 'rid:' .. rid)
  end
  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[8]))
  redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[8]))
end
return {1, hw}
