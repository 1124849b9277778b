-- stream_stopped_spec.lua: a stream stopped because the store went back,
-- on either store, without a failover: the stop is written into the
-- stream node by hand (SeenLastSequence, SeenCheckpoint, SeenLeaseEpoch:
-- what a process saw before the store lost it), as failover_spec.lua's
-- asynchronous case makes it for real on PostgreSQL.
--
-- While stopped, a publish fails with EIO naming the seek that goes on, and
-- `durable streams` says so.  The seek raises the tail to the last sequence
-- seen and records the rest as lost: the next publish gets the sequence
-- after it, a reader passes over the lost ones, and the lag counts none of
-- them.
local helper = require "helper"
local durable = require "durable"

local FAMILY = "StoppedStream"
local BIN = os.getenv("DURABLE_BIN") or helper.BUILD .. "/durable"

describe("a durable stream stopped because the store went back", function()
  helper.each()

  local function streams_json(store, key)
    local code, out, err = helper.sh(helper.quote(BIN) .. " streams --json --store "
      .. helper.quote(store))
    assert(code == 0, "durable streams: " .. err)
    for line in out:gmatch("[^\n]+") do
      local row = durable.decode(line)
      if row.key == key then return row end
    end
    error("durable streams does not list " .. key .. ": " .. out)
  end

  it("refuses publishes until a seek, then skips the lost sequences", function()
    local store = helper.store()
    local mesh = helper.open { store = store }
    local key = helper.ns() .. "/doc"
    local stream = { namespace = FAMILY, key = key }
    local client = mesh:hub("client/" .. key)
    for i = 1, 5 do assert.equal(i, helper.ok(client:publish_durable(stream, { i = i }))) end

    -- a process had seen items up to 9 told, 7 acknowledged, epoch 4
    local path = durable.stream_path(stream)
    local node = helper.ok(mesh:get_node(path))
    node.content.SeenLastSequence, node.content.SeenCheckpoint = 9, 7
    node.content.SeenLeaseEpoch = 4
    helper.ok(mesh:put_node { path = path, node_type = node.node_type, content = node.content })

    local message = helper.fails(client:publish_durable(stream, { i = 6 }), "EIO", 10000)
    assert.truthy(message:find("is stopped: the store is behind", 1, true), message)
    assert.truthy(message:find(("durable seek %s %s --to 7"):format(FAMILY, key), 1, true), message)
    local row = streams_json(store, key)
    assert.same({ seen_last = 9, seen_checkpoint = 7, seen_epoch = 4 }, row.stopped)
    assert.truthy(row.last_error:find("--to 7", 1, true), row.last_error)

    -- the operator goes on, replaying from 2: what the store still holds
    -- after it comes again, the lost sequences never
    assert.equal(0, helper.ok(mesh:seek_durable(stream, 2), 10000))
    assert.equal(10, helper.ok(client:publish_durable(stream, { i = 10 })))
    row = streams_json(store, key)
    assert.equal(durable.null, row.stopped)
    assert.same({ from = 6, to = 9 }, row.lost)
    assert.equal(4, row.lag, "items 3, 4, 5 and 10: the lost ones are no lag")
    assert.is_true(row.epoch > 4, "the epoch is above the one seen: " .. row.epoch)

    local seen = {}
    local sub = client:read_durable(stream, 0, function(item) seen[#seen + 1] = item.sequence end)
    helper.run_until(mesh, function() return #seen >= 6 end, 10000)
    sub:close()
    assert.same({ 1, 2, 3, 4, 5, 10 }, seen)
  end)
end)
