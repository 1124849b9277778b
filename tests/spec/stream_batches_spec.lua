-- stream_batches_spec.lua: a consumer declared with `batch` is handed
-- consecutive items in order, up to the batch's items and bytes, as
-- handler(hub, items, tx), and what its tx records commits in one
-- transaction with the acknowledgement of the whole batch: a backlog drains
-- in fewer calls than items, every effect applied exactly once.  A batch
-- that fails stops at the failing item -- at once when the raise names it
-- (durable.fail_at, error{ at = }), else by handing the items over one at a
-- time -- and that item alone meets the retries, max_attempts and the dead
-- letters; the items around it are applied once each, in order.
-- mesh:stats() counts the batches.  A bad `batch` raises where it was
-- written.  Every wait is on a condition (the checkpoint, a count): nothing
-- here measures time.
local helper = require "helper"
local durable = require "durable"
local probe = require "probe"

local FAMILY = "BatchStream"
local STREAMS = probe.STREAMS

-- What the fixture plugin's handlers reach: the spec's current log.
local shared = {}
package.loaded["stream_batches_probe"] = shared

-- A plugin whose NodeType BatchTotal consumes FAMILY in batches of 50,
-- summing each batch into its own node; written to a temp file, with
-- `batch` as given (a bad one, for the misuse case).
local function plugin_file(batch)
  local file = helper.tmpname(".lua")
  local f = assert(io.open(file, "w"))
  f:write(([[
local probe = require "stream_batches_probe"
return {
  node_types = {
    BatchTotal = function(config)
      config:with_durable_stream_consumer {
        namespace = %q,
        batch = %s,
        handler = function(hub, items, tx) return probe.total(hub, items, tx) end,
      }
    end,
  },
}
]]):format(FAMILY, batch))
  f:close()
  return file
end

local function seqs(items)
  local out = {}
  for i, item in ipairs(items) do out[i] = item.sequence end
  return out
end

-- The sequences of the calls (a list of lists), flattened.
local function flat(calls)
  local out = {}
  for _, call in ipairs(calls) do
    for _, s in ipairs(call) do out[#out + 1] = s end
  end
  return out
end

describe("a durable stream consumer with batches", function()
  helper.each()

  local mesh, ns, client, consumers

  local function open(plugins)
    mesh = helper.open { plugins = plugins, streams = STREAMS }
    ns = helper.ns()
    client = mesh:hub("client/" .. ns)
    consumers = 0
  end

  local function stream(owner) return { namespace = FAMILY, key = owner } end
  local function node(path) return helper.ok(mesh:get_node(path)) end
  local function checkpoint(owner)
    local n = node((durable.stream_path(stream(owner))))
    return n and n.content.Checkpoint
  end

  -- payloads[i] appended as items 1..#payloads, a hundred in flight at a time
  local function publish_all(owner, payloads)
    for a = 1, #payloads, 100 do
      local pending = {}
      for i = a, math.min(a + 99, #payloads) do
        pending[#pending + 1] = client:publish_durable(stream(owner), payloads[i])
      end
      assert.same(probe.range(a, a + #pending - 1), helper.ok(durable.all(pending), 20000))
    end
  end
  local function publish(owner, i, payload)
    assert.equal(i, helper.ok(client:publish_durable(stream(owner), payload or { value = i })))
  end
  local function values(n)
    local out = {}
    for i = 1, n do out[i] = { value = i } end
    return out
  end

  -- a client hub consuming `owner` with `batch` and `handler`
  local function consume(owner, batch, handler, extra)
    consumers = consumers + 1
    local hub = assert(mesh:hub(("client/%s/consumer%d"):format(ns, consumers)))
    local t = { namespace = FAMILY, key = function() return owner end, batch = batch,
      handler = handler }
    for k, v in pairs(extra or {}) do t[k] = v end
    assert.is_true(hub:consume(t))
    return hub
  end

  -- tx appends the batch's sequences to owner's node content.seen
  local function record_seen(tx, owner, items)
    tx:update_node(owner, function(n)
      local seen = n.content.seen or {}
      for _, item in ipairs(items) do seen[#seen + 1] = item.sequence end
      n.content.seen = seen
      return n
    end)
  end

  local function dead_letters(owner, count)
    local letters = {}
    local sub = client:read_durable({ namespace = FAMILY .. ".dead", key = owner }, 0,
      function(item) letters[#letters + 1] = item.payload end)
    helper.run_until(mesh, function() return #letters >= count end)
    sub:close()
    return letters
  end

  local function escape(s) return (s:gsub("%p", "%%%0")) end

  it("hands consecutive items, in order, at least one and at most `items` per call, each "
    .. "built as a single item is", function()
    open()
    local owner = ns .. "/order"
    publish_all(owner, values(30))
    local calls, tables = {}, {}
    consume(owner, 7, function(_, items)
      assert(#items >= 1, "an empty batch")
      calls[#calls + 1] = seqs(items)
      for _, item in ipairs(items) do tables[item.sequence] = item end
    end)
    helper.run_until(mesh, function() return checkpoint(owner) == 30 end, 10000)
    assert.same(probe.range(30), flat(calls), "every item once, in order")
    for i, call in ipairs(calls) do
      assert.is_true(#call >= 1 and #call <= 7, ("call %d had %d items"):format(i, #call))
      for j = 2, #call do assert.equal(call[j - 1] + 1, call[j], "consecutive") end
    end
    assert.is_true(#calls < 30, "a backlog goes in batches")
    local _, items_ns = durable.stream_path(stream(owner))
    for i = 1, 30 do
      local item = tables[i]
      assert.equal(i, item.sequence)
      assert.same({ value = i }, item.payload)
      assert.equal(durable.encode { value = i }, item.raw)
      assert.same({ namespace = FAMILY, key = owner }, item.stream)
      assert.equal(("%s/%012d"):format(items_ns, i), item.path)
      assert.equal("integer", math.type(item.appended_at))
    end
  end)

  it("drains a backlog of 1,000 items in batches, each effect committed exactly once with its "
    .. "batch, across a recycle of the consumer; mesh:stats() counts the batches", function()
    local calls = {}
    shared.total = function(hub, items, tx)
      calls[#calls + 1] = #items
      local sum = 0
      for _, item in ipairs(items) do sum = sum + item.payload.amount end
      tx:update_node(hub.address, function(n)
        local c = n.content
        -- committed batches follow one another: each starts after the last
        if (c.last or 0) ~= items[1].sequence - 1 then c.gaps = (c.gaps or 0) + 1 end
        c.total = (c.total or 0) + sum
        c.count = (c.count or 0) + #items
        c.batches = (c.batches or 0) + 1
        c.last = items[#items].sequence
        return n
      end)
    end
    open { plugin_file "50" }
    local owner = ns .. "/total"
    helper.ok(mesh:put_node { path = owner, node_type = "BatchTotal", content = {} })
    local payloads, sum = {}, 0
    for i = 1, 1000 do
      payloads[i] = { amount = i * 3 % 17 }
      sum = sum + payloads[i].amount
    end
    publish_all(owner, payloads)
    assert(mesh:hub(owner))
    helper.run_until(mesh, function() return #calls >= 3 end, 20000)
    assert.is_true(helper.ok(mesh:recycle(owner)))
    assert(mesh:hub(owner))
    helper.run_until(mesh, function() return checkpoint(owner) == 1000 end, 60000)
    local c = node(owner).content
    assert.equal(sum, c.total, "every amount summed once")
    assert.equal(1000, c.count)
    assert.equal(1000, c.last)
    assert.is_nil(c.gaps, "no batch skipped or repeated")
    assert.is_true(#calls < 1000 and c.batches >= 20, ("%d calls"):format(#calls))
    for i, n in ipairs(calls) do
      assert.is_true(n >= 1 and n <= 50, ("call %d had %d items"):format(i, n))
    end
    local stats
    helper.run_until(mesh, function()
      stats = mesh:stats().streams[FAMILY .. "@" .. owner]
      return stats ~= nil and stats.handled == 1000
    end)
    assert.equal(c.batches, stats.batches, "one per committed batch")
  end)

  it("keeps a batch within `bytes`, a larger item alone", function()
    open()
    local owner = ns .. "/bytes"
    local small = { p = ("x"):rep(92) }
    local big = { p = ("y"):rep(392) }
    assert.equal(100, #durable.encode(small))
    assert.equal(400, #durable.encode(big))
    local payloads = {}
    for i = 1, 14 do payloads[i] = i == 11 and big or small end
    publish_all(owner, payloads)
    local calls, sizes = {}, {}
    consume(owner, { items = 100, bytes = 350 }, function(_, items)
      local bytes = 0
      for _, item in ipairs(items) do bytes = bytes + #item.raw end
      calls[#calls + 1] = seqs(items)
      sizes[#sizes + 1] = bytes
    end)
    helper.run_until(mesh, function() return checkpoint(owner) == 14 end, 10000)
    assert.same(probe.range(14), flat(calls))
    local most = 0
    for i, call in ipairs(calls) do
      most = math.max(most, #call)
      assert.is_true(sizes[i] <= 350 or #call == 1, ("call %d: %d items, %d bytes")
        :format(i, #call, sizes[i]))
      for _, s in ipairs(call) do
        if s == 11 then assert.same({ 11 }, call, "the large item goes alone") end
      end
    end
    assert.is_true(most >= 2, "items still batched under the byte bound")
  end)

  it("with wait_ms waits for more items to join a batch; without it a batch goes at once",
    function()
      open()
      -- a trickle, one publish at a time, joins the waiting batch until it is full
      local owner = ns .. "/trickle"
      publish(owner, 1)
      local calls = {}
      consume(owner, { items = 5, wait_ms = 30000 }, function(_, items)
        calls[#calls + 1] = seqs(items)
      end)
      for i = 2, 5 do publish(owner, i) end
      helper.run_until(mesh, function() return checkpoint(owner) == 5 end, 10000)
      assert.same({ { 1, 2, 3, 4, 5 } }, calls)
      -- no wait: the one item there goes alone, though more follow (a
      -- client hub's consumer is not woken by its stream's creation: the
      -- stream is there first)
      local eager = ns .. "/eager"
      local got = {}
      publish(eager, 1)
      consume(eager, 10, function(_, items) got[#got + 1] = seqs(items) end)
      helper.run_until(mesh, function() return #got == 1 end)
      assert.same({ 1 }, got[1])
      for i = 2, 3 do publish(eager, i) end
      helper.run_until(mesh, function() return checkpoint(eager) == 3 end)
      assert.same({ 1, 2, 3 }, flat(got))
    end)

  -- A poison item (7) among 20: how each way of failing is handled.
  local function poisoned(fail)
    open()
    local owner = ns .. "/poison"
    helper.ok(mesh:put_node { path = owner, content = {} })
    publish_all(owner, values(20))
    local calls = {}
    local since = #helper.logs
    consume(owner, 10, function(hub, items, tx)
      calls[#calls + 1] = seqs(items)
      for _, item in ipairs(items) do
        if item.sequence == 7 then return fail(hub, item) end
      end
      record_seen(tx, owner, items)
    end, { max_attempts = 3 })
    helper.run_until(mesh, function() return checkpoint(owner) == 20 end, 20000)
    local seen = node(owner).content.seen
    local want = probe.range(20)
    table.remove(want, 7)
    assert.same(want, seen, "the others applied once each, in order")
    local letters = dead_letters(owner, 1)
    assert.equal(1, #letters)
    assert.equal(FAMILY .. "@" .. owner, letters[1].Stream)
    assert.equal(7, letters[1].Sequence)
    assert.equal(3, letters[1].Attempts)
    assert.matches("poison 7", letters[1].Reason)
    assert.same({ value = 7 }, durable.decode(letters[1].PayloadJson))
    -- the first call that held item 7 failed as a whole batch
    local first
    for i, call in ipairs(calls) do
      for _, s in ipairs(call) do if s == 7 and not first then first = i end end
    end
    assert.is_true(#calls[first] > 1, "item 7 came in a batch")
    -- after it, item 7 only ever alone
    for i = first + 1, #calls do
      for _, s in ipairs(calls[i]) do
        if s == 7 then assert.same({ 7 }, calls[i], "item 7 retried alone") end
      end
    end
    return calls, first, since
  end

  it("with a plain raise fails the batch, finds the item one at a time, and dead-letters it "
    .. "alone", function()
    local calls, first, since = poisoned(function() error("poison 7") end)
    local head = calls[first][1]
    assert.same({ head }, calls[first + 1], "handed one at a time")
    local range = ("on items %d..%d failed: "):format(head, calls[first][#calls[first]])
    local lines = helper.log_lines(range, since)
    assert.is_true(#lines >= 1, "the log names the batch's range")
    assert.matches(escape("poison 7"), lines[1])
  end)

  it("with durable.fail_at acknowledges the items before the one named as a batch, and "
    .. "retries that one alone", function()
    local calls, first = poisoned(function(_, item)
      durable.fail_at(item, "poison 7")
    end)
    assert.same(probe.range(calls[first][1], 6), calls[first + 1], "the items before it, as a batch")
    -- batches resume after it
    for i = first + 2, #calls do
      if calls[i][1] == 8 then
        assert.is_true(#calls[i] > 1, "the items after it, as a batch")
        break
      end
    end
  end)

  it("with error{ at = } from a returned completion stops at that item too", function()
    local calls, first = poisoned(function(hub, item)
      return hub:get_node(hub.address):next(function()
        error { code = "EFAILED", message = "poison 7", at = item.sequence }
      end)
    end)
    assert.same(probe.range(calls[first][1], 6), calls[first + 1])
  end)

  -- (the consumer's reader refuses the item before a batch is formed: the
  -- batch ends before it)
  it("never hands a batch an item that cannot be read; it goes to the dead letters alone",
    function()
      open()
      local owner = ns .. "/unreadable"
      helper.ok(mesh:put_node { path = owner, content = {} })
      publish_all(owner, values(3))
      local _, items_ns = durable.stream_path(stream(owner))
      helper.ok(mesh:put_node { path = items_ns .. "/000000000004", node_type = "DurableStreamItem",
        content = { Sequence = 4, PayloadJson = "{not json", AppendedAt = durable.null } })
      publish(owner, 5)
      local calls = {}
      consume(owner, 10, function(_, items, tx)
        calls[#calls + 1] = seqs(items)
        record_seen(tx, owner, items)
      end, { max_attempts = 2 })
      helper.run_until(mesh, function() return checkpoint(owner) == 5 end, 10000)
      assert.same({ { 1, 2, 3 }, { 5 } }, calls, "the handler never saw item 4")
      assert.same({ 1, 2, 3, 5 }, node(owner).content.seen)
      local letters = dead_letters(owner, 1)
      assert.equal(4, letters[1].Sequence)
      assert.matches("could not be read", letters[1].Reason)
    end)

  it("leaves a consumer without `batch` one item per call, counting no batches", function()
    open()
    local owner = ns .. "/single"
    publish_all(owner, values(3))
    local got = {}
    consume(owner, nil, function(_, item) got[#got + 1] = item.sequence end)
    helper.run_until(mesh, function() return checkpoint(owner) == 3 end)
    assert.same({ 1, 2, 3 }, got)
    -- this process counts an acknowledgement once it hears the commit, which
    -- may be after another reader sees the checkpoint
    local stats
    helper.run_until(mesh, function()
      stats = mesh:stats().streams[FAMILY .. "@" .. owner]
      return stats ~= nil and stats.handled == 3
    end)
    assert.equal(0, stats.batches)
  end)

  it("refuses a bad batch where it is written, naming the field and the rule", function()
    open()
    local hub = assert(mesh:hub("client/" .. ns .. "/bad"))
    local cases = {
      { 0, "batch items must be an integer from 1 to 10000 (was 0)" },
      { 10001, "batch items must be an integer from 1 to 10000 (was 10001)" },
      { 2.5, "batch must be an integer (items per call) or a table { items =, bytes =, wait_ms = }, not 2.5" },
      { "10", "batch must be an integer (items per call) or a table { items =, bytes =, wait_ms = }, not string" },
      { {}, "batch items must be an integer from 1 to 10000 (was nil)" },
      { { items = 5, bytes = -1 }, "batch bytes must be an integer >= 0, 0 for no bound (was -1)" },
      { { items = 5, wait_ms = 60001 }, "batch wait_ms must be an integer from 0 to 60000 (was 60001)" },
      { { items = 5, wait_ms = 0.5 }, "batch wait_ms must be an integer from 0 to 60000 (was 0.5)" },
      { { items = 5, size = 1 }, "unknown batch field 'size' (known: items, bytes, wait_ms)" },
    }
    for _, case in ipairs(cases) do
      local ok, message = pcall(hub.consume, hub, { namespace = FAMILY, handler = function() end,
        batch = case[1] })
      assert.is_false(ok)
      assert.equal("hub:consume: " .. case[2], message)
    end
    local ok, message = pcall(hub.consume, hub, { namespace = FAMILY, batch = 5 })
    assert.is_false(ok)
    assert.equal("hub:consume: handler must be a function(hub, items)", message)
    -- in a plugin: at the declaration's line, before anything opens
    local file = plugin_file "{ items = 10, wait_ms = -5 }"
    local raised, why = pcall(durable.open, { store = helper.store(), plugins = { file } })
    assert.is_false(raised)
    assert.matches(escape(("durable.open: plugin %s:5: config:with_durable_stream_consumer: "
      .. "batch wait_ms must be an integer from 0 to 60000 (was -5)"):format(file)), why)
  end)

  it("durable.fail_at raises a failure naming the item, which completions keep", function()
    local ok, e = pcall(durable.fail_at, { sequence = 12 }, "bad amount")
    assert.is_false(ok)
    assert.same({ 12, "bad amount", "EFAILED" }, { e.at, e.message, e.code })
    ok, e = pcall(durable.fail_at, 3, "taken", "ECONFLICT")
    assert.same({ 3, "taken", "ECONFLICT" }, { e.at, e.message, e.code })
    local function misuse(...)
      local raised, message = pcall(durable.fail_at, ...)
      assert.is_false(raised)
      return message
    end
    assert.equal("durable.fail_at(item, message [, code]): item must be an item of the batch or "
      .. "its sequence (an integer >= 1), not x", misuse("x", "m"))
    assert.matches("not 0", misuse(0, "m"))
    assert.equal("durable.fail_at(item, message [, code]): message must be a string", misuse(3))
    assert.matches("code must be an error name", misuse(3, "m", 42))
    -- through :next, adoption and all(); a failure without one names none
    local c = durable.done(1):next(function() durable.fail_at(5, "x") end)
    assert.same({ "failed", "x", "EFAILED", 5 }, { c.state, c.message, c.code, c.at })
    assert.equal(5, c:next(function() end).at)
    assert.equal(5, durable.all { c }.at)
    assert.equal(5, durable.done(1):next(function() return c end).at)
    local d = durable.done(1):next(function() error { at = 4 } end)
    assert.same({ "EFAILED", "EFAILED", 4 }, { d.message, d.code, d.at })
    assert.is_nil(durable.done(1):next(function() error("plain") end).at)
    assert.is_nil(durable.done(1):next(function() error { at = "7" } end).at)
  end)
end)
