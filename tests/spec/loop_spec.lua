-- loop_spec.lua: where Lua runs relative to the mesh's libuv loop, and how
-- another loop drives a mesh.
--
--   * Results of the store (get, query, write), of activate / recycle /
--     read, of publish, and a reader's items are delivered as turns: after
--     uv_run of the mesh's loop returned, never inside the store's libuv
--     callback.  core._inside_uv_run(mesh) says whether uv_run is on the C
--     stack; a message handler (a turn of the runtime, inside the loop)
--     sees true, which shows the probe can tell.
--   * They arrive in order, and a mesh closed with results still owed
--     delivers them and lets their references go.
--   * mesh:fd() / mesh:step() / mesh:timeout(): any loop can drive a mesh;
--     luv's (lua-luv) does here, with no :wait() at all.
local helper = require "helper"
local durable = require "durable"
local core = require "durable.core"

local FIXTURE = helper.fixture "loop.lua"

describe("Lua entered from the mesh's loop", function()
  helper.each()

  local mesh, ns
  before_each(function()
    mesh = helper.open { plugins = { FIXTURE } }
    ns = helper.ns()
  end)

  -- `start(cb)` issues something whose callback records whether it ran
  -- inside uv_run; wait for it and return that.
  local function inside(make)
    local seen
    local c = make():next(function(v)
      seen = core._inside_uv_run(mesh)
      return v
    end, function(message)
      seen = core._inside_uv_run(mesh)
      error(message, 0)
    end)
    c:wait(5000)
    assert.is_not_nil(seen, "the callback ran")
    return seen
  end

  it("runs a message handler inside uv_run (a turn of the runtime): the probe can tell", function()
    helper.ok(mesh:put_node { path = ns .. "/p", node_type = "LoopProbe" })
    local client = mesh:hub("client/" .. ns)
    assert.is_true(helper.ok(client:request(ns .. "/p", "where")).inside)
  end)

  it("delivers store results after uv_run returned, never inside the store's callback", function()
    local path = ns .. "/n"
    assert.is_false(inside(function() return mesh:put_node { path = path, content = { a = 1 } } end))
    assert.is_false(inside(function() return mesh:get_node(path) end))
    assert.is_false(inside(function() return mesh:query("namespace:" .. ns) end))
    assert.is_false(inside(function() return mesh:update_node(path, function(n) return n end) end))
    assert.is_false(inside(function() return mesh:delete_node(path) end))
    assert.is_false(inside(function() return mesh:get_node(ns .. "/none") end))
  end)

  it("delivers activate, recycle, read and publish results after uv_run returned", function()
    local path = ns .. "/p"
    helper.ok(mesh:put_node { path = path, node_type = "LoopProbe" })
    assert.is_false(inside(function() return mesh:read(path) end))
    assert.is_false(inside(function() return mesh:recycle(path) end))
    assert.is_false(inside(function()
      return require("durable.completion").from(mesh, function(cb)
        return core.primitives.mesh.activate(mesh, path, cb)
      end)
    end))
    local client = mesh:hub("client/" .. ns)
    assert.is_false(inside(function()
      return client:publish_durable({ namespace = "LoopLog", key = path }, { n = 1 })
    end))
  end)

  it("finishes a handler's reply from a store result delivered after uv_run", function()
    local path = ns .. "/p"
    helper.ok(mesh:put_node { path = path, node_type = "LoopProbe" })
    local client = mesh:hub("client/" .. ns)
    local answer = helper.ok(client:request(path, "read", { path = path }))
    assert.same({ inside = false, found = true }, answer)
  end)

  it("delivers a reader's items after uv_run returned, in order", function()
    local owner = ns .. "/owner"
    local client = mesh:hub("client/" .. ns)
    local stream = { namespace = "LoopLog", key = owner }
    for i = 1, 5 do helper.ok(client:publish_durable(stream, { n = i })) end
    local got, insides = {}, {}
    local sub = client:read_durable(stream, 0, function(item)
      got[#got + 1] = item.sequence
      insides[#insides + 1] = core._inside_uv_run(mesh)
    end)
    helper.run_until(mesh, function() return #got == 5 end)
    helper.ok(client:publish_durable(stream, { n = 6 })) -- the live tail, through the watch
    helper.run_until(mesh, function() return #got == 6 end)
    sub:close()
    assert.same({ 1, 2, 3, 4, 5, 6 }, got)
    for i, v in ipairs(insides) do assert.is_false(v, "item " .. i .. " inside uv_run") end
  end)

  it("delivers no reader item after :close(), even one already queued", function()
    local owner = ns .. "/owner"
    local client = mesh:hub("client/" .. ns)
    local stream = { namespace = "LoopLog", key = owner }
    for i = 1, 3 do helper.ok(client:publish_durable(stream, { n = i })) end
    local got, sub = {}, nil
    sub = client:read_durable(stream, 0, function(item)
      got[#got + 1] = item.sequence
      sub:close() -- the others may be queued behind this one already
    end)
    helper.run_until(mesh, function() return #got > 0 end)
    mesh:run_until(function() return false end, 200)
    assert.same({ 1 }, got)
    assert.equal("closed", sub:status())
  end)

  it("keeps the order in which the store answered: writes issued together settle in order", function()
    local order = {}
    local all = {}
    for i = 1, 20 do
      all[i] = mesh:put_node { path = ns .. "/w" .. i, content = { i = i } }
          :next(function() order[#order + 1] = i end)
    end
    helper.ok(durable.all(all))
    local want = {}
    for i = 1, 20 do want[i] = i end
    assert.same(want, order)
  end)

  it("delivers results still owed when the mesh closes, and lets every reference go", function()
    helper.ok(mesh:put_node { path = ns .. "/a", content = {} })
    local settled = {}
    for i = 1, 5 do
      mesh:get_node(ns .. "/a"):next(function(node)
        settled[#settled + 1] = { ok = true, found = node ~= nil }
      end, function(_, code) settled[#settled + 1] = { ok = false, code = code } end)
    end
    mesh:put_node { path = ns .. "/b", content = {} }:next(function()
      settled[#settled + 1] = { ok = true, write = true }
    end, function(_, code) settled[#settled + 1] = { ok = false, code = code } end)
    mesh:close() -- no wait: the close delivers them
    assert.equal(6, #settled)
    for _, s in ipairs(settled) do
      assert.is_true(s.ok or s.code == "ESHUTDOWN", "settled ok or ESHUTDOWN")
    end
    -- helper.each checks core.refs() is back to its baseline
  end)
end)

describe("a mesh driven by another loop", function()
  helper.each()

  it("gives its loop's file descriptor and a step that does not block", function()
    local mesh = helper.open {}
    local fd = mesh:fd()
    assert.is_true(math.type(fd) == "integer" and fd >= 0)
    local t = mesh:timeout()
    assert.is_true(math.type(t) == "integer" and t >= -1)
    local started = os.clock()
    for _ = 1, 20 do mesh:step() end -- nothing due: returns at once each time
    assert.is_true(os.clock() - started < 0.5)
    -- a result gets delivered by steps alone
    local c = mesh:put_node { path = helper.ns() .. "/s", content = { x = 1 } }
    local deadline = helper.now(mesh) + 5000
    while c.state == "pending" and helper.now(mesh) < deadline do mesh:step() end
    assert.equal("ok", c.state)
  end)

  it("refuses a step inside a callback, and a 'loop' option with a pointer to the fd way", function()
    local mesh = helper.open {}
    local err
    helper.ok(mesh:put_node { path = helper.ns() .. "/s" }:next(function()
      err = select(2, pcall(mesh.step, mesh))
    end))
    assert.matches("mesh:step%(%) cannot run inside a handler or a callback", err)
    assert.has_error(function() durable.open { loop = {} } end,
      "durable.open: there is no 'loop' option: a mesh runs on a libuv loop of its own; "
      .. "drive it from luv (or any loop) with mesh:fd() and mesh:step() (see lua/README.md)")
  end)

  it("runs on luv's loop beside a luv timer, with no :wait()", function()
    local has_luv, uv = pcall(require, "luv")
    if not has_luv then return pending("needs lua-luv (tests/support/setup.sh installs it)") end
    local mesh = helper.open { plugins = { FIXTURE } }
    local ns = helper.ns()
    local path = ns .. "/p"
    helper.ok(mesh:put_node { path = path, node_type = "LoopProbe" })
    local client = mesh:hub("client/" .. ns)

    local stop = durable.drive_with_luv(mesh, uv)
    local ticks, answers, failure = 0, {}, nil
    local timer = uv.new_timer()
    local guard = uv.new_timer()
    local function finish()
      timer:close()
      guard:close()
      stop()
    end
    timer:start(5, 5, function()
      ticks = ticks + 1
      if ticks > 5 then return end
      client:request(path, "read", { path = path }):next(function(v)
        answers[#answers + 1] = v
        if #answers == 5 then finish() end
      end, function(message)
        failure = message
        finish()
      end)
    end)
    guard:start(5000, 0, function()
      failure = "timed out"
      finish()
    end)
    uv.run()
    assert.is_nil(failure)
    assert.equal(5, #answers)
    for _, a in ipairs(answers) do assert.same({ inside = false, found = true }, a) end
  end)
end)

describe("mesh:run_until", function()
  helper.each()

  -- the waits, in ms (-1: no limit), that mesh:run_until and :wait() give
  -- each turn of the loop while `fn` runs
  local function waits_of(fn)
    local step, waits = core.primitives.mesh.step, {}
    core.primitives.mesh.step = function(m, ms)
      waits[#waits + 1] = ms or -1
      return step(m, ms)
    end
    local ok, err = pcall(fn)
    core.primitives.mesh.step = step
    assert(ok, err)
    return waits
  end

  it("polls after a predicate that ran the loop itself, rather than wait for an event it took", function()
    local mesh = helper.open {}
    local path = helper.ns() .. "/n"
    local calls = 0
    local waits = waits_of(function()
      assert.is_true(mesh:run_until(function()
        calls = calls + 1
        -- a read waited for inside: its turns may take what the loop was
        -- to be woken by
        if calls == 1 then assert.is_nil(helper.ok(mesh:get_node(path))) end
        return calls == 2
      end, 60000))
    end)
    assert.equal(2, calls)
    assert.is_true(#waits >= 2, "the read ran no turn")
    assert.equal(0, waits[#waits]) -- the turn after the predicate: a poll
    -- a predicate that runs nothing still lets each turn wait, up to the limit
    waits = waits_of(function()
      assert.is_nil(mesh:run_until(function() return false end, 300))
    end)
    assert.is_true(waits[1] > 0, "the first turn waited " .. waits[1] .. " ms")
  end)
end)
