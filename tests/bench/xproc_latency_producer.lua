-- xproc_latency_producer.lua: the producer side of tests/bench/xproc_latency.sh.
--   durable lua tests/bench/xproc_latency_producer.lua PROBE RATE COUNT WARM
-- Publishes WARM items {"warm":true} (then waits a second, so the host
-- holds the stream), then COUNT items {"t": now in µs} paced at RATE per
-- second (item i is due at t0 + i/RATE; each is stamped when published),
-- then one {"last":true}.  Each publish is started (:next) when it is
-- made, and the script waits until every one is saved.
local durable = require "durable"
local system = require "system"

local probe, rate, count, warm = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])
local mesh = assert(durable.open {})
local client = mesh:hub("client/xproc-latency")
local stream = { namespace = "LatencyLog", key = probe }

local warmup = {}
for _ = 1, warm do warmup[#warmup + 1] = client:publish_durable(stream, { warm = true }) end
assert(durable.all(warmup):wait())
local t_end = system.gettime() + 1
mesh:run_until(function() return system.gettime() >= t_end end, 1100)

local pending = {}
local t0 = system.gettime()
local i = 0
while i < count do
  local now = system.gettime()
  while i < count and t0 + i / rate <= now do
    local c = client:publish_durable(stream, { t = math.floor(system.gettime() * 1e6) })
    c:next(function() end) -- a publish is cold: this sends it now
    pending[#pending + 1] = c
    i = i + 1
  end
  local due = t0 + i / rate
  mesh:run_until(function() return system.gettime() >= due end, 2)
end
pending[#pending + 1] = client:publish_durable(stream, { last = true })
assert(durable.all(pending):wait())
io.stderr:write(("producer: %d items in %.2f s\n"):format(count, system.gettime() - t0))
mesh:close()
