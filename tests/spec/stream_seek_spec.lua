-- stream_seek_spec.lua: an operator moves a stream's checkpoint
-- (mesh:seek_durable; `durable seek` in run_spec).  Back replays exactly the
-- items after it, forward skips, and the holder -- caught up and idle, or
-- not there at all -- claims again and resumes after the new checkpoint.
local helper = require "helper"
local durable = require "durable"
local probe = require "probe"

local FAMILY = probe.FAMILY

describe("seeking a durable stream", function()
  helper.each()

  local mesh, ns, client
  local function open()
    mesh = helper.open { plugins = {}, streams = probe.STREAMS }
    ns = helper.ns()
    client = mesh:hub("client/" .. ns)
  end
  local function stream(owner) return { namespace = FAMILY, key = owner } end
  local function publish(owner, i)
    assert.equal(i, helper.ok(client:publish_durable(stream(owner), { value = i })))
  end
  local function checkpoint(owner)
    return helper.ok(mesh:get_node((durable.stream_path(stream(owner))))).content.Checkpoint
  end
  local function consume(owner, handled)
    local hub = assert(mesh:hub("client/" .. ns .. "/consumer"))
    assert.is_true(hub:consume { namespace = FAMILY, key = function() return owner end,
      handler = function(_, item) handled[#handled + 1] = item.payload.value end })
    return hub
  end

  it("back replays exactly the items after it, to a consumer that was caught up", function()
    open()
    local owner = ns .. "/back"
    for i = 1, 5 do publish(owner, i) end
    local handled = {}
    consume(owner, handled)
    helper.run_until(mesh, function() return checkpoint(owner) == 5 end)
    assert.same({ 1, 2, 3, 4, 5 }, handled)
    assert.equal(5, helper.ok(mesh:seek_durable(stream(owner), 2)), "the checkpoint it was at")
    helper.run_until(mesh, function() return #handled == 8 and checkpoint(owner) == 5 end)
    assert.same({ 1, 2, 3, 4, 5, 3, 4, 5 }, handled)
    assert.equal(1, #helper.log_lines(FAMILY .. "@" .. owner .. ": checkpoint moved from 5 to 2"))
    publish(owner, 6) -- and on with the live tail, once each
    helper.run_until(mesh, function() return checkpoint(owner) == 6 end)
    assert.same({ 1, 2, 3, 4, 5, 3, 4, 5, 6 }, handled)
  end)

  it("forward skips, and the next consumer resumes after it", function()
    open()
    local owner = ns .. "/forward"
    for i = 1, 6 do publish(owner, i) end
    assert.equal(0, helper.ok(mesh:seek_durable(stream(owner), 4)))
    local handled = {}
    consume(owner, handled)
    helper.run_until(mesh, function() return checkpoint(owner) == 6 end)
    assert.same({ 5, 6 }, handled)
  end)

  it("refuses what cannot be, naming it, and changes nothing", function()
    open()
    local owner = ns .. "/bad"
    for i = 1, 3 do publish(owner, i) end
    local _, message, code = mesh:seek_durable(stream(owner), 4):wait()
    assert.equal("EINVAL", code)
    assert.matches("its items are 1 to 3", message)
    _, message, code = mesh:seek_durable(stream(ns .. "/nobody"), 0):wait()
    assert.equal("ENOTFOUND", code)
    assert.matches("does not exist", message)
    assert.has_error(function() mesh:seek_durable(stream(owner), -1) end)
    assert.has_error(function() mesh:seek_durable(stream(owner), 1.5) end)
    assert.has_error(function() mesh:seek_durable({ namespace = "a/b", key = owner }, 1) end)
    assert.equal(0, checkpoint(owner))
  end)
end)
