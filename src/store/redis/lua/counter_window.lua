--[[ After counter_args.lua, for the two algorithms that count in fixed
windows (fixed_window.lua, sliding_counter.lua): the window's start. ]]

local start = now - (now % win)
