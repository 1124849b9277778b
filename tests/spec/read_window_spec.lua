-- read_window_spec.lua: a mesh's read window (durable.open{ read_window =
-- { items, bytes } }).  The stream readers of a mesh -- its consumers and
-- read_durable subscriptions -- together hold at most that much read ahead
-- and not handed over yet, however many streams and however far behind;
-- a reader refused room waits, and every item still comes, in order.
-- mesh:stats().reads shows what is held.  (A reader that has nothing it
-- could hand over while an item is asked of it reads 16 anyway: the bound
-- is passed by at most that much per reader.)
local helper = require "helper"

describe("the read window", function()
  helper.each()

  -- `n` streams of `per` items each (payload { n = N, pad = `pad` }),
  -- consumed by hubs of `mesh`; returns the largest reads.held and
  -- reads.held_bytes seen at any handler call, and checks every stream came
  -- whole and in order
  local function drain(mesh, n, per, pad)
    local ns = helper.ns()
    local client = mesh:hub("client/" .. ns)
    local publishes = {}
    for i = 1, n do
      for k = 1, per do
        publishes[#publishes + 1] = client:publish_durable({ namespace = "Log", key = ns .. "/o" .. i },
          { n = k, pad = pad })
      end
    end
    helper.ok(require("durable").all(publishes, mesh), 60000)
    local got, max_held, max_bytes, waited = {}, 0, 0, false
    for i = 1, n do
      local key = ns .. "/o" .. i
      got[key] = {}
      assert.is_true(mesh:hub(("client/%s/c%d"):format(ns, i)):consume { namespace = "Log",
        key = function() return key end,
        handler = function(_, item)
          local list = got[key]
          list[#list + 1] = item.payload.n
          local reads = mesh:stats().reads
          if reads.held > max_held then max_held = reads.held end
          if reads.held_bytes > max_bytes then max_bytes = reads.held_bytes end
          waited = waited or reads.waiting > 0
        end })
    end
    helper.run_until(mesh, function()
      for _, list in pairs(got) do if #list < per then return false end end
      return true
    end, 60000)
    for key, list in pairs(got) do
      for k = 1, per do assert.equal(k, list[k], key .. ": item " .. k) end
    end
    return max_held, max_bytes, waited
  end

  it("bounds the items its readers hold, however many streams are behind", function()
    local mesh = helper.open { read_window = { items = 64 } }
    local held, _, waited = drain(mesh, 10, 300, "")
    assert.is_true(held <= 64 + 10 * 16, "held " .. held)
    assert.is_true(waited, "a reader waited for room")
    local reads = mesh:stats().reads
    assert.equal(0, reads.waiting)
  end)

  it("bounds the bytes its readers hold", function()
    local mesh = helper.open { read_window = { bytes = 20000 } }
    local _, bytes = drain(mesh, 2, 100, ("x"):rep(2000))
    -- each item is some 2.3 KB as held; two readers may read 16 past it
    assert.is_true(bytes <= 20000 + 2 * 16 * 2600, "held " .. bytes .. " bytes")
  end)

  it("lets a reader of a custom source past a gap at its cursor, however much it holds ahead",
    function()
    local durable = require "durable"
    local mesh = helper.open { read_window = { items = 64 } }
    local ns = helper.ns()
    local events = ns .. "/events"
    -- ids "e-N" list in another order than their numbers: a page holds
    -- many items ahead of the one at the cursor
    local writes = {}
    for n = 1, 200 do
      writes[#writes + 1] = mesh:put_node { path = ("%s/e-%d"):format(events, n), content = { n = n } }
    end
    helper.ok(durable.all(writes, mesh), 20000)
    local source = durable.source {
      items_namespace = events,
      sequence_of = function(node) return tonumber(node.id:match("^e%-(%d+)$")) end,
      payload_of = function(node) return node.content.n end,
    }
    local got = {}
    local sub = mesh:hub("client/" .. ns):read_durable({ namespace = "Events", key = ns .. "/src" }, 0,
      function(item) got[#got + 1] = item.payload end, source)
    helper.run_until(mesh, function() return #got == 200 end, 20000)
    for n = 1, 200 do assert.equal(n, got[n]) end
    sub:close()
  end)

  it("holds no more for a reader stopped at a missing item, however much follows it", function()
    local durable = require "durable"
    local mesh = helper.open { read_window = { items = 64 } }
    local ns = helper.ns()
    local id = { namespace = "Log", key = ns .. "/doc" }
    local client = mesh:hub("client/" .. ns)
    local publishes = {}
    for n = 1, 2000 do publishes[n] = client:publish_durable(id, { n = n }) end
    helper.ok(durable.all(publishes, mesh), 20000)
    -- item 2 deleted by hand, not trimmed: the reader waits for it
    helper.ok(mesh:delete_node(durable.stream_path(id) .. "/_DurableStreamItem/000000000002"))
    local got = {}
    local sub = client:read_durable(id, 0, function(item) got[#got + 1] = item.sequence end)
    mesh:run_until(function() return false end, 500)
    assert.same({ 1 }, got)
    local held = mesh:stats().reads.held
    assert.is_true(held <= 64 + 16, "held " .. held)
    sub:close()
  end)

  it("is checked at open", function()
    assert.has_error(function()
      require("durable").open { store = "sqlite::memory:", read_window = { items = 0 } }
    end, "durable.open: read_window.items must be an integer > 0")
    assert.has_error(function()
      require("durable").open { store = "sqlite::memory:", read_window = { rows = 5 } }
    end, "durable.open: unknown read_window option 'rows'")
  end)
end)
