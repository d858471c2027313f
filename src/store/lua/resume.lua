-- forkscope_core::replica::store::StoreMachine::resume, atomically in Redis: bumps the stream
-- epoch if it is still the one the replica decided on, naming the new holder (every later write
-- or delivery at the old epoch is refused), then, when asked, takes the stream's call over if
-- its lease expired (take_over.lua). One step: attach and adopt both happen, or the attach is
-- refused and nothing does.
-- KEYS[1] meta, KEYS[2] stream, KEYS[3] log; ARGV: expected epoch ('' for none), owner,
-- idle_ms, expected lease epoch ('' for none), lease_ms
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local epoch = 0
if ARGV[1] ~= '' then
  local stored = redis.call('HGET', KEYS[2], 'epoch')
  if stored ~= ARGV[1] then
    return {-2, tonumber(stored or 0), redis.call('HGET', KEYS[2], 'owner') or ''}
  end
  epoch = redis.call('HINCRBY', KEYS[2], 'epoch', 1)
  redis.call('HSET', KEYS[2], 'owner', ARGV[2])
  touch(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[3]))
end
if ARGV[4] == '' then return {1, epoch} end
local adopted = take_over(KEYS[1], KEYS[2], KEYS[3], ARGV[4], ARGV[2], tonumber(ARGV[5]),
  tonumber(ARGV[3]), now)
return {1, epoch, unpack(adopted)}
