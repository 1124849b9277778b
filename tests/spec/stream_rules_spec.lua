-- stream_rules_spec.lua: rules of durable streams that only show in their
-- order or their absence.  The next item is handed over only once the previous
-- acknowledgement is saved; a dormant consumer claims nothing and arms no
-- timer; a producer whose stream node refused an append (it vanished
-- behind the producer's directory) ensures the stream and resends, once.
local helper = require "helper"
local durable = require "durable"
local probe = require "probe"

local FAMILY = probe.FAMILY

describe("the rules of a durable stream", function()
  helper.each()

  local mesh, ns, client
  local function open()
    mesh = helper.open { plugins = {}, streams = probe.STREAMS }
    ns = helper.ns()
    client = mesh:hub("client/" .. ns)
  end
  local function stream(owner) return { namespace = FAMILY, key = owner } end

  it("hands the next item over only once the previous acknowledgement is saved", function()
    open()
    local owner = ns .. "/order"
    local path = durable.stream_path(stream(owner))
    for i = 1, 20 do helper.ok(client:publish_durable(stream(owner), { value = i })) end
    local seen = {}
    local hub = assert(mesh:hub("client/" .. ns .. "/consumer"))
    assert.is_true(hub:consume { namespace = FAMILY, key = function() return owner end,
      handler = function(h, item)
        -- read from the store, not from any cache: item N may start only
        -- after checkpoint N - 1 is committed
        local node = assert(h:get_node(path):await())
        seen[#seen + 1] = ("%d after %d"):format(item.sequence, node.content.Checkpoint)
      end })
    helper.run_until(mesh, function() return #seen == 20 end, 10000)
    for i = 1, 20 do assert.equal(("%d after %d"):format(i, i - 1), seen[i]) end
  end)

  it("keeps a dormant consumer from claiming or arming a timer", function()
    open()
    local owner = ns .. "/dormant"
    local path = durable.stream_path(stream(owner))
    local hub = assert(mesh:hub("client/" .. ns .. "/consumer"))
    assert.is_true(hub:consume { namespace = FAMILY, key = function() return owner end,
      handler = function() end })
    mesh:run_until(function() return false end, 300) -- it looked: no stream
    local before = mesh:stats().messages
    -- several reclaim periods (400 ms) and backoffs: nothing happens
    mesh:run_until(function() return false end, 1500)
    assert.equal(before, mesh:stats().messages, "no timer fired, no claim was sent")
    assert.same({}, helper.log_lines("lease granted"))
    assert.equal(0, #helper.ok(mesh:query("path:" .. path)), "and no stream was made")
  end)

  it("resends an append once after its stream node refused it, having ensured the stream",
    function()
      open()
      local owner = ns .. "/resend"
      local path = durable.stream_path(stream(owner))
      assert.equal(1, helper.ok(client:publish_durable(stream(owner), { value = 1 })))
      -- the stream node vanishes behind this process's directory
      helper.ok(mesh:delete_node(path))
      mesh:recycle(path)
      assert.equal(2, helper.ok(client:publish_durable(stream(owner), { value = 2 })),
        "the item after the highest stored one")
      local lines = helper.log_lines("ensuring it exists and resending once")
      assert.equal(1, #lines)
      assert.matches("refused durable.append", lines[1], 1, true)
      assert.truthy(helper.ok(mesh:get_node(path)), "made again")
    end)
end)
