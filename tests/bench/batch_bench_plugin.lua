-- batch_bench_plugin.lua: the consumers of tests/bench/batch_bench.lua,
-- which loads it (it is no plugin of its own).  Two NodeTypes consume the
-- family Bench of their own address with a batch handler taking up to
-- state.batch items a call:
--
--   BatchAck  counts the items and returns nil: the batch is acknowledged
--   BatchTx   counts, and writes one node per batch through its
--             transaction (tx:update_node of the owner: how far it got),
--             committed with the acknowledgement of the batch's last item
--
-- They count into the table batch_bench.lua leaves in package.loaded (the
-- items, the calls, whether every item came as the next sequence).
local state = assert(package.loaded["batch_bench.state"],
  "batch_bench_plugin.lua is loaded by tests/bench/batch_bench.lua")

local function count(items)
  for i = 1, #items do
    state.handled = state.handled + 1
    if items[i].sequence ~= state.handled then state.order_ok = false end
  end
  state.calls = state.calls + 1
end

return {
  node_types = {
    BatchAck = function(config)
      config:with_durable_stream_consumer {
        namespace = "Bench",
        batch = state.batch,
        handler = function(_, items)
          count(items)
        end,
      }
    end,

    BatchTx = function(config)
      config:with_durable_stream_consumer {
        namespace = "Bench",
        batch = state.batch,
        handler = function(hub, items, tx)
          count(items)
          local last = items[#items].sequence
          tx:update_node(hub.address, function(node)
            node.content.applied = last
            return node
          end)
        end,
      }
    end,
  },
}
