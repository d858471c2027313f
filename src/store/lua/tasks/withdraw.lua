-- An unkeyed task create.lua made beside an admission the caps then refused (its 'p'): answered
-- to no one, it goes as if never made, while it is as made (epoch 1, no step). KEYS[1] the task.
local task = KEYS[1]
if redis.call('HGET', task, 'epoch') == '1' and redis.call('HGET', task, 'done') == '0' then
  redis.call('DEL', task)
end
return {1}
