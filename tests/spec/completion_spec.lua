-- completion_spec.lua: completions, the one way anything finishes later.
local helper = require "helper"
local durable = require "durable"

describe("a completion", function()
  helper.each()

  it("chains values and completions through :next", function()
    local mesh = helper.open()
    local ns = helper.ns()
    local c = mesh:put_node { path = ns .. "/a", content = { n = 1 } }
      :next(function(node)
        return mesh:get_node(node.path) -- a completion: followed
      end)
      :next(function(node) return node.content.n + 1 end)
    assert.equal(2, helper.ok(c))
  end)

  it("fails the next completion when a continuation raises, and passes failures on", function()
    local c = durable.done(1):next(function() error("continuation broke") end)
    local v, message, code = c:wait()
    assert.is_nil(v)
    assert.matches("continuation broke", message)
    assert.equal("EFAILED", code)
    assert.matches("stack traceback", c.traceback)
    -- no on_fail: the failure passes through untouched
    local _, m2, code2 = c:next(function() return "not reached" end):wait()
    assert.equal(message, m2)
    assert.equal("EFAILED", code2)
    -- on_fail recovers
    assert.equal("recovered ENOTFOUND", durable.failed("gone", "ENOTFOUND")
      :next(nil, function(m, code3) return "recovered " .. code3 end):wait())
  end)

  it("waits with a timeout: nil, message, ETIMEDOUT", function()
    local mesh = helper.open()
    local c = durable.completion(mesh)
    local t0 = helper.now(mesh)
    local v, message, code = c:wait(50)
    assert.is_nil(v)
    assert.equal("timed out after 50 ms", message)
    assert.equal("ETIMEDOUT", code)
    assert.is_true(helper.now(mesh) - t0 >= 45)
  end)

  it("cannot be waited inside a handler (it raises there; the sender gets Failed)", function()
    local mesh = helper.open { plugins = { helper.fixture "hubs.lua" } }
    local ns = helper.ns()
    helper.ok(mesh:put_node { path = ns .. "/e", node_type = "Echo" })
    local client = mesh:hub("client/" .. ns)
    local message = helper.fails(client:request(ns .. "/e", "wait_inside"), "EFAILED")
    assert.matches("cannot be called inside a handler", message, 1, true)
    -- returning the completion instead works
    assert.same({}, helper.ok(client:request(ns .. "/e", "read_self")))
  end)

  it("starts a cold completion on its first :next or :wait, once", function()
    local runs = 0
    local c = durable.cold(nil, function()
      runs = runs + 1
      return durable.done(runs)
    end)
    assert.equal(0, runs)
    local seen
    c:next(function(v) seen = v end)
    assert.equal(1, runs)
    assert.equal(1, seen)
    assert.equal(1, c:wait())
    assert.equal(1, runs)
  end)

  it("gathers several with durable.all", function()
    local mesh = helper.open()
    local ns = helper.ns()
    local all = durable.all {
      mesh:put_node { path = ns .. "/a", content = { i = 1 } },
      mesh:put_node { path = ns .. "/b", content = { i = 2 } },
      3,
    }
    local values = helper.ok(all)
    assert.equal(ns .. "/a", values[1].path)
    assert.equal(ns .. "/b", values[2].path)
    assert.equal(3, values[3])
    assert.equal("ENOTFOUND", select(3, durable.all { durable.done(1), durable.failed("x", "ENOTFOUND") }:wait()))
  end)

  it("is misused loudly: wrong arguments raise, a mesh-less pending one cannot wait", function()
    assert.has_error(function() durable.done(1):next(42) end)
    assert.has_error(function() durable.done(1):wait(-1) end)
    assert.has_error(function() durable.completion():wait(10) end)
  end)
end)
