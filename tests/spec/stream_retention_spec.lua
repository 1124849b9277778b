-- stream_retention_spec.lua: how long a stream keeps its acknowledged items
-- (a consumer's `retention`, an operator's mesh:set_retention; `durable
-- retention` in run_spec).  Only acknowledged items ever go, in order from
-- the oldest, under a running producer and consumer; a count keeps the
-- newest N, 0 none, a duration ages items out with no new acknowledgement;
-- an operator's policy wins over the declared one until cleared; a
-- consumer with a source never deletes the source's nodes.
local helper = require "helper"
local durable = require "durable"
local probe = require "probe"

describe("retention of a durable stream", function()
  helper.each()

  local mesh, ns, client, family
  local function open()
    mesh = helper.open { plugins = {}, streams = probe.STREAMS }
    ns = helper.ns()
    client = mesh:hub("client/" .. ns)
    -- a family of its own: an operator's policy is kept in the store
    family = "Kept" .. ns:gsub("%W", "")
  end
  local function stream(owner) return { namespace = family, key = owner } end
  local function state(owner)
    local node = helper.ok(mesh:get_node((durable.stream_path(stream(owner)))))
    return node and node.content
  end
  local function kept(owner) return probe.kept(mesh, stream(owner)) end
  local range = probe.range
  local function consume(owner, retention, handler)
    local hub = assert(mesh:hub("client/" .. ns .. "/consumer-" .. owner:gsub("%W", "")))
    assert.is_true(hub:consume { namespace = family, key = function() return owner end,
      retention = retention, handler = handler or function() end })
    return hub
  end
  local function publish(owner, from, to)
    local pending = {}
    for i = from, to do pending[#pending + 1] = client:publish_durable(stream(owner), { value = i }) end
    for _, c in ipairs(pending) do helper.ok(c) end
  end

  it("0 deletes each item once acknowledged, under a running producer, and never one that is not",
    function()
      open()
      local owner = ns .. "/zero"
      local handled = {}
      -- (a consumer starts on a stream that exists: its wake goes to owners)
      publish(owner, 1, 10)
      -- item 45 fails for ever: it and everything after it stay
      consume(owner, 0, function(_, item)
        if item.payload.value == 45 then durable.fail("EINVAL", "not this one") end
        handled[#handled + 1] = item.payload.value
      end)
      for round = 1, 4 do publish(owner, round * 10 + 1, round * 10 + 10) end
      helper.run_until(mesh, function() return #handled == 50 or #handled == 44 end, 10000)
      publish(owner, 51, 60)
      helper.run_until(mesh, function()
        return state(owner).Checkpoint == 44 and #kept(owner) == 16
      end, 10000)
      assert.same(range(1, 44), handled, "in order, each once")
      assert.same(range(45, 60), kept(owner), "the unacknowledged stay")
      assert.equal(44, state(owner).TrimmedThrough)
    end)

  it("N keeps the newest N acknowledged items", function()
    open()
    local owner = ns .. "/count"
    local handled = 0
    publish(owner, 1, 10)
    consume(owner, 3, function() handled = handled + 1 end)
    helper.run_until(mesh, function() return handled == 10 and #kept(owner) == 3 end, 10000)
    assert.same({ 8, 9, 10 }, kept(owner))
    publish(owner, 11, 12)
    helper.run_until(mesh, function() return #kept(owner) == 3 and kept(owner)[1] == 10 end, 10000)
    assert.same({ 10, 11, 12 }, kept(owner))
  end)

  it("a duration ages acknowledged items out, with no new acknowledgement", function()
    open()
    local owner = ns .. "/age"
    local handled = 0
    publish(owner, 1, 4)
    consume(owner, "600ms", function() handled = handled + 1 end)
    helper.run_until(mesh, function() return handled == 4 end)
    mesh:run_until(function() return false end, 200)
    assert.same({ 1, 2, 3, 4 }, kept(owner), "young: kept")
    helper.run_until(mesh, function() return #kept(owner) == 0 end, 5000)
    assert.equal(4, state(owner).TrimmedThrough)
  end)

  it("an operator's policy for the family wins over the declared one until it is cleared",
    function()
      open()
      local owner = ns .. "/operator"
      local handled = 0
      publish(owner, 1, 5)
      consume(owner, nil, function() handled = handled + 1 end) -- declares all
      helper.run_until(mesh, function() return handled == 5 end)
      mesh:run_until(function() return false end, 400)
      assert.same(range(1, 5), kept(owner), "all: nothing goes")
      assert.is_true(helper.ok(mesh:set_retention(family, 2)))
      publish(owner, 6, 6)
      helper.run_until(mesh, function() return #kept(owner) == 2 end, 5000)
      assert.same({ 5, 6 }, kept(owner))
      assert.is_true(helper.ok(mesh:set_retention(family, nil)))
      publish(owner, 7, 8)
      helper.run_until(mesh, function() return handled == 8 end)
      mesh:run_until(function() return false end, 400)
      assert.same({ 5, 6, 7, 8 }, kept(owner), "cleared: all again")
      assert.has_error(function() mesh:set_retention(family, "soon") end)
      assert.has_error(function() mesh:set_retention(family, -1) end)
      assert.has_error(function() mesh:set_retention("a/b", 1) end)
      assert.has_error(function() mesh:set_retention("", 1) end)
    end)

  it("a sooner policy is not kept waiting by a far-off duration's timer", function()
    open()
    local owner = ns .. "/far"
    local handled = 0
    publish(owner, 1, 3)
    consume(owner, "1h", function() handled = handled + 1 end)
    helper.run_until(mesh, function() return handled == 3 end)
    mesh:run_until(function() return false end, 400) -- the hour's timer is armed
    assert.same({ 1, 2, 3 }, kept(owner))
    assert.is_true(helper.ok(mesh:set_retention(family, 0)))
    -- an idle stream: no new acknowledgement, the new policy applies
    helper.run_until(mesh, function() return #kept(owner) == 0 end, 5000)
    assert.is_true(helper.ok(mesh:set_retention(family, nil)))
  end)

  it("sweeps a stream deleted and made anew from its new start", function()
    open()
    local owner = ns .. "/anew"
    local handled = 0
    publish(owner, 1, 10)
    consume(owner, 0, function() handled = handled + 1 end)
    helper.run_until(mesh, function() return handled == 10 and #kept(owner) == 0 end, 10000)
    assert.equal(0, helper.ok(mesh:delete_durable(stream(owner), { force = true })))
    publish(owner, 1, 3)
    helper.run_until(mesh, function() return handled == 13 and #kept(owner) == 0 end, 10000)
    assert.equal(3, state(owner).TrimmedThrough)
  end)

  it("with a source never deletes the source's nodes", function()
    open()
    local owner = ns .. "/doc"
    for i = 0, 2 do
      helper.ok(mesh:put_node { path = ("%s/_DocumentPart/%06d"):format(owner, i), content = { i = i } })
    end
    local path = durable.stream_path(stream(owner))
    helper.ok(mesh:put_node { path = path, node_type = "DurableStream",
      content = { Namespace = family, Key = owner } })
    local handled = 0
    local hub = assert(mesh:hub("client/" .. ns .. "/parts"))
    assert.is_true(hub:consume { namespace = family, key = function() return owner end,
      source = function() return durable.document_parts(owner) end, retention = 0,
      handler = function() handled = handled + 1 end })
    helper.run_until(mesh, function() return handled == 3 and state(owner).Checkpoint == 3 end)
    mesh:run_until(function() return false end, 400)
    assert.equal(3, #helper.ok(mesh:query("namespace:" .. owner .. "/_DocumentPart")))
    assert.is_nil(state(owner).TrimmedThrough)
  end)

  it("refuses what is not a policy where the consumer is declared", function()
    open()
    local hub = assert(mesh:hub("client/" .. ns .. "/bad"))
    for _, bad in ipairs { "soon", "7 days", -1, "-3d", 1.5, true, "0s" } do
      local ok, message = pcall(hub.consume, hub, { namespace = family, retention = bad,
        key = function() return ns end, handler = function() end })
      assert.is_false(ok, tostring(bad))
      assert.matches("retention", message)
    end
    local ok, message = pcall(hub.consume, hub, { namespace = family, retention = "soon",
      key = function() return ns end, handler = function() end })
    assert.is_false(ok)
    assert.matches("'soon' is not a retention policy: say all, a number of acknowledged items", message)
  end)
end)
