-- effects_spec.lua: a handler's writes through its transaction `tx` are
-- committed in one transaction with the item's acknowledgement, and only
-- under the lease: written once per item, never by a holder that lost its
-- lease, never half.  A message handler's writes come before its reply.
local helper = require "helper"
local durable = require "durable"

local FIXTURE = helper.fixture "effects.lua"
local STREAMS = { backoff_min_ms = 20, backoff_max_ms = 40, holder_probe_ms = 200, reclaim_ms = 300 }

describe("a handler's transaction", function()
  helper.each()

  local mesh, ns, client
  local function setup()
    mesh = helper.open { plugins = { FIXTURE }, streams = STREAMS }
    ns = helper.ns()
    client = mesh:hub("client/" .. ns)
  end
  local function node(path) return helper.ok(mesh:get_node(path)) end
  local function stream_node(family, key)
    return node(durable.stream_path { namespace = family, key = key })
  end

  it("commits an item's writes with its acknowledgement, once each", function()
    setup()
    local owner = ns .. "/tally"
    helper.ok(mesh:put_node { path = owner, node_type = "Tally", content = {} })
    for i = 1, 5 do
      helper.ok(client:publish_durable({ namespace = "Tally", key = owner }, { amount = i }))
    end
    helper.run_until(mesh, function() return (node(owner).content.count or 0) >= 5 end)
    helper.run_until(mesh, function() return stream_node("Tally", owner).content.Checkpoint == 5 end)
    local doc = node(owner).content
    assert.same({ total = 15, count = 5, last = 5 }, doc) -- two updates of one path: one write
    for i = 1, 5 do
      assert.equal(i, node(owner .. "/_Seen/" .. i).content.sequence)
    end
  end)

  it("writes nothing of an item whose write is refused, and hands it again", function()
    setup()
    local owner = ns .. "/tally"
    local blocker = ns .. "/blocker"
    helper.ok(mesh:put_node { path = owner, node_type = "Tally", content = {} })
    helper.ok(mesh:put_node { path = blocker, content = {} })
    helper.ok(client:publish_durable({ namespace = "Tally", key = owner }, { amount = 1 }))
    helper.ok(client:publish_durable({ namespace = "Tally", key = owner },
      { amount = 10, blocker = blocker }))
    helper.run_until(mesh, function() return #helper.log_lines("item 2 failed") >= 2 end)
    -- item 1 is in, item 2 none of its three writes, and it is not acknowledged
    assert.same({ total = 1, count = 1, last = 1 }, node(owner).content)
    assert.is_nil(node(owner .. "/_Seen/2"))
    assert.equal(1, stream_node("Tally", owner).content.Checkpoint)
    assert.truthy(#helper.log_lines("already exists") >= 1)
    -- the blocker gone, the next try commits it
    helper.ok(mesh:delete_node(blocker))
    helper.run_until(mesh, function() return stream_node("Tally", owner).content.Checkpoint == 2 end)
    assert.same({ total = 11, count = 2, last = 2 }, node(owner).content)
  end)

  it("writes nothing when the consumer lost its lease meanwhile: the new holder does it once", function()
    setup()
    local owner = ns .. "/gated"
    helper.ok(mesh:put_node { path = owner, node_type = "Gated", content = {} })
    helper.ok(client:publish_durable({ namespace = "Gated", key = owner }, { n = 1 }))
    local gates = package.loaded.effects_gates
    helper.run_until(mesh, function() return gates[owner] and gates[owner].waiting == 1 end)
    -- another holder takes the lease (as a takeover by another process would)
    local path = durable.stream_path { namespace = "Gated", key = owner }
    helper.ok(mesh:update_node(path, function(n)
      n.content.Subscriber = "elsewhere/holder"
      n.content.LeaseEpoch = n.content.LeaseEpoch + 1
      return n
    end))
    gates[owner].open() -- the handler returns: its commit is fenced
    helper.run_until(mesh, function() return #helper.log_lines("lost the lease of Gated@" .. owner) >= 1 end)
    assert.is_nil(node(owner).content.applied, "the fenced holder wrote nothing")
    -- "elsewhere/holder" answers no ping: the consumer takes over and
    -- handles the item again, and this time the effect commits -- once
    helper.run_until(mesh, function() return stream_node("Gated", owner).content.Checkpoint == 1 end)
    assert.equal(1, node(owner).content.applied)
  end)

  it("appends to another stream with the acknowledgement, once and in order", function()
    setup()
    local relay, tally = ns .. "/relay", ns .. "/tally"
    helper.ok(mesh:put_node { path = relay, node_type = "Relay", content = {} })
    helper.ok(mesh:put_node { path = tally, node_type = "Tally", content = {} })
    for _ = 1, 4 do
      helper.ok(client:publish_durable({ namespace = "Relay", key = relay }, { to = tally }))
    end
    helper.run_until(mesh, function() return (node(tally).content.count or 0) >= 4 end)
    -- the Tally consumer saw 1, 2, 3, 4: in order, each once
    assert.same({ total = 10, count = 4, last = 4 }, node(tally).content)
    helper.run_until(mesh, function()
      return #helper.ok(mesh:query("namespace:" .. relay .. "/_DurableOutbox")) == 0
    end)
    local items = helper.ok(mesh:query("namespace:" .. durable.stream_path {
      namespace = "Tally", key = tally } .. "/_DurableStreamItem"))
    assert.equal(4, #items)
    assert.is_not_nil(node(relay .. "/_Relayed/4"))
  end)

  it("makes the appends of consecutive items in the order they were committed", function()
    setup()
    local relay, sink = ns .. "/fan", ns .. "/sink"
    helper.ok(mesh:put_node { path = relay, node_type = "Relay", content = {} })
    helper.ok(mesh:put_node { path = sink, node_type = "Sink", content = {} })
    for _ = 1, 6 do
      helper.ok(client:publish_durable({ namespace = "Relay", key = relay }, { sink = sink, k = 3 }))
    end
    helper.run_until(mesh, function() return #(node(sink).content.tags or {}) >= 18 end)
    local want = {}
    for i = 1, 6 do for j = 1, 3 do want[#want + 1] = ("%d.%d"):format(i, j) end end
    assert.same(want, node(sink).content.tags)
  end)

  it("makes an append an earlier holder committed but did not make, once", function()
    setup()
    local relay, tally = ns .. "/relay", ns .. "/tally"
    helper.ok(mesh:put_node { path = tally, node_type = "Tally", content = {} })
    -- as a host that died right after the commit would leave it: an outbox
    -- entry, and (the second) one whose append was made but not removed
    local function entry(id, amount)
      helper.ok(mesh:put_node { path = relay .. "/_DurableOutbox/" .. id, node_type = "DurableOutbox",
        content = { Namespace = "Tally", Key = tally, Id = id,
                    PayloadJson = durable.encode { amount = amount } } })
    end
    entry("0000000000001-00000001-00000000", 5)
    entry("0000000000002-00000002-00000000", 7)
    helper.ok(client:publish_durable({ namespace = "Tally", key = tally }, { amount = 7 },
      { id = "0000000000002-00000002-00000000" }))
    helper.ok(mesh:put_node { path = relay, node_type = "Relay", content = {} })
    helper.ok(client:publish_durable({ namespace = "Relay", key = relay }, { to = tally }))
    -- the claim makes the left appends first, then item 1 relays its own
    helper.run_until(mesh, function() return (node(tally).content.count or 0) >= 3 end)
    assert.same({ total = 13, count = 3, last = 3 }, node(tally).content) -- 7, 5, then 1
    helper.run_until(mesh, function()
      return #helper.ok(mesh:query("namespace:" .. relay .. "/_DurableOutbox")) == 0
    end)
  end)

  it("refuses an append in a message handler's transaction, saying why", function()
    setup()
    local relay = ns .. "/relay"
    helper.ok(mesh:put_node { path = relay, node_type = "Relay", content = {} })
    local message = helper.fails(client:request(relay, "publish_in_message", {}), "EFAILED")
    assert.matches("committed with a stream item's acknowledgement", message, 1, true)
  end)

  it("commits a message handler's writes before its reply", function()
    setup()
    local w = ns .. "/writer"
    helper.ok(mesh:put_node { path = w, node_type = "Writer", content = {} })
    assert.same({ queued = true }, helper.ok(client:request(w, "write", { name = "a", v = 7 })))
    assert.equal(7, node(w .. "/_Out/a").content.v) -- there as soon as the reply is
  end)

  it("refuses a write asked after the handler returned, saying why", function()
    setup()
    local w = ns .. "/writer"
    helper.ok(mesh:put_node { path = w, node_type = "Writer", content = {} })
    helper.ok(client:request(w, "late", {}))
    local tx = package.loaded.effects_late_tx
    local ok, message = pcall(tx.put_node, tx, { path = w .. "/_Out/late", content = {} })
    assert.is_false(ok)
    assert.matches("this transaction is over", message, 1, true)
    assert.is_nil(node(w .. "/_Out/late"))
  end)

  it("cannot be bypassed by a commit of bad writes: the handler fails, naming the write", function()
    setup()
    local w = ns .. "/writer"
    helper.ok(mesh:put_node { path = w, node_type = "Writer", content = {} })
    local message = helper.fails(client:request(w, "write", { name = "a//b", v = 1 }), "EFAILED")
    assert.matches("a//b", message, 1, true)
    assert.matches("empty segment", message, 1, true)
  end)
end)

describe("an init step's failure code", function()
  helper.each()

  it("does not pass for the activation's own codes: the activation fails EFAILED, the code kept in the message", function()
    local mesh = helper.open { plugins = { FIXTURE } }
    local ns = helper.ns()
    local path = ns .. "/init"
    helper.ok(mesh:put_node { path = path, node_type = "InitFails", content = {} })
    local client = mesh:hub("client/" .. ns)
    local _, message, code = client:request(path, "hello"):wait()
    assert.equal("EFAILED", code)
    assert.matches("(ENOTFOUND)", message, 1, true)
    -- the node is there: a mesh read does not call it absent, and no client
    -- hub takes its address
    local read, why, read_code = mesh:read(path):wait()
    assert.is_nil(read)
    assert.equal("EUNAVAIL", read_code)
    assert.matches("(ENOTFOUND)", why, 1, true)
    assert.is_nil(mesh:hub(path))
  end)
end)
