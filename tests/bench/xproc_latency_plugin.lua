-- xproc_latency_plugin.lua: the host side of tests/bench/xproc_latency.sh.
-- A LatencyProbe node consumes its stream LatencyLog@{probe path}, whose
-- items carry {"t": wall clock of the publish in microseconds} (stamped by
-- xproc_latency_producer.lua in another process).  On handler entry it
-- appends "now - t" in microseconds, one a line, to $XPROC_OUT; an item with
-- "last" writes "done" and flushes.  Items with "warm" are not counted.
local system = require "system" -- luasystem (busted's): gettime() in seconds, µs resolution

local out = assert(io.open(assert(os.getenv("XPROC_OUT"), "XPROC_OUT is not set"), "a"))

return {
  node_types = {
    LatencyProbe = function(config)
      config:with_durable_stream_consumer {
        namespace = "LatencyLog",
        key = function(hub) return hub.address end,
        handler = function(_, item)
          local now_us = math.floor(system.gettime() * 1e6)
          local p = item.payload
          if p.last then
            out:write("done\n")
            out:flush()
          elseif not p.warm then
            out:write(now_us - p.t, "\n")
          end
        end,
      }
    end,
  },
}
