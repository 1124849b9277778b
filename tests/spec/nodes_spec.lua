-- nodes_spec.lua: nodes through the Lua module: put, get, query, delete,
-- read-modify-write, each a completion; and the node half of a document's
-- log (a Document applying, in order, the appends it is sent).
local helper = require "helper"
local durable = require "durable"

describe("nodes", function()
  helper.each()

  it("are put, got, queried and deleted through completions", function()
    local mesh = helper.open()
    local ns = helper.ns()
    local written = helper.ok(mesh:put_node { path = ns .. "/doc", node_type = "Document",
      content = { ["$type"] = "Doc", title = "T", n = 3 } })
    assert.equal(ns .. "/doc", written.path)
    assert.equal("integer", math.type(written.version))

    local node = helper.ok(mesh:get_node(ns .. "/doc"))
    assert.equal(ns .. "/doc", node.path)
    assert.equal(ns, node.namespace)
    assert.equal("doc", node.id)
    assert.equal("Document", node.node_type)
    assert.equal(ns .. "/doc", node.main_node)
    assert.equal(written.version, node.version)
    assert.is_true(node.created_at > 0 and node.updated_at >= node.created_at)
    assert.equal('{"$type":"Doc","n":3,"title":"T"}', node.raw)
    assert.same({ ["$type"] = "Doc", title = "T", n = 3 }, node.content)

    assert.is_nil(helper.ok(mesh:get_node(ns .. "/absent")))

    helper.ok(mesh:put_node { path = ns .. "/a", content = {} })
    local list = helper.ok(mesh:query("namespace:" .. ns))
    assert.same({ "a", "doc" }, { list[1].id, list[2].id })
    assert.equal(1, #helper.ok(mesh:query("path:" .. ns .. "/doc")))
    assert.equal(0, #helper.ok(mesh:query("path:" .. ns .. "/absent")))

    assert.is_true(helper.ok(mesh:delete_node(ns .. "/doc")))
    assert.is_nil(helper.ok(mesh:get_node(ns .. "/doc")))
    helper.fails(mesh:delete_node(ns .. "/doc"), "ENOTFOUND")
  end)

  it("keeps raw content text byte for byte", function()
    local mesh = helper.open()
    local ns = helper.ns()
    helper.ok(mesh:put_node { path = ns .. "/raw", content = durable.json('{"b": 1,  "a": [1, 2]}') })
    local node = helper.ok(mesh:get_node(ns .. "/raw"))
    assert.equal('{"b": 1,  "a": [1, 2]}', node.raw)
    assert.same({ b = 1, a = { 1, 2 } }, node.content)
  end)

  it("queries every page", function()
    local mesh = helper.open()
    local ns = helper.ns()
    local puts = {}
    for i = 1, 1003 do
      puts[i] = mesh:put_node { path = ("%s/n%04d"):format(ns, i), content = { i = i } }
    end
    helper.ok(durable.all(puts), 60000)
    local list = helper.ok(mesh:query("namespace:" .. ns), 30000)
    assert.equal(1003, #list)
    assert.equal("n0001", list[1].id)
    assert.equal("n1003", list[1003].id)
  end)

  it("refuses misuse by raising", function()
    local mesh = helper.open()
    assert.has_error(function() mesh:put_node { path = "a//b" } end)
    assert.has_error(function() mesh:put_node { path = 42 } end)
    assert.has_error(function() mesh:get_node() end)
    assert.has_error(function() mesh:put_node { path = "x/y", content = { f = print } } end)
    assert.has_error(function() mesh:query("what:ever") end)
  end)

  describe("update_node", function()
    it("creates when absent, writes nothing when fn returns nil", function()
      local mesh = helper.open()
      local ns = helper.ns()
      local node = helper.ok(mesh:update_node(ns .. "/c", function(n)
        assert.is_nil(n.version)
        n.node_type = "Counter"
        n.content.count = 1
        return n
      end))
      assert.equal(1, node.content.count)
      assert.equal("Counter", node.node_type)
      local same = helper.ok(mesh:update_node(ns .. "/c", function() return nil end))
      assert.equal(node.version, same.version)
    end)

    it("retries on a conflict, so concurrent increments all land", function()
      local mesh = helper.open()
      local ns = helper.ns()
      helper.ok(mesh:put_node { path = ns .. "/c", content = { count = 0 } })
      local calls = 0
      local updates = {}
      for i = 1, 5 do
        updates[i] = mesh:update_node(ns .. "/c", function(n)
          calls = calls + 1
          n.content.count = n.content.count + 1
          return n
        end)
      end
      helper.ok(durable.all(updates), 20000)
      assert.equal(5, helper.ok(mesh:get_node(ns .. "/c")).content.count)
      assert.is_true(calls > 5, "the updates raced: some re-read after a conflict")
    end)

    it("fails with the message when fn raises", function()
      local mesh = helper.open()
      local ns = helper.ns()
      local message = helper.fails(mesh:update_node(ns .. "/c", function() error("no way") end), "EFAILED")
      assert.matches("no way", message)
    end)
  end)

  it("applies appends in order (a Document's log, the node part)", function()
    local mesh = helper.open { plugins = { helper.fixture "document_log.lua" } }
    local ns = helper.ns()
    local doc = ns .. "/doc"
    helper.ok(mesh:put_node { path = doc, node_type = "Document", content = {} })
    local client = mesh:hub("client/" .. ns)
    for i = 1, 3 do
      local applied = helper.ok(client:request(doc, "append", { ["$type"] = "DocumentLogAppend",
        text = "p" .. i, sequence = i }))
      assert.equal(i, applied)
    end
    -- a redelivery writes nothing
    local before = helper.ok(mesh:get_node(doc)).version
    helper.ok(client:request(doc, "append", { text = "p2", sequence = 2 }))
    assert.equal(before, helper.ok(mesh:get_node(doc)).version)
    assert(mesh:run_until(function() return mesh:get_node(doc):wait().content.applied == 3 end, 5000))
    assert.equal("p1p2p3", helper.ok(mesh:get_node(doc)).content.text)
  end)
end)
