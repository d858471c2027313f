-- forkscope_core::replica::store::StoreMachine::open_stream, atomically in Redis.
-- Opens stream KEYS[2] (log KEYS[3]) of session KEYS[1]. With a fence, first fences the
-- session's standalone stream KEYS[4] on the epoch the replica read it at (condition 2),
-- or answers {-2, epoch} so the replica reads again and decides again.
-- ARGV: kind, key, owner, ttl_ms, steps, delay_ms, lease_ms, request_id, progress_token,
--       fence_epoch ('' for none)
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
if ARGV[10] ~= '' then
  local epoch = redis.call('HGET', KEYS[4], 'epoch')
  if epoch ~= ARGV[10] then return {-2, tonumber(epoch or 0)} end
  redis.call('HINCRBY', KEYS[4], 'epoch', 1)
  redis.call('HSET', KEYS[4], 'state', 'fenced')
end
redis.call('HSET', KEYS[2], 'kind', ARGV[1], 'key', ARGV[2], 'owner', ARGV[3],
  'state', 'live', 'epoch', 1, 'hw', 0)
if ARGV[1] == 'request' then
  redis.call('HSET', KEYS[2], 'steps', ARGV[5], 'delay', ARGV[6], 'done', 0, 'lease', 1,
    'lowner', ARGV[3], 'luntil', now + tonumber(ARGV[7]), 'rid', ARGV[8], 'ptok', ARGV[9])
  -- The session's call by request id, for notifications/cancelled (the latest call wins).
  local n = string.match(KEYS[2], ':s:(%d+)$')
  redis.call('HSET', KEYS[1], 'rid:' .. ARGV[8], n)
else
  local n = string.match(KEYS[2], ':s:(%d+)$')
  redis.call('HSET', KEYS[1], 'standalone', n)
end
touch(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[4]))
return {1, now}
