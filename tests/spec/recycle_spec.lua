-- recycle_spec.lua: run levels from Lua: a recycle quiesces (new requests
-- refused with ShuttingDown, the hub's own new requests too, replies still
-- let in), waits for pending work up to the budget, disposes and leaves;
-- the next message reaches a fresh activation; a mesh read that meets
-- ShuttingDown re-probes exactly once.
local helper = require "helper"

local HUBS = helper.fixture "hubs.lua"

describe("a recycle", function()
  helper.each()

  local mesh, ns, client
  local function setup(budget)
    mesh = helper.open { plugins = { HUBS }, quiesce_budget_ms = budget }
    ns = helper.ns()
    client = mesh:hub("client/" .. ns)
  end
  local function node(id, node_type)
    helper.ok(mesh:put_node { path = ns .. "/" .. id, node_type = node_type, content = {} })
    return ns .. "/" .. id
  end
  -- Slow asks Delay and waits `ms` for the answer: a request of its own
  -- pending while the recycle begins.
  local function slow_in_flight(ms)
    local slow, delay = node("slow", "Slow"), node("delay", "Delay")
    local first = helper.ok(client:request(slow, "whoami"))
    local base = mesh:stats().messages
    local pending = client:request(slow, "slow", { to = delay, ms = ms })
    helper.run_until(mesh, function() return mesh:stats().messages >= base + 2 end)
    assert.equal("pending", pending:status())
    return slow, delay, first, pending
  end

  it("waits for a pending request that finishes inside the budget, and that request is answered",
    function()
      setup(3000)
      local slow, _, first, pending = slow_in_flight(300)
      local t0 = helper.now(mesh)
      local recycled = mesh:recycle(slow)
      assert.equal("Quiescing", helper.find(mesh, slow).run_level)
      local reply = helper.ok(pending)
      assert.same({ delayed = true }, reply.first)
      assert.is_true(helper.ok(recycled))
      assert.is_true(helper.now(mesh) - t0 >= 250, "the recycle waited for the answer")
      local stats = mesh:stats()
      assert.equal(1, stats.recycles)
      assert.equal(0, stats.quiesce_timeouts)
      assert.is_nil(helper.find(mesh, slow))
      -- the next message reaches a fresh activation
      local after = helper.ok(client:request(slow, "whoami"))
      assert.are_not.equal(first.incarnation, after.incarnation)
      local counts = helper.ok(client:request(slow, "stats"))
      assert.equal(2, counts.inits)
      assert.equal(1, counts.disposes)
    end)

  it("refuses, while quiescing, new requests to the hub and the hub's own new requests (ShuttingDown)",
    function()
      setup(3000)
      local slow, delay, _, pending = slow_in_flight(300)
      local recycled = mesh:recycle(slow)
      local message = helper.fails(client:request(slow, "whoami"), "ESHUTDOWN")
      assert.matches("shutting down", message)
      assert.equal("pending", pending:status())
      -- Slow's continuation ran as a turn of the quiescing hub (the reply
      -- was let in) and its own new request was refused
      local reply = helper.ok(pending)
      assert.same({ delayed = true }, reply.first)
      assert.equal("ESHUTDOWN", reply.refused)
      assert.equal("Quiescing", reply.level)
      assert.matches("shutting down", reply.message)
      helper.ok(recycled)
      -- Delay was never recycled and still answers others
      assert.equal("quick", helper.ok(client:request(delay, "quick")))
    end)

  it("lets a mesh read that meets ShuttingDown re-probe exactly once, against the fresh activation",
    function()
      setup(3000)
      local slow, _, first, pending = slow_in_flight(300)
      assert.equal(0, mesh:stats().read_reprobes)
      local recycled = mesh:recycle(slow)
      local node = helper.ok(mesh:read(slow))
      assert.equal(slow, node.path)
      assert.equal("Slow", node.node_type)
      assert.equal(1, mesh:stats().read_reprobes)
      helper.ok(pending)
      helper.ok(recycled)
      local fresh = helper.find(mesh, slow)
      assert.is_not_nil(fresh, "the re-probe activated the address again")
      assert.are_not.equal(first.incarnation, fresh.incarnation)
      -- reads of a quiet address do not re-probe; an absent node reads nil
      assert.equal(slow, helper.ok(client:read(slow)).path)
      assert.is_nil(helper.ok(mesh:read(ns .. "/absent")))
      assert.equal(1, mesh:stats().read_reprobes)
    end)

  it("leaves after the quiesce budget when pending work never ends; logged and counted", function()
    setup(200)
    local never = node("never", "Never")
    local stuck = client:request(never, "never", nil, 5000)
    helper.run_until(mesh, function() return mesh:stats().messages >= 1 end)
    local t0 = helper.now(mesh)
    helper.ok(mesh:recycle(never))
    assert.is_true(helper.now(mesh) - t0 >= 190)
    assert.equal(1, mesh:stats().quiesce_timeouts)
    assert.equal(1, #helper.log_lines("Quiesce budget of 200 ms ran out for '" .. never .. "'"))
    -- the request its handler never finished is answered, not left to time out
    assert.matches("left before it answered", helper.fails(stuck, "ESHUTDOWN", 1000))
  end)

  it("of an address with no active hub is done at once", function()
    setup(200)
    assert.is_true(helper.ok(mesh:recycle(ns .. "/idle")))
    assert.equal(0, mesh:stats().recycles)
  end)
end)
