-- stream_trim_spec.lua: an operator trims a stream (mesh:trim_durable;
-- `durable trim` in run_spec).  Acknowledged items go, oldest first, while
-- producers and the consumer go on; nothing unacknowledged is ever
-- deleted unless forced; a reader asking for a trimmed item is told so.
local helper = require "helper"
local durable = require "durable"
local probe = require "probe"

local FAMILY = probe.FAMILY

describe("trimming a durable stream", function()
  helper.each()

  local mesh, ns, client
  local function open()
    mesh = helper.open { plugins = {}, streams = probe.STREAMS }
    ns = helper.ns()
    client = mesh:hub("client/" .. ns)
  end
  local function stream(owner) return { namespace = FAMILY, key = owner } end
  local function state(owner)
    return helper.ok(mesh:get_node((durable.stream_path(stream(owner))))).content
  end
  local function kept(owner) return probe.kept(mesh, stream(owner)) end

  it("under a running producer and consumer deletes only what was acknowledged, and loses "
    .. "nothing", function()
    open()
    local owner = ns .. "/live"
    local handled = {}
    local hub = assert(mesh:hub("client/" .. ns .. "/consumer"))
    helper.ok(client:publish_durable(stream(owner), { value = 1 }))
    assert.is_true(hub:consume { namespace = FAMILY, key = function() return owner end,
      handler = function(_, item) handled[#handled + 1] = item.payload.value end })
    local next_value, trims = 2, {}
    for _ = 1, 5 do
      local pending = {}
      for _ = 1, 10 do
        pending[#pending + 1] = client:publish_durable(stream(owner), { value = next_value })
        next_value = next_value + 1
      end
      local through = state(owner).Checkpoint
      if through > 0 then
        local c = mesh:trim_durable(stream(owner), through)
        pending[#pending + 1] = c
        trims[#trims + 1] = through
      end
      for _, c in ipairs(pending) do helper.ok(c) end
    end
    helper.run_until(mesh, function() return #handled == next_value - 1 end, 10000)
    for i = 1, next_value - 1 do assert.equal(i, handled[i], "in order, each once") end
    local last_trim = trims[#trims]
    assert.equal(last_trim, state(owner).TrimmedThrough)
    local left = kept(owner)
    assert.equal(last_trim + 1, left[1], "the oldest kept follows the last trim")
    assert.equal(next_value - 1 - last_trim, #left)
  end)

  it("refuses to pass the checkpoint unless forced; forced, the consumer skips to it", function()
    open()
    local owner = ns .. "/force"
    for i = 1, 6 do helper.ok(client:publish_durable(stream(owner), { value = i })) end
    local _, message, code = mesh:trim_durable(stream(owner), 3):wait()
    assert.equal("EINVAL", code)
    assert.matches("item 1 is not acknowledged %(checkpoint 0%)", message)
    assert.same({ 1, 2, 3, 4, 5, 6 }, kept(owner), "nothing deleted")
    assert.equal(4, helper.ok(mesh:trim_durable(stream(owner), 4, { force = true })))
    assert.same({ 5, 6 }, kept(owner))
    assert.equal(4, state(owner).Checkpoint)
    local handled = {}
    local hub = assert(mesh:hub("client/" .. ns .. "/consumer"))
    assert.is_true(hub:consume { namespace = FAMILY, key = function() return owner end,
      handler = function(_, item) handled[#handled + 1] = item.payload.value end })
    helper.run_until(mesh, function() return state(owner).Checkpoint == 6 end)
    assert.same({ 5, 6 }, handled)
    _, message, code = mesh:trim_durable(stream(owner), 7, { force = true }):wait()
    assert.equal("EINVAL", code)
    assert.matches("its items are 1 to 6", message)
    assert.has_error(function() mesh:trim_durable(stream(owner), 0) end)
    assert.has_error(function() mesh:trim_durable(stream(owner), 1, { forse = true }) end)
  end)

  it("is kept by the holder's later writes, from another process's mesh too; no seek goes "
    .. "below it", function()
    local url = helper.store()
    if url == "sqlite::memory:" then return pending("two meshes need one store") end
    mesh = helper.open { store = url, plugins = {}, streams = probe.STREAMS }
    ns = helper.ns()
    client = mesh:hub("client/" .. ns)
    local operator = helper.open { store = url, plugins = {}, streams = probe.STREAMS }
    local owner = ns .. "/kept"
    for i = 1, 5 do helper.ok(client:publish_durable(stream(owner), { value = i })) end
    local handled = {}
    local hub = assert(mesh:hub("client/" .. ns .. "/consumer"))
    assert.is_true(hub:consume { namespace = FAMILY, key = function() return owner end,
      handler = function(_, item) handled[#handled + 1] = item.sequence end })
    helper.run_until(mesh, function() return state(owner).Checkpoint == 5 end)
    -- the operator's mesh trims; the holder's mesh, its state read before,
    -- appends and acknowledges on
    assert.equal(3, helper.ok(operator:trim_durable(stream(owner), 3)))
    helper.ok(operator:hub("client/" .. ns .. "/operator"):publish_durable(stream(owner), { value = 6 }))
    helper.run_until(mesh, function() return state(owner).Checkpoint == 6 end)
    assert.equal(3, state(owner).TrimmedThrough)
    local _, message, code = operator:seek_durable(stream(owner), 2):wait()
    assert.equal("EINVAL", code)
    assert.matches("items up to 3 were trimmed", message)
    assert.equal(6, helper.ok(operator:seek_durable(stream(owner), 3)), "the checkpoint it was at")
  end)

  it("tells a reader that asks for a trimmed item so, and reads from the oldest kept", function()
    open()
    local owner = ns .. "/reader"
    local done = {}
    for i = 1, 5 do helper.ok(client:publish_durable(stream(owner), { value = i })) end
    local hub = assert(mesh:hub("client/" .. ns .. "/consumer"))
    assert.is_true(hub:consume { namespace = FAMILY, key = function() return owner end,
      handler = function(_, item) done[#done + 1] = item.sequence end })
    helper.run_until(mesh, function() return state(owner).Checkpoint == 5 end)
    assert.equal(3, helper.ok(mesh:trim_durable(stream(owner), 3)))
    for _, after in ipairs { 0, 2 } do
      local errors, got = {}, {}
      local sub = client:read_durable(stream(owner), after, function(item) got[#got + 1] = item.sequence end,
        nil, function(message) errors[#errors + 1] = message end)
      helper.run_until(mesh, function() return #errors == 1 end)
      assert.same({}, got)
      assert.matches("items up to 3 were trimmed, so item " .. (after + 1) .. " is not there", errors[1])
      assert.equal("failed", (sub:status()))
    end
    local got = {}
    client:read_durable(stream(owner), 3, function(item) got[#got + 1] = item.sequence end)
    helper.run_until(mesh, function() return #got == 2 end)
    assert.same({ 4, 5 }, got)
    -- everything trimmed: a reader from the start is told so too
    assert.equal(2, helper.ok(mesh:trim_durable(stream(owner), 5)))
    local errors = {}
    client:read_durable(stream(owner), 0, function() end, nil,
      function(message) errors[#errors + 1] = message end)
    helper.run_until(mesh, function() return #errors == 1 end)
    assert.matches("items up to 5 were trimmed", errors[1])
  end)
end)
