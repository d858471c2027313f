-- forkscope_core::replica::store::StoreMachine::open_session, atomically in Redis.
-- Opens a session unless the store holds its cap of them. A session counts while its record
-- (meta) lives: it expires after the idle time with no request, or is deleted when the session
-- ends. The index KEYS[1] lists sessions by when they were last looked at; at the cap, the 256
-- least recently looked at are checked, those whose record is gone dropped (a bounded sweep),
-- and only then is the store full.
-- KEYS[1] the sessions index (a sorted set), KEYS[2] the new session's meta
-- ARGV: cap, idle_ms, the session id
-- Reads other sessions' meta keys by name: fine on one Redis; in a cluster the index and the
-- cap would be per shard (see ARCHITECTURE.md).
local cap = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if redis.call('ZCARD', KEYS[1]) >= cap then
  -- The least recently looked at first: an entry found alive is scored now, so the next sweep
  -- looks further along and an expired session behind long-lived ones is found in turn.
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 255)
  for _, s in ipairs(oldest) do
    if redis.call('EXISTS', 'fs:{' .. s .. '}:meta') == 0 then
      redis.call('ZREM', KEYS[1], s)
    else
      redis.call('ZADD', KEYS[1], now, s)
    end
  end
  if redis.call('ZCARD', KEYS[1]) >= cap then return {-5} end
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
-- An open session is left as it is (StoreMachine::open_session).
redis.call('HSETNX', KEYS[2], 'streams', 0)
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[2]))
return {1}
