-- forkscope_core::replica::store::StoreMachine::snapshot, atomically in Redis.
-- One stream's record, the oldest sequence its log keeps, and the store's clock, read at one
-- instant: what a replica decides on.
-- KEYS[1] meta, KEYS[2] stream, KEYS[3] log; ARGV[1] idle_ms
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
touch(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]))
local fields = redis.call('HGETALL', KEYS[2])
if #fields == 0 then return {0, now} end
-- An entry holds a batch of events, `COUNT\n` first; its id is its last event's sequence.
local first = redis.call('XRANGE', KEYS[3], '-', '+', 'COUNT', 1)
local oldest = -1
if #first > 0 then
  local last = tonumber(string.match(first[1][1], '^(%d+)'))
  oldest = last - tonumber(string.match(first[1][2][2], '^(%d+)\n')) + 1
end
return {1, now, oldest, fields}
