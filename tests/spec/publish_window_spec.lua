-- publish_window_spec.lua: a mesh's publish window (durable.open{
-- publish_window = { items, bytes, waiting_bytes, max_block_ms } }).  A
-- producer that starts more publishes than the window holds is slowed: the
-- publishes past it wait, in order, and complete; one that would take the
-- waiting publishes past waiting_bytes, or that waited max_block_ms, fails
-- with EAGAIN and appends nothing; a handler that awaits its publishes is
-- only slowed.  mesh:stats().publish counts it all.
local helper = require "helper"
local durable = require "durable"

describe("the publish window", function()
  helper.each()

  -- every item of a stream, read back: its sequences and payloads' n
  local function stored(mesh, id)
    local seqs, ns = {}, {}
    local last = 0
    local sub = mesh:hub("client/check"):read_durable(id, 0, function(item)
      seqs[#seqs + 1], ns[#ns + 1] = item.sequence, item.payload.n
      last = item.sequence
    end)
    return function(upto)
      helper.run_until(mesh, function() return last >= upto end, 10000)
      sub:close()
      return seqs, ns
    end
  end

  -- `n` publishes { n = N } started at once on a fresh stream of a mesh with
  -- `window`; told[k] is "N=SEQ" for the k-th publish told a sequence,
  -- failed[k] { n =, code =, message = } for the k-th that failed
  local function burst(window, n)
    local mesh = helper.open { publish_window = window }
    local id = { namespace = "Log", key = helper.ns() .. "/doc" }
    local client = mesh:hub("client/p")
    local told, failed = {}, {}
    for k = 1, n do
      client:publish_durable(id, { n = k }):next(function(seq) told[#told + 1] = k .. "=" .. seq end,
        function(message, code) failed[#failed + 1] = { n = k, code = code, message = message } end)
    end
    local started = mesh:stats().publish
    helper.run_until(mesh, function() return #told + #failed == n end, 20000)
    return mesh, id, told, failed, started
  end

  -- the stream holds exactly the publishes that were told a sequence, each
  -- under that sequence, in order
  local function holds_told(mesh, id, told)
    local seqs, ns = stored(mesh, id)(#told)
    assert.equal(#told, #seqs)
    for i, pair in ipairs(told) do assert.equal(pair, ns[i] .. "=" .. seqs[i]) end
  end

  it("lets a producer past it wait, then completes every publish in order", function()
    local mesh, id, told, failed, started = burst({ items = 4 }, 60)
    assert.equal(4, started.in_flight)
    assert.equal(56, started.waiting)
    assert.is_true(started.waiting_bytes > 56 * 8, "a waiting publish counts its bytes")
    assert.same({}, failed)
    for i = 1, 60 do assert.equal(i .. "=" .. i, told[i], "the publishes completed in order") end
    local stats = mesh:stats().publish
    assert.equal(0, stats.in_flight)
    assert.equal(0, stats.waiting)
    assert.equal(0, stats.waiting_bytes)
    assert.equal(56, stats.waited)
    assert.equal(0, stats.refused)
    holds_told(mesh, id, told)
  end)

  it("refuses at once with EAGAIN what would take the waiting bytes past their bound", function()
    local mesh, id, told, refused = burst({ items = 2, waiting_bytes = 2000 }, 100)
    assert.is_true(#refused > 0 and #told > 2, ("%d told, %d refused"):format(#told, #refused))
    for _, r in ipairs(refused) do
      assert.equal("EAGAIN", r.code)
      assert.matches("publish_window.waiting_bytes", r.message, 1, true)
      assert.matches("nothing was appended", r.message, 1, true)
    end
    assert.equal(#refused, mesh:stats().publish.refused)
    holds_told(mesh, id, told)
  end)

  it("fails with EAGAIN a publish that waited max_block_ms and every one behind it, appending none",
    function()
    local mesh, id, told, expired = burst({ items = 1, max_block_ms = 1 }, 300)
    assert.is_true(#expired > 0, "some waited longer than 1 ms")
    assert.equal("EAGAIN", expired[1].code)
    assert.matches("^Appending to durable stream Log@.* failed: the oldest publish waiting for "
      .. "room in the publish window waited 1 ms", expired[1].message)
    assert.equal(#expired, mesh:stats().publish.expired)
    -- the ones told a sequence are the first ones, those that failed all after
    for i, pair in ipairs(told) do assert.equal(i .. "=" .. i, pair) end
    for k, e in ipairs(expired) do assert.equal(#told + k, e.n) end
    holds_told(mesh, id, told)
  end)

  it("appends in the order they were started publishes to a new stream, with ids and without",
    function()
    local mesh = helper.open {}
    local id = { namespace = "Log", key = helper.ns() .. "/doc" }
    local client = mesh:hub("client/p")
    local done, failed = 0, {}
    for n = 1, 3000 do
      -- the first publishes make the stream node; an id read makes a
      -- publish later on its way than the one after it
      client:publish_durable(id, { n = n }, n % 3 == 0 and { id = "n" .. n } or nil)
        :next(function() done = done + 1 end, function(m) failed[#failed + 1] = m end)
    end
    helper.run_until(mesh, function() return done + #failed == 3000 end, 30000)
    assert.same({}, failed)
    local seqs, ns = stored(mesh, id)(3000)
    for i = 1, 3000 do
      assert.equal(i, seqs[i])
      assert.equal(i, ns[i], "item " .. i .. " holds publish " .. ns[i])
    end
  end)

  it("sends the publish behind one that its id answered", function()
    local mesh = helper.open {}
    local id = { namespace = "Log", key = helper.ns() .. "/doc" }
    local client = mesh:hub("client/p")
    assert.equal(1, helper.ok(client:publish_durable(id, { n = 1 }, { id = "a" })))
    -- started together: the first is answered by its id's read, the
    -- second waits behind it
    local both = durable.all({ client:publish_durable(id, { n = 2 }, { id = "a" }),
      client:publish_durable(id, { n = 3 }) }, mesh)
    assert.same({ 1, 2 }, helper.ok(both))
    assert.equal(0, mesh:stats().publish.in_flight)
  end)

  it("slows a handler that awaits each of its publishes, and refuses none", function()
    local mesh = helper.open { publish_window = { items = 1 } }
    local ns = helper.ns()
    local out = { namespace = "Out", key = ns .. "/doc" }
    local done, err
    local hub = mesh:hub("client/" .. ns)
    helper.ok(hub:publish_durable({ namespace = "In", key = ns .. "/doc" }, { n = 0 }))
    local flood, flooded = { namespace = "Flood", key = ns .. "/doc" }, 0
    assert.is_true(hub:consume { namespace = "In", key = function() return ns .. "/doc" end,
      handler = function(h)
        -- publishes not awaited fill the window first
        for n = 1, 300 do
          h:publish_durable(flood, { n = n }):next(function() flooded = flooded + 1 end)
        end
        for n = 1, 100 do
          local _, message, code = h:publish_durable(out, { n = n }):await()
          if message then err = code .. ": " .. message return end
        end
        done = true
      end })
    helper.run_until(mesh, function() return done or err end, 20000)
    assert.is_nil(err)
    -- 299 of the flood waited, and the handler's first publish behind them
    assert.is_true(mesh:stats().publish.waited >= 300, "the handler's publish waited too")
    local seqs = stored(mesh, out)(100)
    assert.equal(100, #seqs)
    helper.run_until(mesh, function() return flooded == 300 end, 20000)
  end)

  it("is checked at open", function()
    for _, bad in ipairs { 0, -1, 1.5, "2" } do
      assert.has_error(function() durable.open { store = "sqlite::memory:", publish_window = { items = bad } } end,
        "durable.open: publish_window.items must be an integer > 0")
    end
    assert.has_error(function() durable.open { store = "sqlite::memory:", publish_window = { item = 2 } } end,
      "durable.open: unknown publish_window option 'item'")
    assert.has_error(function() durable.open { store = "sqlite::memory:", publish_window = 5 } end,
      "durable.open: 'publish_window' must be a table { items =, bytes =, waiting_bytes =, max_block_ms = }")
  end)
end)
