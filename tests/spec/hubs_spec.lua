-- hubs_spec.lua: hubs driven from Lua: one message at a time, requests and
-- replies, timeouts, activation, NotFound, and Lua handlers that raise or
-- run away (the sender gets Failed; the hub lives on).
local helper = require "helper"
local durable = require "durable"

local HUBS = helper.fixture "hubs.lua"

describe("a hub", function()
  helper.each()

  local mesh, ns, client
  local function setup(opts)
    opts = opts or {}
    opts.plugins = opts.plugins or { HUBS }
    mesh = helper.open(opts)
    ns = helper.ns()
    client = mesh:hub("client/" .. ns)
  end
  local function node(id, node_type)
    helper.ok(mesh:put_node { path = ns .. "/" .. id, node_type = node_type, content = {} })
    return ns .. "/" .. id
  end

  it("handles one message at a time (a probe of its handlers sees 1)", function()
    setup()
    local a, b = node("a", "Probe"), node("b", "Probe")
    local requests = {}
    for i = 1, 40 do
      local from = i % 2 == 0 and client or mesh:hub(("client/%s/%d"):format(ns, i % 4))
      requests[#requests + 1] = from:request(i % 3 == 0 and b or a, "touch",
        { n = i, peer = i % 3 == 0 and a or b })
    end
    local replies = helper.ok(durable.all(requests), 10000)
    for i = 1, 40 do assert.equal(i, replies[i].n) end
    local stats = helper.ok(client:request(a, "stats"))
    assert.equal(1, stats.max_active)
    assert.is_true(stats.touches >= 40)
  end)

  it("answers a request with the handler's value; nil answers null (nil in Lua)", function()
    setup()
    local e = node("e", "Echo")
    assert.same({ x = { 1, 2 }, s = "t" }, helper.ok(client:request(e, "echo", { x = { 1, 2 }, s = "t" })))
    assert.is_nil(helper.ok(client:request(e, "nothing")))
    assert.same({ a = durable.null }, helper.ok(client:request(e, "echo", { a = durable.null })))
    assert.is_nil(helper.ok(client:request(e, "echo"))) -- no payload: msg.payload is nil
    local who = helper.ok(client:request(e, "whoami"))
    assert.equal(e, who.address)
    assert.equal("Echo", who.node_type)
    assert.equal(client.address, who.sender)
    assert.equal("Started", who.run_level)
    assert.equal("pong", helper.ok(client:request(e, "ping")))
  end)

  it("times out a request nobody answers: ETIMEDOUT", function()
    setup { quiesce_budget_ms = 100 }
    local never = node("never", "Never")
    local t0 = helper.now(mesh)
    local message = helper.fails(client:request(never, "never", {}, 100), "ETIMEDOUT", 3000)
    assert.equal("no answer within 100 ms", message)
    assert.is_true(helper.now(mesh) - t0 >= 95)
  end)

  it("is activated by its first message, once", function()
    setup()
    local p = node("p", "Probe")
    local before = mesh:stats().activations
    assert.is_nil(helper.find(mesh, p))
    local first = helper.ok(client:request(p, "whoami"))
    assert.equal(before + 1, mesh:stats().activations)
    assert.is_not_nil(helper.find(mesh, p))
    local again = helper.ok(client:request(p, "whoami"))
    assert.equal(first.incarnation, again.incarnation)
    assert.equal(before + 1, mesh:stats().activations)
    assert.equal(1, helper.ok(client:request(p, "stats")).inits)
  end)

  it("waits for an init step's completion before the first message", function()
    setup()
    local l = node("late", "LateInit")
    assert.is_true(helper.ok(client:request(l, "ready")))
  end)

  it("fails the messages of an activation whose init step raises", function()
    setup()
    local b = node("bad", "BadInit")
    local message = helper.fails(client:request(b, "ok"), "EFAILED")
    assert.matches("init refused", message)
    assert.is_true(#helper.log_lines("init refused") > 0)
  end)

  it("answers NotFound for an address with no node", function()
    setup()
    local message = helper.fails(client:request(ns .. "/nobody", "whoami"), "ENOTFOUND")
    assert.matches(ns .. "/nobody", message, 1, true)
    -- an address that is no path names no hub: misuse, refused at the call
    local ok, err = pcall(client.request, client, "not a path//", "whoami")
    assert.is_false(ok)
    assert.matches("cannot send 'whoami': path 'not a path//' is invalid: empty segment", err,
      1, true)
  end)

  it("gives a plain hub to a node whose NodeType has no configuration", function()
    setup()
    local plain = node("plain", "Unconfigured")
    assert.equal("pong", helper.ok(client:request(plain, "ping")))
    assert.matches("no handler", helper.fails(client:request(plain, "whoami"), "EFAILED"))
  end)

  it("survives a handler that raises: the sender gets Failed with the message", function()
    setup()
    local r = node("r", "Raiser")
    local incarnation = helper.ok(client:request(r, "whoami")).incarnation
    local message = helper.fails(client:request(r, "boom"), "EFAILED")
    assert.matches("boom: the handler failed", message, 1, true)
    assert.matches("hubs.lua:%d+:", message)
    local logged = helper.log_lines("boom: the handler failed")
    assert.equal(1, #logged)
    assert.matches("stack traceback", logged[1], 1, true)
    assert.matches("Raiser", logged[1], 1, true)
    -- a non-string error, and a raise inside a later continuation
    assert.matches("error object is a table", helper.fails(client:request(r, "raise_table"), "EFAILED"))
    assert.matches("later boom", helper.fails(client:request(r, "fail_later"), "EFAILED"))
    -- the hub lives on: same activation, still answering
    assert.equal("fine", helper.ok(client:request(r, "ok")))
    assert.equal(incarnation, helper.ok(client:request(r, "whoami")).incarnation)
  end)

  it("fails a reply JSON cannot hold, naming why", function()
    setup()
    local e = node("e", "Echo")
    assert.matches("cannot encode a function", helper.fails(client:request(e, "bad_reply"), "EFAILED"))
  end)

  it("fails a request whose handler's completion is collected before it settles", function()
    setup()
    local e = node("e", "Echo")
    local c = client:request(e, "drop", nil, 3000)
    helper.run_until(mesh, function()
      collectgarbage()
      return c:status() ~= "pending"
    end)
    assert.matches("dropped before it settled", helper.fails(c, "EFAILED"))
    assert.equal(1, helper.ok(client:request(e, "echo", 1)))
  end)

  it("stops a runaway handler after the instruction budget; the hub lives on", function()
    setup { instruction_budget = 1000000 }
    local r = node("spin", "Runaway")
    local incarnation = helper.ok(client:request(r, "whoami")).incarnation
    local t0 = os.clock()
    -- A watchdog of the test's own: the module puts its count hook in place
    -- of this one while it runs a handler, so this fires only if the budget
    -- did not (the test then fails instead of hanging).
    debug.sethook(function()
      if os.clock() - t0 > 20 then error("watchdog: the instruction budget did not stop the handler") end
    end, "", 1000000)
    for _, kind in ipairs { "spin", "spin_caught", "spin_coroutine", "spin_later" } do
      local ok, message = pcall(helper.fails, client:request(r, kind, nil, 30000), "EFAILED", 30000)
      if not ok then debug.sethook() error(message, 0) end
      assert.equal("handler ran away: more than 1000000 instructions", message, kind)
    end
    debug.sethook()
    assert.is_true(os.clock() - t0 < 5, "stopped quickly")
    assert.is_true(#helper.log_lines("handler ran away") >= 3)
    assert.equal("fine", helper.ok(client:request(r, "ok")))
    assert.equal(incarnation, helper.ok(client:request(r, "whoami")).incarnation)
  end)

  it("posts messages nobody awaits, and timers post to the hub itself", function()
    setup()
    local p = node("p", "Probe")
    assert.is_true(client:post(p, "touch", { n = 0 }))
    assert.is_true(client:post(ns .. "/nobody", "touch", {})) -- dropped, not an error
    helper.run_until(mesh, function()
      return helper.ok(client:request(p, "stats")).touches >= 1
    end)
    local hub = mesh:hub(p)
    assert.equal(p, hub.address)
    assert.is_true(hub:timer(10, "touch", {}))
    helper.run_until(mesh, function()
      return helper.ok(client:request(p, "stats")).touches >= 2
    end)
  end)

  it("gives the node's hub, or a client hub where there is no node", function()
    setup()
    local e = node("e", "Echo")
    local hub = mesh:hub(e)
    assert.equal("Echo", hub.node_type)
    assert.equal(hub, mesh:hub(e)) -- one object per activation
    local c = mesh:hub(ns .. "/not-a-node")
    assert.equal("", c.node_type)
    assert.equal("Started", c.run_level)
    assert.has_error(function() mesh:hub("") end)
  end)
end)
