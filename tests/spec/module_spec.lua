-- module_spec.lua: the module itself: `require "durable"` from the stock
-- interpreter, the same module linked into `durable lua`, registry
-- references back to their baseline, and meshes that close however they
-- are let go (close, <close>, garbage collection).
local helper = require "helper"
local durable = require "durable"
local core = require "durable.core"

local q = helper.quote
local BIN = os.getenv("DURABLE_BIN") or helper.BUILD .. "/durable"
local SCRIPT = helper.fixture "script.lua"

describe("the durable module", function()
  helper.each()

  it("is required from plain lua5.4 with LUA_PATH and LUA_CPATH", function()
    local ns = helper.ns()
    -- DURABLE_TEST_LUA: how tests/run.sh starts the stock interpreter (with
    -- the sanitizer runtime preloaded when the build is sanitized)
    local lua = os.getenv("DURABLE_TEST_LUA") or "lua5.4"
    local code, out, err = helper.sh(("LUA_PATH=%s LUA_CPATH=%s %s %s %s %s x y"):format(
      q "lua/?.lua;lua/?/init.lua", q(helper.BUILD .. "/lua/?.so"), lua, q(SCRIPT), q(helper.store()), q(ns)))
    assert.equal(0, code, err)
    assert.equal(("node %s/a n=4 args=x,y\nrefs 0\n"):format(ns), out)
  end)

  it("is linked into the durable command: durable lua SCRIPT ARGS", function()
    local ns = helper.ns()
    local code, out, err = helper.sh(("%s --store %s lua %s - %s --flag y"):format(
      q(BIN), q(helper.store()), q(SCRIPT), q(ns)))
    assert.equal(0, code, err)
    assert.equal(("node %s/a n=4 args=--flag,y\nrefs 0\n"):format(ns), out)
  end)

  it("makes durable lua fail with the error and its traceback when the script raises", function()
    local bad = helper.tmpname(".lua")
    local f = assert(io.open(bad, "w"))
    f:write('local durable = require "durable"\nerror("script broke")\n')
    f:close()
    local code, out, err = helper.sh(("%s lua %s"):format(q(BIN), q(bad)))
    assert.equal(1, code)
    assert.equal("", out)
    assert.matches("durable: lua: .*:2: script broke", err)
    assert.matches("stack traceback", err, 1, true)
    code, _, err = helper.sh(("%s lua"):format(q(BIN)))
    assert.equal(2, code)
    assert.matches("a script is needed", err, 1, true)
  end)

  it("returns from run_until after its timeout in a process where nothing else happens", function()
    -- Many short waits, each starting a little late: a wait whose timer was
    -- due before the loop polled once made the poll wait for ever.
    local script = helper.tmpname(".lua")
    local f = assert(io.open(script, "w"))
    f:write([[
local durable = require "durable"
local mesh = assert(durable.open{ store = "sqlite::memory:" })
for _ = 1, 2000 do
  local t = os.clock()
  while os.clock() - t < 0.0003 do end
  assert(not mesh:run_until(function() return false end, 1))
end
mesh:close()
print("ok")
]])
    f:close()
    local code, out, err = helper.sh(("timeout 60 %s lua %s"):format(q(BIN), q(script)))
    assert.equal(0, code, "exit " .. tostring(code) .. " (124: it hung): " .. err)
    assert.equal("ok\n", out)
  end)

  it("gives every registry reference back", function()
    local before = core.refs()
    local mesh = helper.open { plugins = { helper.fixture "hubs.lua" } }
    local ns = helper.ns()
    assert.is_true(core.refs() > before, "handlers hold references while the mesh is open")
    helper.ok(mesh:put_node { path = ns .. "/e", node_type = "Echo" })
    local client = mesh:hub("client/" .. ns)
    local pending = {}
    for i = 1, 20 do pending[i] = client:request(ns .. "/e", "echo", i) end
    helper.ok(durable.all(pending))
    helper.fails(client:request(ns .. "/nobody", "x"), "ENOTFOUND")
    mesh:close()
    assert.equal(before, core.refs())
    mesh:close() -- idempotent
    assert.has_error(function() mesh:put_node { path = ns .. "/x" } end, "the mesh is closed")
  end)

  it("closes a mesh at the end of a <close> scope and when it is collected", function()
    do
      local mesh <close> = assert(durable.open { store = helper.store() })
      assert.equal(1, core.meshes())
    end
    assert.equal(0, core.meshes())
    local mesh = assert(durable.open { store = helper.store() })
    local hub = mesh:hub("client/gc")
    helper.ok(mesh:put_node { path = helper.ns() .. "/x" })
    assert.equal(1, core.meshes())
    mesh, hub = nil, nil
    collectgarbage()
    collectgarbage()
    assert.equal(0, core.meshes())
  end)

  it("keeps a released hub from being used", function()
    local mesh = helper.open()
    local address = "client/" .. helper.ns()
    local hub = mesh:hub(address)
    hub:release()
    hub:release()
    assert.has_error(function() hub:post("x/y", "t") end, "the hub was released")
    local again = mesh:hub(address) -- a fresh object on the same C hub
    assert.are_not.equal(hub, again)
    assert.equal(address, again.address)
  end)
end)
