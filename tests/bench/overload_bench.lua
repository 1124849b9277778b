-- overload_bench.lua: overload_bench's Lua figure, run as
--   durable lua tests/bench/overload_bench.lua burst URL N
-- It opens a mesh on URL, starts N publish_durable(...):next(...) on one
-- stream at once (none awaited), and prints one line: items/s, the peak
-- resident memory above the idle process in MB, what is left a second
-- after the last completion (above idle, MB), and how many failed.
local durable = require "durable"

local mode, url, n = arg[1], arg[2], tonumber(arg[3])
assert(mode == "burst" and url and n, "usage: overload_bench.lua burst URL N")

local function rss_mb()
  for line in io.lines("/proc/self/status") do
    local kb = line:match("^VmRSS:%s+(%d+)")
    if kb then return tonumber(kb) / 1024 end
  end
end

local function now()
  local f = assert(io.open("/proc/uptime"))
  local t = tonumber(f:read("n"))
  f:close()
  return t
end

local mesh = assert(durable.open { store = url })
local key = ("obench_lua_%d_%d/o"):format(os.time(), math.random(1, 1e6))
assert(mesh:put_node { path = key, node_type = "BenchOwner", content = {} }:wait())
local hub = mesh:hub("client/bench")
local id = { namespace = "Bench", key = key }
assert(hub:publish_durable(id, { i = 0 }):wait())
mesh:run_until(function() return false end, 300)
collectgarbage()
collectgarbage()
local idle = rss_mb()
local peak, done, failed = idle, 0, 0
local function sample()
  local r = rss_mb()
  if r > peak then peak = r end
end
local function ok() done = done + 1 if done % 10000 == 0 then sample() end end
local function bad() failed = failed + 1 ok() end
local t0 = now()
for i = 1, n do
  hub:publish_durable(id, { i = i }):next(ok, bad)
  if i % 10000 == 0 then sample() end
end
assert(mesh:run_until(function() return done == n end, 600000))
local secs = now() - t0
sample()
mesh:run_until(function() return false end, 1000)
local after = rss_mb()
print(("%.0f %.1f %.1f %d"):format(n / secs, peak - idle, after - idle, failed))
mesh:close()
