-- coroutine_spec.lua: handlers run in coroutines.  completion:await()
-- suspends a message handler, a stream item handler or an init step until
-- the completion settles (returning value, or nil, message, code); outside
-- a handler it raises.  A failure keeps its code (durable.fail, error
-- tables) all the way to the sender and to a stream's log; the instruction
-- budget stops a runaway after an await; a recycle waits for a handler
-- suspended in await; a cold completion collected unstarted warns, naming
-- the line that made it.
local helper = require "helper"
local durable = require "durable"

local FIXTURE = helper.fixture "coroutines.lua"

describe("a handler in a coroutine", function()
  helper.each()

  local mesh, ns, client
  local function setup(extra)
    local opts = { plugins = { FIXTURE }, streams = { backoff_min_ms = 20, backoff_max_ms = 40 } }
    for k, v in pairs(extra or {}) do opts[k] = v end
    mesh = helper.open(opts)
    ns = helper.ns()
    client = mesh:hub("client/" .. ns)
  end
  local function node(id, node_type, content)
    helper.ok(mesh:put_node { path = ns .. "/" .. id, node_type = node_type, content = content or {} })
    return ns .. "/" .. id
  end

  it("awaits a read, another hub's answer and a write, top to bottom", function()
    setup()
    local a, later = node("a", "Awaiter", { n = 4 }), node("later", "Later")
    assert.same({ read = 4, answered = 40, wrote = 41 },
      helper.ok(client:request(a, "read_ask_write", { peer = later })))
    assert.equal(41, helper.ok(mesh:get_node(a)).content.n)
    -- and again: the hub serves its next message after the first finished
    assert.same({ read = 41, answered = 410, wrote = 411 },
      helper.ok(client:request(a, "read_ask_write", { peer = later })))
  end)

  it("gets nil, message, code from a failed await, like :wait()", function()
    setup()
    local a, later = node("a", "Awaiter"), node("later", "Later")
    assert.same({ message = "the version moved", code = "ECONFLICT" },
      helper.ok(client:request(a, "relay", { peer = later, type = "conflict" })))
    local r = helper.ok(client:request(a, "relay", { peer = ns .. "/nobody", type = "x" }))
    assert.equal("ENOTFOUND", r.code)
  end)

  it("raises outside a handler: in a script, a spec or a callback use :wait() or :next()", function()
    local ok, message = pcall(function()
      local v = durable.done(1):await()
      return v
    end)
    assert.is_false(ok)
    assert.matches("only inside a handler", message, 1, true)
    assert.matches(":wait()", message, 1, true)
    assert.matches(":next()", message, 1, true)
    assert.matches("coroutine_spec.lua:%d+:", message) -- raised where it was called
    -- a coroutine of one's own is not a handler's either
    local co = coroutine.wrap(function() return pcall(durable.done(1).await, durable.done(1)) end)
    assert.is_false((co()))
    -- a callback from C (a store read) runs outside any handler
    setup()
    local c = mesh:get_node(ns .. "/x"):next(function() return durable.done(1):await() end)
    assert.matches("only inside a handler", helper.fails(c, "EFAILED"), 1, true)
  end)

  it("refuses await inside a :next() continuation, a raw yield, and :wait() after an await", function()
    setup()
    local a = node("a", "Awaiter")
    assert.matches("inside a :next() continuation",
      helper.fails(client:request(a, "await_in_next"), "EFAILED"), 1, true)
    assert.matches("may yield only through completion:await()",
      helper.fails(client:request(a, "raw_yield"), "EFAILED"), 1, true)
    assert.matches("cannot be called inside a handler",
      helper.fails(client:request(a, "wait_after_await"), "EFAILED"), 1, true)
    assert.equal("fine", helper.ok(client:request(a, "ok")))
  end)

  it("fails its message when it raises after an await; logged with the traceback", function()
    setup()
    local a = node("a", "Awaiter")
    local message = helper.fails(client:request(a, "raise_after_await"), "EFAILED")
    assert.matches("coroutines.lua:%d+: raised after an await", message)
    local lines = helper.log_lines("raised after an await")
    assert.equal(1, #lines)
    assert.matches("handler for 'raise_after_await' of NodeType 'Awaiter'", lines[1], 1, true)
    assert.matches("stack traceback", lines[1], 1, true)
    assert.equal("fine", helper.ok(client:request(a, "ok")))
  end)

  it("keeps a failure's code: durable.fail and error tables reach the sender", function()
    setup()
    local later, a = node("later", "Later"), node("a", "Awaiter")
    assert.equal("the version moved", helper.fails(client:request(later, "conflict"), "ECONFLICT"))
    assert.equal("raised as a table", helper.fails(client:request(later, "error_table"), "ECONFLICT"))
    -- a code the runtime has no name for is EFAILED, the message kept
    assert.equal("no such code, message kept",
      helper.fails(client:request(later, "unknown_code"), "EFAILED"))
    -- hub to hub: the code arrives at the requesting hub, which passes it on
    assert.equal("the version moved", helper.fails(client:request(a, "relay_fail", { peer = later }),
      "ECONFLICT"))
    -- durable.fail outside a handler is a plain raise of that failure
    local ok, e = pcall(durable.fail, "ENOTFOUND", "gone")
    assert.is_false(ok)
    assert.same({ "ENOTFOUND", "gone" }, { e.code, e.message })
    assert.equal("ENOTFOUND: gone", tostring(e))
    assert.has_error(function() durable.fail(42) end)
    -- a continuation's raise keeps its code too
    assert.equal("ECONFLICT", select(3, durable.done(1):next(function()
      durable.fail("ECONFLICT", "in a continuation")
    end):wait()))
  end)

  it("runs an init step that awaits before the hub's first message", function()
    setup()
    local i = node("i", "AwaitInit", { tag = "from the node" })
    assert.equal("from the node", helper.ok(client:request(i, "seen")))
  end)

  it("runs a stream item handler that awaits; the item is acknowledged once it returns", function()
    setup()
    local later, owner = node("later", "Later"), ns .. "/owner"
    local stream = { namespace = "Awaited", key = owner }
    for i = 1, 3 do helper.ok(client:publish_durable(stream, { v = i })) end
    local seen = {}
    local hub = assert(mesh:hub("client/" .. ns .. "/consumer"))
    assert.is_true(hub:consume { namespace = "Awaited", key = function() return owner end,
      handler = function(h, item)
        local v = h:request(later, "delay", { ms = 10, value = item.payload.v * 2 }):await()
        h:put_node { path = owner .. "/seen/" .. item.sequence, content = { v = v } }:await()
        seen[#seen + 1] = v
      end })
    helper.run_until(mesh, function() return #seen == 3 end)
    assert.same({ 2, 4, 6 }, seen, "in order, one at a time")
    helper.run_until(mesh, function()
      return helper.ok(mesh:get_node((durable.stream_path(stream)))).content.Checkpoint == 3
    end)
    assert.equal(6, helper.ok(mesh:get_node(owner .. "/seen/3")).content.v)
  end)

  it("fails a stream item with its code: the NOT acknowledged line carries it", function()
    setup()
    local owner = ns .. "/owner"
    local stream = { namespace = "Refused", key = owner }
    helper.ok(client:publish_durable(stream, { v = 1 }))
    local tries = 0
    local hub = assert(mesh:hub("client/" .. ns .. "/consumer"))
    assert.is_true(hub:consume { namespace = "Refused", key = function() return owner end,
      handler = function(h)
        tries = tries + 1
        h:get_node(owner):await()
        if tries == 1 then durable.fail("ECONFLICT", "refused once") end
      end })
    helper.run_until(mesh, function()
      return helper.ok(mesh:get_node((durable.stream_path(stream)))).content.Checkpoint == 1
    end)
    local lines = helper.log_lines("was NOT acknowledged")
    assert.equal(1, #lines)
    assert.matches("(ECONFLICT): refused once", lines[1], 1, true)
  end)

  it("is stopped by the instruction budget when it runs away after an await; the hub lives on", function()
    setup { instruction_budget = 1000000 }
    local a = node("a", "Awaiter")
    local incarnation = helper.ok(client:request(a, "ok")) and helper.find(mesh, a).incarnation
    local t0 = os.clock()
    debug.sethook(function() -- the test's own watchdog, in case the budget does not stop it
      if os.clock() - t0 > 20 then error("watchdog: the instruction budget did not stop the handler") end
    end, "", 1000000)
    local ok, message = pcall(helper.fails, client:request(a, "spin_after_await", nil, 30000),
      "EFAILED", 30000)
    debug.sethook()
    assert(ok, message)
    assert.equal("handler ran away: more than 1000000 instructions", message)
    assert.is_true(os.clock() - t0 < 5, "stopped quickly")
    local lines = helper.log_lines("handler ran away")
    assert.equal(1, #lines)
    assert.matches("handler for 'spin_after_await'", lines[1], 1, true)
    assert.equal("fine", helper.ok(client:request(a, "ok")))
    assert.equal(incarnation, helper.find(mesh, a).incarnation)
  end)

  it("is waited for by a recycle while it is suspended in await", function()
    setup { quiesce_budget_ms = 3000 }
    local a, later = node("a", "Awaiter"), node("later", "Later")
    helper.ok(client:request(a, "ok"))
    local base = mesh:stats().messages
    local pending = client:request(a, "slow", { peer = later, ms = 300 })
    helper.run_until(mesh, function() return mesh:stats().messages >= base + 2 end)
    assert.equal("pending", pending:status())
    local t0 = helper.now(mesh)
    local recycled = mesh:recycle(a)
    assert.equal("Quiescing", helper.find(mesh, a).run_level)
    assert.same({ value = "late", level = "Quiescing" }, helper.ok(pending))
    assert.is_true(helper.ok(recycled))
    assert.is_true(helper.now(mesh) - t0 >= 250, "the recycle waited for the suspended handler")
    assert.equal(0, mesh:stats().quiesce_timeouts)
  end)

  it("that never resumes is finished when the hub leaves after the quiesce budget", function()
    setup { quiesce_budget_ms = 200 }
    local a = node("a", "Awaiter")
    helper.ok(client:request(a, "ok"))
    local base = mesh:stats().messages
    local stuck = client:request(a, "never", nil, 5000)
    helper.run_until(mesh, function() return mesh:stats().messages >= base + 1 end)
    local t0 = helper.now(mesh)
    helper.ok(mesh:recycle(a))
    assert.is_true(helper.now(mesh) - t0 >= 190)
    assert.equal(1, mesh:stats().quiesce_timeouts)
    assert.matches("left before it answered", helper.fails(stuck, "ESHUTDOWN", 1000))
  end)
end)

describe("a cold completion collected without being started", function()
  helper.each()

  local function fixture_line(marker)
    local n = 0
    for line in io.lines(FIXTURE) do
      n = n + 1
      if line:find(marker, 1, true) then return n end
    end
  end

  it("logs a warning naming the line that made it", function()
    local mesh = helper.open { plugins = { FIXTURE } }
    local ns = helper.ns()
    local client = mesh:hub("client/" .. ns)
    -- made here, never started
    local line = debug.getinfo(1, "l").currentline + 1
    do local _ = client:publish_durable({ namespace = "Forgotten", key = ns .. "/x" }, { n = 1 }) end
    collectgarbage()
    collectgarbage()
    local lines = helper.log_lines("collected without ever being started")
    assert.equal(1, #lines)
    assert.matches("^warn ", lines[1])
    assert.matches("coroutine_spec.lua:" .. line .. " ", lines[1], 1, true)
    -- a publish written as a statement inside a handler
    helper.ok(mesh:put_node { path = ns .. "/a", node_type = "Awaiter" })
    helper.ok(client:request(ns .. "/a", "forget_publish"))
    collectgarbage()
    collectgarbage()
    lines = helper.log_lines("collected without ever being started")
    assert.equal(2, #lines)
    assert.matches("coroutines.lua:" .. fixture_line("-- FORGOTTEN") .. " ", lines[2], 1, true)
    -- nothing was sent: the stream does not exist
    assert.is_nil(helper.ok(mesh:get_node((durable.stream_path { namespace = "Forgotten",
      key = ns .. "/a" }))))
  end)

  it("says nothing once it was started, or when it was not cold", function()
    local mesh = helper.open()
    local ns = helper.ns()
    local client = mesh:hub("client/" .. ns)
    helper.ok(client:publish_durable({ namespace = "Started", key = ns .. "/x" }, { n = 1 }))
    do local _ = mesh:get_node(ns .. "/x") end
    helper.ok(mesh:get_node(ns .. "/x"))
    collectgarbage()
    collectgarbage()
    assert.equal(0, #helper.log_lines("collected without ever being started"))
  end)
end)
