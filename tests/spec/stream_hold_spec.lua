-- stream_hold_spec.lua: a takeover's hold binds whoever holds the stream
-- next.  A stream taken over from a process that is gone (to the database)
-- hands no item over for the fence (2 s on PostgreSQL), so that the old
-- process, should it still run cut off, has stopped handing items over
-- first.  When the taker lets go within that hold, the next holder waits
-- out the rest of it: the hold is kept on the stream node (HoldUntil), not
-- only in the taker's memory.  PostgreSQL only: SQLite's processes share a
-- machine, and there is no fence.
local helper = require "helper"
local durable = require "durable"
local probe = require "probe"

local FAMILY = probe.FAMILY

describe("a takeover's hold", function()
  helper.each()

  it("makes the next holder wait out its rest when the taker lets go within it #postgres", function()
    local url = helper.store()
    if not url:match("^postgres") then return pending("PostgreSQL only: SQLite has no fence") end
    -- hosting: the store's feed runs, which is what fences a process
    local taker = helper.open { store = url, plugins = {}, streams = probe.STREAMS, host = true }
    local ns = helper.ns()
    local owner = ns .. "/held"
    local id = { namespace = FAMILY, key = owner }
    local path = durable.stream_path(id)
    local client = taker:hub("client/" .. ns)
    for i = 1, 3 do helper.ok(client:publish_durable(id, { value = i })) end
    -- held by a process the database has never seen alive: gone
    helper.ok(taker:update_node(path, function(n)
      n.content.Subscriber = "gone/holder"
      n.content.SubscriberInstance = "ghost:1:00000000deadbeef"
      return n
    end))
    local taken_handled = 0
    local hub = assert(taker:hub("client/" .. ns .. "/taker"))
    assert.is_true(hub:consume { namespace = FAMILY, key = function() return owner end,
      handler = function() taken_handled = taken_handled + 1 end })
    helper.run_until(taker, function() return #helper.log_lines("TOOK OVER") == 1 end)
    local taken_at = helper.now(taker)
    assert.truthy(helper.ok(taker:get_node(path)).content.HoldUntil, "the hold is on the stream node")
    taker:close() -- lets go within the hold: nothing was handed over
    assert.equal(0, taken_handled)

    local next_holder = helper.open { store = url, plugins = {}, streams = probe.STREAMS, host = true }
    local first_at
    local hub2 = assert(next_holder:hub("client/" .. ns .. "/next"))
    assert.is_true(hub2:consume { namespace = FAMILY, key = function() return owner end,
      handler = function() first_at = first_at or helper.now(next_holder) end })
    helper.run_until(next_holder, function() return first_at ~= nil end, 10000)
    assert.equal(1, #helper.log_lines("within the hold of a takeover from a process that is gone"))
    assert.is_true(first_at - taken_at >= 1500,
      ("the next holder's first item came %d ms after the takeover"):format(first_at - taken_at))
  end)
end)
