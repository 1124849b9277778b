-- read_store_spec.lua: a mesh's read store.  durable.open{ read_store = URL }
-- opens URL for reading only (a PostgreSQL standby, in production) and
-- hub:read_durable reads there, while the live tail is still heard from
-- the store; `durable get`, `search`, `streams` and `read` take
-- --read-store.  Here the read store is the store itself (the same file, the
-- same database): what a real standby adds -- it replays later than the
-- store commits -- is failover_spec's.
local helper = require "helper"
local durable = require "durable"

local BIN = os.getenv("DURABLE_BIN") or helper.BUILD .. "/durable"

describe("a read store", function()
  helper.each()

  -- a store URL that a second open reaches (not a private memory database)
  local function shared_store()
    if helper.KIND == "sqlite" and os.getenv("DURABLE_TEST_SQLITE") == "memory" then
      pending("a memory database is private to its open")
      return nil
    end
    return helper.store()
  end

  it("serves hub:read_durable: the backlog, then the tail from this mesh and another, in order", function()
    local url = shared_store()
    if not url then return end
    local writer = helper.open { store = url }
    local ns = helper.ns()
    local id = { namespace = "Log", key = ns .. "/doc" }
    local producer = writer:hub("client/w")
    for i = 1, 5 do assert.equal(i, helper.ok(producer:publish_durable(id, { i = i }))) end

    local reader = helper.open { store = url, read_store = url }
    local got, errors = {}, {}
    local sub = reader:hub("client/r"):read_durable(id, 0, function(item)
      assert.equal(#got + 1, item.payload.i)
      got[#got + 1] = item.sequence
    end, nil, function(message) errors[#errors + 1] = message end)
    helper.run_until(reader, function() return #got == 5 end)
    -- the tail: appended by another mesh (heard as "changed elsewhere"),
    -- then by this one (heard with the sequence)
    local pending_publishes = {}
    for i = 6, 205 do pending_publishes[#pending_publishes + 1] = producer:publish_durable(id, { i = i }) end
    helper.ok(durable.all(pending_publishes), 10000)
    helper.run_until(reader, function() return #got == 205 end, 10000)
    local mine = reader:hub("client/r2")
    for i = 206, 210 do assert.equal(i, helper.ok(mine:publish_durable(id, { i = i }))) end
    helper.run_until(reader, function() return #got == 210 end)
    for i = 1, 210 do assert.equal(i, got[i]) end
    assert.same({}, errors)
    sub:close()
  end)

  it("is checked at open: a bad option raises, a store that is not there fails", function()
    assert.has_error(function() durable.open { store = "sqlite::memory:", read_store = "" } end,
      "durable.open: 'read_store' must be a store URL string")
    assert.has_error(function() durable.open { store = "sqlite::memory:", read_store = 42 } end,
      "durable.open: 'read_store' must be a store URL string")
    -- nothing to read there: refused, and nothing made
    local missing = helper.tmpname(".db")
    local mesh, message, code = durable.open { store = "sqlite::memory:", read_store = "sqlite:" .. missing }
    assert.is_nil(mesh)
    assert.equal("ENOTFOUND", code)
    assert.matches("no SQLite file at '" .. missing, message, 1, true)
    assert.is_nil(io.open(missing, "r"))
    -- a file that is not a durable store
    local other = helper.tmpname(".db")
    local f = assert(io.open(other, "w"))
    f:close()
    mesh, message, code = durable.open { store = "sqlite::memory:", read_store = "sqlite:" .. other }
    assert.is_nil(mesh)
    assert.equal("ENOTFOUND", code)
    assert.matches("is no durable store", message, 1, true)
  end)

  it("serves durable get, search, streams and read --read-store, and only those", function()
    local url = shared_store()
    if not url then return end
    local writer = helper.open { store = url }
    local ns = helper.ns()
    helper.ok(writer:put_node { path = ns .. "/doc", node_type = "Doc", content = { a = 1 } })
    local producer = writer:hub("client/w")
    for i = 1, 3 do helper.ok(producer:publish_durable({ namespace = "Log", key = ns .. "/doc" }, { i = i })) end
    local rs = " --read-store " .. helper.quote(url)
    local function run(args)
      local code, out, err = helper.sh(helper.quote(BIN) .. " --store sqlite:/nonexistent/x.db " .. args)
      return code, out, err
    end
    -- get, search, streams: the store itself is never opened (it could not be)
    local code, out, err = run("get @" .. ns .. "/doc" .. rs)
    assert.equal(0, code, err)
    assert.equal(1, durable.decode(out).content.a)
    code, out, err = run("search namespace:" .. ns .. rs)
    assert.equal(0, code, err)
    assert.matches('"path":"' .. ns .. '/doc"', out, 1, true)
    code, out, err = run("streams --json" .. rs)
    assert.equal(0, code, err)
    assert.matches('"key":"' .. ns .. '/doc"', out, 1, true)
    -- read needs the store too (it hears the tail there)
    code, out, err = helper.sh(helper.quote(BIN) .. " --store " .. helper.quote(url)
      .. " read Log " .. ns .. "/doc" .. rs)
    assert.equal(0, code, err)
    local seqs = {}
    for line in out:gmatch("[^\n]+") do seqs[#seqs + 1] = durable.decode(line).sequence end
    assert.same({ 1, 2, 3 }, seqs)
    -- a command that writes has no --read-store
    code, _, err = run("put @" .. ns .. "/x Doc '{}'" .. rs)
    assert.equal(2, code)
    assert.matches("unknown option '--read-store'", err, 1, true)
  end)
end)
