-- streams_spec.lua: the seven cases of a durable stream consumer (a
-- recycle mid-stream, the checkpoint on the stream node, a dormant consumer,
-- a recycled stream hub, a takeover, two racing subscribers, an orphaned
-- stream), all with one shape: the publisher sends { value = i } as item
-- i, the handler (tests/spec/probe.lua) checks value == sequence, records
-- the items in flight and completes a few ms later; "quiet" is a short
-- pause in which no new item is handled (a duplicate or a replay would
-- show in it).  Timings are shrunk through
-- durable.open's `streams` option; the guarantees checked are these:
--
--   * an acknowledged item is never handed over again, across a recycle of
--     the consumer, of the stream hub, a takeover and a race;
--   * nothing unacknowledged is lost; items are handled one at a time, in
--     order;
--   * a consumer without a stream creates nothing until a producer wakes it.
local helper = require "helper"
local durable = require "durable"
local probe = require "probe"

local FIXTURE = probe.FIXTURE
local FAMILY = probe.FAMILY
local CONSUMER = "DurableStreamConsumerProbe"
local QUIET_MS = 300      -- long beside the few ms an item takes here
local DORMANT_MS = 300    -- ... and beside a wake, were one to come
local STREAMS = probe.STREAMS

describe("a durable stream consumer", function()
  helper.each()

  local mesh, ns, client

  local function open(delay_ms)
    mesh = helper.open { plugins = { FIXTURE }, streams = STREAMS }
    ns = helper.ns()
    client = mesh:hub("client/" .. ns)
    local delay = ns .. "/delay"
    helper.ok(mesh:put_node { path = delay, node_type = "StreamDelay" })
    probe.reset(delay, delay_ms or 3)
  end

  local function seed(id, node_type)
    local path = ns .. "/" .. id
    helper.ok(mesh:put_node { path = path, node_type = node_type, content = {} })
    return path
  end

  local function activate(path)
    assert(mesh:hub(path), "activated " .. path)
  end

  local function stream(owner) return { namespace = FAMILY, key = owner } end
  local function stream_path(owner) return (durable.stream_path(stream(owner))) end

  -- publish a..b in order, each awaited: its sequence must be i
  local function publish_range(owner, a, b)
    for i = a, b do
      local seq = helper.ok(client:publish_durable(stream(owner), { value = i }))
      assert.equal(i, seq, "contiguous sequences")
    end
  end

  -- publish a..b all at once (in flight together); sequences still a..b
  local function publish_burst(owner, a, b)
    local pending = {}
    for i = a, b do pending[#pending + 1] = client:publish_durable(stream(owner), { value = i }) end
    local seqs = helper.ok(durable.all(pending), 10000)
    assert.same(probe.range(a, b), seqs)
  end

  local function pause(ms)
    mesh:run_until(function() return false end, ms)
  end

  -- wait until `key` handled `last`, then for a quiet period; the list
  local function quiet_after(key, last)
    helper.run_until(mesh, function()
      for _, s in ipairs(probe.of(key)) do if s == last then return true end end
      return false
    end, 15000)
    local n
    repeat
      n = #probe.of(key)
      pause(QUIET_MS)
    until #probe.of(key) == n
    return probe.snapshot(key)
  end

  local function state(owner)
    local node = helper.ok(mesh:get_node(stream_path(owner)))
    return node and node.content
  end

  -- poll the stream node (every 50 ms) until pred(state) holds
  local function eventually(owner, pred)
    local deadline = helper.now(mesh) + 10000
    while true do
      local s = state(owner)
      if s and pred(s) then return s end
      if helper.now(mesh) > deadline then
        error("the stream node never got there: " .. durable.encode(s or durable.null), 2)
      end
      pause(50)
    end
  end

  local function census(owners)
    local n = 0
    for _, owner in ipairs(owners) do n = n + #helper.ok(mesh:query("path:" .. stream_path(owner))) end
    return n
  end

  it("handles every item exactly once, in order, across a recycle of the consumer mid-stream",
    function()
      open(5)
      local owner = seed("probe-recycle", CONSUMER)
      activate(owner) -- dormant: there is no stream yet
      publish_range(owner, 1, 1)
      publish_burst(owner, 2, 40) -- the first append woke the owner, which claimed
      helper.run_until(mesh, function() return #probe.of(owner) >= 12 end, 10000)
      local before = helper.find(mesh, owner).incarnation
      assert.is_true(#probe.of(owner) < 40, "the recycle lands mid-stream")
      assert.is_true(helper.ok(mesh:recycle(owner)))
      -- the release left items unacknowledged, which wakes the owner: a new
      -- activation may already be there, never the old one
      local after = helper.find(mesh, owner)
      assert.is_true(after == nil or after.incarnation ~= before, "the recycle deactivated the consumer")
      publish_range(owner, 41, 60) -- nobody opens the node: the appends (or the release) wake it
      assert.same(probe.range(60), quiet_after(owner, 60))
      assert.equal(1, probe.max_concurrent)
      assert.same({}, probe.violations)
      assert.are_not.equal(before, helper.find(mesh, owner).incarnation, "a fresh activation resumed")
      assert.equal(60, eventually(owner, function(s) return s.Checkpoint == 60 end).Checkpoint)
    end)

  it("keeps the checkpoint on the stream node, and every item is a DurableStreamItem node", function()
    open()
    local owner = seed("probe-nodes", CONSUMER)
    activate(owner)
    publish_range(owner, 1, 5)
    assert.same(probe.range(5), quiet_after(owner, 5))
    local s = eventually(owner, function(st) return st.Checkpoint == 5 end)
    assert.equal(5, s.LastSequence)
    assert.equal(owner, s.Subscriber, "the active consumer holds the lease")
    assert.equal(FAMILY, s.Namespace)
    assert.equal(owner, s.Key)
    local _, items_ns = durable.stream_path(stream(owner))
    local items = helper.ok(mesh:query("namespace:" .. items_ns))
    assert.equal(5, #items)
    local ids = {}
    for _, item in ipairs(items) do
      assert.equal("DurableStreamItem", item.node_type)
      ids[#ids + 1] = item.id
      assert.equal(#ids, item.content.Sequence)
      assert.equal(('{"value":%d}'):format(#ids), item.content.PayloadJson)
    end
    assert.same({ "000000000001", "000000000002", "000000000003", "000000000004", "000000000005" }, ids)
  end)

  it("stays dormant without a stream, creating nothing, until a publish wakes exactly that one",
    function()
      open()
      local owners = {}
      for i = 0, 4 do
        owners[#owners + 1] = seed("dormant-" .. i, CONSUMER)
        activate(owners[#owners])
      end
      pause(DORMANT_MS) -- a deliberate negative wait: nothing to see happen
      assert.equal(0, census(owners), "an activated consumer without a stream creates nothing")
      for _, owner in ipairs(owners) do assert.is_not_nil(helper.find(mesh, owner), "still active") end
      publish_range(owners[3], 1, 3)
      assert.same({ 1, 2, 3 }, quiet_after(owners[3], 3))
      for i, owner in ipairs(owners) do
        if i ~= 3 then assert.same({}, probe.snapshot(owner)) end
      end
      assert.equal(1, census(owners), "only the stream published to exists")
    end)

  it("continues the sequence from the nodes after a recycle of the stream hub: no gap, no reuse",
    function()
      open()
      local owner = seed("plain-owner", "Markdown")
      publish_range(owner, 1, 10)
      assert.is_not_nil(helper.find(mesh, stream_path(owner)), "the stream hub is active")
      assert.is_true(helper.ok(mesh:recycle(stream_path(owner))))
      assert.is_nil(helper.find(mesh, stream_path(owner)))
      publish_range(owner, 11, 20)
      local got = {}
      local sub = client:read_durable(stream(owner), 0, function(item) got[#got + 1] = item end)
      helper.run_until(mesh, function() return #got >= 20 end)
      sub:close()
      local seqs, values = {}, {}
      for _, item in ipairs(got) do
        seqs[#seqs + 1] = item.sequence
        values[#values + 1] = item.payload.value
      end
      assert.same(probe.range(20), seqs)
      assert.same(probe.range(20), values)
      assert.equal(20, state(owner).LastSequence)
    end)

  it("is taken over after the subscriber dies without releasing, resuming after its acknowledged items",
    function()
      open()
      local owner = seed("job-takeover", "Markdown")
      publish_range(owner, 1, 10)
      local path = stream_path(owner)
      -- a plain client hub claims directly and acknowledges 1..4
      local ghost = assert(mesh:hub("client/" .. ns .. "/ghost"))
      local ghost_address = ghost.address
      local grant = helper.ok(ghost:request(path, "durable.claim", { Subscriber = ghost_address }))
      assert.is_true(grant.Granted)
      for seq = 1, 4 do
        local ack = helper.ok(ghost:request(path, "durable.ack",
          { Subscriber = ghost_address, Epoch = grant.Epoch, Sequence = seq }))
        assert.is_true(ack.Accepted)
      end
      -- it goes away without releasing: its address stops answering
      helper.ok(mesh:recycle(ghost_address))
      assert.is_nil(helper.find(mesh, ghost_address))
      assert.equal(ghost_address, state(owner).Subscriber)
      -- a successor consumes the stream from a client hub of its own
      local successor = assert(mesh:hub("client/" .. ns .. "/successor"))
      assert.is_true(successor:consume {
        namespace = FAMILY,
        key = function() return owner end,
        handler = function(hub, item) return probe.handle("successor", hub, item) end,
      })
      publish_range(owner, 11, 15)
      assert.same(probe.range(5, 15), quiet_after("successor", 15))
      local s = eventually(owner, function(st) return st.Checkpoint == 15 end)
      assert.equal(successor.address, s.Subscriber)
      assert.is_true(s.LeaseEpoch > grant.Epoch, "a takeover starts a new epoch")
      -- a late acknowledgement with the ghost's epoch is fenced
      local late = assert(mesh:hub("client/" .. ns .. "/late"))
      local ack = helper.ok(late:request(path, "durable.ack",
        { Subscriber = ghost_address, Epoch = grant.Epoch, Sequence = 15 }))
      assert.is_false(ack.Accepted)
      assert.matches("^fenced: the lease is held by " .. successor.address:gsub("%p", "%%%0"), ack.Reason)
      assert.equal(1, #helper.log_lines("TOOK OVER the lease from " .. ghost_address))
      assert.equal(1, probe.max_concurrent)
    end)

  it("lets exactly one of two racing subscribers handle each item, one at a time", function()
    open()
    local owner = seed("job-race", "Markdown")
    publish_range(owner, 1, 10)
    local addresses = {}
    for i = 1, 2 do
      local hub = assert(mesh:hub(("client/%s/racer-%d"):format(ns, i)))
      addresses[#addresses + 1] = hub.address
      assert.is_true(hub:consume {
        namespace = FAMILY,
        key = function() return owner end,
        handler = function(h, item) return probe.handle("race", h, item) end,
      })
    end
    publish_range(owner, 11, 20)
    assert.same(probe.range(20), quiet_after("race", 20))
    assert.equal(1, probe.max_concurrent, "the loser handled nothing alongside the winner")
    assert.equal(2, #addresses)
    local holder = eventually(owner, function(s) return s.Checkpoint == 20 end).Subscriber
    assert.is_truthy(holder == addresses[1] or holder == addresses[2])
  end)

  it("is orphaned by a subscriber that leaves: Subscriber cleared, OrphanedAt, LastSubscriber, Checkpoint",
    function()
      open()
      local owner = seed("job-orphan", "Markdown")
      publish_range(owner, 1, 3)
      local hub = assert(mesh:hub("client/" .. ns .. "/orphan"))
      local address = hub.address
      assert.is_true(hub:consume {
        namespace = FAMILY,
        key = function() return owner end,
        handler = function(h, item) return probe.handle("orphan", h, item) end,
      })
      assert.same({ 1, 2, 3 }, quiet_after("orphan", 3))
      helper.ok(mesh:recycle(address))
      local s = eventually(owner, function(st) return st.Subscriber == durable.null end)
      assert.are_not.equal(durable.null, s.OrphanedAt)
      assert.is_string(s.OrphanedAt)
      assert.equal(address, s.LastSubscriber)
      assert.equal(3, s.Checkpoint, "everything handled was acknowledged before it let go")
      assert.equal(1, #helper.log_lines(FAMILY .. "@" .. owner .. " ORPHANED: " .. address
        .. " released the lease at checkpoint 3 of 3"))
    end)
end)
