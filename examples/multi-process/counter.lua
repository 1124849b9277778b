-- counter.lua: the plugin of examples/multi-process.  A Counter node adds
-- up its CounterLog stream.
--
-- Producers append {"i":N} to CounterLog@{counter path}, i = 1, 2, 3, ...
-- The Counter's hub consumes it -- in whichever `durable run` process holds
-- the stream's lease -- and, in ONE write of the counter node:
--
--   applied       the item's sequence (a redelivered item, at or below it,
--                 changes nothing: the at-least-once window of a process
--                 killed between its write and its acknowledgement is closed
--                 here, as in plugins/document_log.lua);
--   total         the sum of the i applied;
--   out_of_order  how many items came with an i other than applied + 1
--                 (absent: none);
--   by            per process id, how many items that process applied.
--
--   durable put Demo/c1 Counter '{}'
--   durable run examples/multi-process/counter.lua     # as many as you like
--   durable publish CounterLog Demo/c1 '{"i":1}'
--   durable get @Demo/c1
local function own_pid()
  local f = assert(io.open("/proc/self/stat", "r"))
  local stat = f:read("l")
  f:close()
  return stat:match("^(%d+)")
end

local PID = own_pid() -- a string: the key of `by`

return {
  node_types = {
    Counter = function(config)
      config:with_durable_stream_consumer {
        namespace = "CounterLog",
        key = function(hub) return hub.address end,
        handler = function(hub, item)
          local i = item.payload.i
          if math.type(i) ~= "integer" then
            error(("CounterLog item %d carries no integer i"):format(item.sequence))
          end
          return hub:update_node(hub.address, function(node)
            local c = node.content
            if (c.applied or 0) >= item.sequence then
              hub.mesh:log("warn", ("counter %s: item %d was applied already (handed over "
                .. "again after a takeover); nothing to do"):format(hub.address, item.sequence))
              return nil
            end
            if i ~= (c.applied or 0) + 1 then c.out_of_order = (c.out_of_order or 0) + 1 end
            c.applied = item.sequence
            c.total = (c.total or 0) + i
            c.by = c.by or {}
            c.by[PID] = (c.by[PID] or 0) + 1
            return node
          end)
        end,
      }
    end,
  },
}
