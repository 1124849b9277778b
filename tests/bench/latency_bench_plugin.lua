-- latency_bench_plugin.lua: the consumer of tests/bench/latency_bench.lua.
-- A LatencyProbe node consumes its stream LatencyLog@{its path}, whose
-- items carry {"t": the publish's monotonic clock in µs}.  On handler entry
-- it hands "now - t" to the bench's sink (package.loaded
-- latency_bench_sink, set by latency_bench.lua before it opens the mesh,
-- in the same Lua state).  With sink.batch = N the consumer is declared
-- with `batch = N` and its handler takes (hub, items, tx), items an array.
local system = require "system" -- luasystem (busted's): monotime() in s
local sink = require "latency_bench_sink"

local function now_us() return math.floor(system.monotime() * 1e6) end

local function note(item, now)
  local p = item.payload
  if not p.warm then
    local n = sink.count + 1
    sink.count = n
    sink.latency[n] = now - p.t
  end
  sink.handled = sink.handled + 1
end

return {
  node_types = {
    LatencyProbe = function(config)
      if sink.batch then
        config:with_durable_stream_consumer {
          namespace = "LatencyLog",
          batch = sink.batch,
          handler = function(_, items)
            local now = now_us()
            for i = 1, #items do note(items[i], now) end
          end,
        }
      else
        config:with_durable_stream_consumer {
          namespace = "LatencyLog",
          handler = function(_, item) note(item, now_us()) end,
        }
      end
    end,
  },
}
