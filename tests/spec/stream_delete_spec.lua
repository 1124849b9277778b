-- stream_delete_spec.lua: an operator deletes a stream (mesh:delete_durable;
-- `durable delete-stream` in run_spec).  Its node, items and publish ids
-- go; a stream held by a consumer is refused unless forced, and forced, the
-- holder is fenced and waits; a later publish makes a new stream from
-- sequence 1, also from another process whose stream hub knew the old one;
-- a delete cut off half-way refuses publishes, saying so, and is finished
-- by deleting again.
local helper = require "helper"
local durable = require "durable"
local probe = require "probe"

local FAMILY = probe.FAMILY

describe("deleting a durable stream", function()
  helper.each()

  local mesh, ns, client
  local function open(store)
    mesh = helper.open { store = store, plugins = { probe.FIXTURE }, streams = probe.STREAMS }
    ns = helper.ns()
    client = mesh:hub("client/" .. ns)
    local delay = ns .. "/delay"
    helper.ok(mesh:put_node { path = delay, node_type = "StreamDelay" })
    probe.reset(delay, 2)
  end
  local function stream(owner) return { namespace = FAMILY, key = owner } end
  local function node(m, owner)
    return helper.ok(m:get_node((durable.stream_path(stream(owner)))))
  end
  local function children(m, namespace)
    local ids = {}
    for _, n in ipairs(helper.ok(m:query("namespace:" .. namespace))) do ids[#ids + 1] = n.id end
    return ids
  end
  local function items(m, owner)
    local _, items_ns = durable.stream_path(stream(owner))
    return children(m, items_ns)
  end
  local function ids(m, owner)
    return children(m, (durable.stream_path(stream(owner))) .. "/_DurableStreamId")
  end

  it("is refused under its consumer unless forced; forced, the consumer waits and handles "
    .. "the new stream from sequence 1", function()
    open()
    local owner = ns .. "/held"
    -- the owner consumes its stream (probe.handle: value == sequence)
    helper.ok(mesh:put_node { path = owner, node_type = "DurableStreamConsumerProbe" })
    for i = 1, 3 do
      helper.ok(client:publish_durable(stream(owner), { value = i }, { id = "order-" .. i }))
    end
    helper.run_until(mesh, function() return node(mesh, owner).content.Checkpoint == 3 end)

    local _, message, code = mesh:delete_durable(stream(owner)):wait()
    assert.equal("ECONFLICT", code)
    assert.matches("is held by " .. owner:gsub("%p", "%%%0"), message)
    assert.matches("needs force", message)
    assert.same({ "000000000001", "000000000002", "000000000003" }, items(mesh, owner),
      "nothing deleted")

    assert.equal(3, helper.ok(mesh:delete_durable(stream(owner), { force = true })))
    assert.is_nil(node(mesh, owner), "the stream node is gone")
    assert.same({}, items(mesh, owner))
    assert.same({}, ids(mesh, owner), "its publish ids are gone")
    assert.equal(1, #helper.log_lines("is being deleted (durable delete-stream): it cannot be claimed"),
      "the fenced holder claimed again and was told")

    -- a publish id used before is new again: a new item, sequence 1
    assert.equal(1, helper.ok(client:publish_durable(stream(owner), { value = 1 }, { id = "order-1" })))
    assert.equal(2, helper.ok(client:publish_durable(stream(owner), { value = 2 })))
    helper.run_until(mesh, function() return #probe.of(owner) == 5 end, 10000)
    assert.same({ 1, 2, 3, 1, 2 }, probe.snapshot(owner))
    assert.same({}, probe.violations)
    helper.run_until(mesh, function() return node(mesh, owner).content.Checkpoint == 2 end)
  end)

  it("is seen by another process's producer, whose stream hub knew the old stream", function()
    local url = helper.store()
    if url == "sqlite::memory:" then return pending("two meshes need one store") end
    open(url)
    local operator = helper.open { store = url, plugins = {}, streams = probe.STREAMS }
    local owner = ns .. "/elsewhere"
    for i = 1, 4 do helper.ok(client:publish_durable(stream(owner), { value = i })) end
    assert.equal(4, helper.ok(operator:delete_durable(stream(owner))))
    assert.is_nil(node(mesh, owner))
    -- this mesh's stream hub and directory still knew the stream at 4
    assert.equal(1, helper.ok(client:publish_durable(stream(owner), { value = 5 })))
    assert.same({ "000000000001" }, items(operator, owner))

    -- made anew by the other process first: this mesh's stale hub goes on
    -- after the new tail, with no gap (not after the 4 it knew)
    for i = 6, 8 do helper.ok(client:publish_durable(stream(owner), { value = i })) end
    assert.equal(4, helper.ok(operator:delete_durable(stream(owner))))
    local other = operator:hub("client/" .. ns .. "/other")
    assert.equal(1, helper.ok(other:publish_durable(stream(owner), { value = 9 })))
    assert.equal(2, helper.ok(client:publish_durable(stream(owner), { value = 10 })))
    assert.same({ "000000000001", "000000000002" }, items(operator, owner))
    assert.equal(2, node(operator, owner).content.LastSequence)
  end)

  it("wakes a consumer on another hub than the owner's, which looks again by itself", function()
    open()
    local owner = ns .. "/client"
    local handled = {}
    helper.ok(client:publish_durable(stream(owner), { value = 1 }))
    local hub = assert(mesh:hub("client/" .. ns .. "/consumer"))
    assert.is_true(hub:consume { namespace = FAMILY, key = function() return owner end,
      handler = function(_, item) handled[#handled + 1] = item.sequence .. ":" .. item.payload.value end })
    helper.run_until(mesh, function() return #handled == 1 end)
    assert.equal(1, helper.ok(mesh:delete_durable(stream(owner), { force = true })))
    helper.ok(client:publish_durable(stream(owner), { value = 2 }))
    -- the wake goes to the owner, which is no node: reclaim_ms brings it back
    helper.run_until(mesh, function() return #handled == 2 end, 5000)
    assert.same({ "1:1", "1:2" }, handled)
  end)

  it("is done once when asked twice at once, and its last step is the runtime's", function()
    open()
    local owner = ns .. "/twice"
    for i = 1, 3 do helper.ok(client:publish_durable(stream(owner), { value = i })) end
    local first, second = mesh:delete_durable(stream(owner)), mesh:delete_durable(stream(owner))
    assert.equal(3, helper.ok(first))
    -- the second finds the first's work done, or the stream already gone
    local n, message, code = second:wait()
    assert.is_true(n ~= nil or (code == "ENOTFOUND" and message:find("does not exist", 1, true) ~= nil),
      tostring(message))
    assert.is_nil(node(mesh, owner))
    -- played by hand in JSON, the node's removal is refused: only the
    -- runtime knows that the items and ids are gone
    helper.ok(client:publish_durable(stream(owner), { value = 1 }))
    local path = durable.stream_path(stream(owner))
    local message = helper.fails(client:request(path, "durable.delete", { Subscriber = "me", Sequence = 1 }),
      "EINVAL")
    assert.matches("last step is the runtime's", message)
    message = helper.fails(client:request(path, "durable.delete", { Subscriber = "me", Sequence = 7 }), "EINVAL")
    assert.matches("Sequence is its step", message)
    assert.truthy(node(mesh, owner))
  end)

  it("cut off half-way refuses publishes, saying so, and is finished by deleting again", function()
    open()
    local owner = ns .. "/halfway"
    for i = 1, 3 do helper.ok(client:publish_durable(stream(owner), { value = i })) end
    -- what a delete leaves when its process dies after marking the stream
    -- and deleting one item
    local path, items_ns = durable.stream_path(stream(owner))
    local state = node(mesh, owner).content
    state.DeletingAt = "2026-01-01T00:00:00.000Z"
    helper.ok(mesh:put_node { path = path, node_type = "DurableStream", content = state })
    helper.ok(mesh:delete_node(items_ns .. "/000000000001"))
    mesh:recycle(path) -- its hub reads the stored state again

    local _, message, code = client:publish_durable(stream(owner), { value = 4 }):wait()
    assert.equal("ENOTFOUND", code)
    assert.matches("is being deleted %(durable delete%-stream%)", message)
    assert.same({ "000000000002", "000000000003" }, items(mesh, owner), "nothing appended")

    assert.equal(2, helper.ok(mesh:delete_durable(stream(owner))))
    assert.is_nil(node(mesh, owner))
    assert.equal(1, helper.ok(client:publish_durable(stream(owner), { value = 4 })))
  end)

  it("refuses what is not a stream", function()
    open()
    local _, message, code = mesh:delete_durable(stream(ns .. "/never")):wait()
    assert.equal("ENOTFOUND", code)
    assert.matches("the stream does not exist", message)
    assert.has_error(function() mesh:delete_durable({ namespace = FAMILY }) end)
    assert.has_error(function() mesh:delete_durable(stream(ns .. "/x"), { forse = true }) end)
  end)
end)
