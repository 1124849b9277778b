-- principals_spec.lua: a mesh opened with `principal = "alice"` reads,
-- writes, publishes, reads streams and consumes exactly what its grants
-- allow; everything else fails with EACCES and a message naming principal
-- and path, and writes nothing.  Grants are made by a second mesh on the
-- same store, acting as the platform (no principal), as an operator would.
local helper = require "helper"
local durable = require "durable"

local FAMILY = "AclLog"

-- A NodeType that consumes its own AclLog stream, appending each item's
-- text to its node: the handler's write goes through the consuming mesh,
-- so it is checked as the principal too.
local PLUGIN = [[
return {
  node_types = {
    AclDoc = function(config)
      config:with_durable_stream_consumer {
        namespace = "AclLog",
        key = function(hub) return hub.address end,
        handler = function(hub, item)
          return hub:update_node(hub.address, function(node)
            node.content.text = (node.content.text or "") .. item.payload.text
            return node
          end)
        end,
      }
    end,
    -- the same through the handler's transaction, with a second write
    AclTx = function(config)
      config:with_durable_stream_consumer {
        namespace = "AclLog",
        key = function(hub) return hub.address end,
        handler = function(hub, item, tx)
          tx:update_node(hub.address, function(node)
            node.content.text = (node.content.text or "") .. item.payload.text
            return node
          end)
          if item.payload.other then tx:put_node { path = item.payload.other, content = {} } end
          if item.payload.to then
            tx:publish_durable({ namespace = "AclLog", key = item.payload.to }, { text = "fw" })
          end
        end,
      }
    end,
  },
}
]]

describe("a mesh acting as a principal", function()
  helper.each()

  local admin, alice, ns, plugin, url, name

  local STREAMS = { holder_probe_ms = 200, reclaim_ms = 300, backoff_min_ms = 100,
                    backoff_max_ms = 200, liveness_ms = 200 }

  before_each(function()
    if helper.KIND == "sqlite" and os.getenv("DURABLE_TEST_SQLITE") == "memory" then
      pending("two meshes need one store: not sqlite::memory:")
    end
    url = helper.store()
    plugin = helper.tmpname(".lua")
    local f = assert(io.open(plugin, "w"))
    f:write(PLUGIN)
    f:close()
    ns = helper.ns("acl")
    -- one principal per test: grants outlive a test on a shared database
    name = "alice-" .. ns:gsub("/", "-")
    -- the platform's mesh configures no NodeType: only alice's consumes
    admin = helper.open { store = url, streams = STREAMS }
    alice = helper.open { store = url, plugins = { plugin }, streams = STREAMS,
                          principal = name }
  end)

  local function who() return name end
  local function denied(message, verb, path)
    assert.equal(("principal '%s' may not %s '%s'"):format(who(), verb, path), message)
  end
  local function stream(owner) return { namespace = FAMILY, key = owner } end

  it("knows its principal, and the platform is none", function()
    assert.equal(who(), alice:principal())
    assert.is_nil(admin:principal())
  end)

  it("reads only what a read grant covers, and listings leave the rest out", function()
    local doc, other = ns .. "/doc", ns .. "/other"
    helper.ok(admin:put_node { path = doc, node_type = "Plain", content = { a = 1 } })
    helper.ok(admin:put_node { path = other, node_type = "Plain", content = { b = 1 } })
    denied(helper.fails(alice:get_node(doc), "EACCES"), "read", doc)
    local before = alice:stats().activations
    denied(helper.fails(alice:read(doc), "EACCES"), "read", doc)
    assert.equal(before, alice:stats().activations, "a denied mesh read activates nothing")
    helper.fails(alice:query("namespace:" .. ns), "EACCES")

    helper.ok(admin:grant(who(), doc, "read"))
    assert.same({ a = 1 }, helper.ok(alice:get_node(doc)).content)
    assert.same({ a = 1 }, helper.ok(alice:read(doc)).content)
    local listed = helper.ok(alice:query("namespace:" .. ns))
    assert.equal(1, #listed)
    assert.equal(doc, listed[1].path)
    denied(helper.fails(alice:get_node(other), "EACCES"), "read", other)
    -- a hub of alice's mesh reads as alice too
    local hub = alice:hub("client/" .. ns)
    helper.fails(hub:get_node(other), "EACCES")
    assert.same({ a = 1 }, helper.ok(hub:get_node(doc)).content)
  end)

  it("writes only where a write grant covers the owner, and a denied write writes nothing", function()
    local doc = ns .. "/doc"
    helper.ok(admin:put_node { path = doc, node_type = "Plain", content = { v = 0 } })
    helper.ok(admin:grant(who(), doc, "read"))
    denied(helper.fails(alice:put_node { path = doc, content = { v = 1 } }, "EACCES"), "write", doc)
    denied(helper.fails(alice:delete_node(doc), "EACCES"), "write", doc)
    denied(helper.fails(alice:update_node(doc, function(n) n.content.v = 2; return n end), "EACCES"),
      "write", doc)
    local fresh = ns .. "/fresh"
    helper.fails(alice:put_node { path = fresh, content = {} }, "EACCES")
    assert.same({ v = 0 }, helper.ok(admin:get_node(doc)).content)
    assert.is_nil(helper.ok(admin:get_node(fresh)))

    helper.ok(admin:grant(who(), doc, "write"))
    helper.ok(alice:update_node(doc, function(n) n.content.v = 3; return n end))
    assert.same({ v = 3 }, helper.ok(admin:get_node(doc)).content)
    -- satellites follow their owner
    helper.ok(alice:put_node { path = doc .. "/_Notes/n1", content = { note = true } })
    helper.ok(alice:delete_node(doc .. "/_Notes/n1"))
    -- a revoke of write keeps read, and holds at once
    helper.ok(admin:revoke(who(), doc, "write"))
    helper.fails(alice:put_node { path = doc, content = { v = 4 } }, "EACCES")
    assert.same({ v = 3 }, helper.ok(alice:get_node(doc)).content)
  end)

  it("publishes only with write on the stream's owner; a denied publish appends nothing", function()
    local doc = ns .. "/doc"
    helper.ok(admin:put_node { path = doc, node_type = "Plain", content = {} })
    local client = alice:hub("client/" .. ns)
    local message = helper.fails(client:publish_durable(stream(doc), { text = "x" }), "EACCES")
    assert.truthy(message:find(("principal '%s' may not write '%s'"):format(who(), doc), 1, true),
      message)
    -- not even the stream node was made
    assert.is_nil(helper.ok(admin:get_node(durable.stream_path(stream(doc)))))

    helper.ok(admin:grant(who(), doc, "write"))
    assert.equal(1, helper.ok(client:publish_durable(stream(doc), { text = "a" })))
    assert.equal(1, helper.ok(admin:get_node(durable.stream_path(stream(doc)))).content.LastSequence)
  end)

  it("reads a stream only with read on its owner", function()
    local doc = ns .. "/doc"
    helper.ok(admin:put_node { path = doc, node_type = "Plain", content = {} })
    local ahub = admin:hub("client/admin" .. ns)
    helper.ok(ahub:publish_durable(stream(doc), { text = "a" }))
    local client = alice:hub("client/" .. ns)

    local got = {}
    local sub = client:read_durable(stream(doc), 0, function(item) got[#got + 1] = item.sequence end)
    helper.run_until(alice, function() return sub:status() ~= "open" end)
    local status, why = sub:status()
    assert.equal("failed", status)
    assert.truthy(why:find(("principal '%s' may not read"):format(who()), 1, true), why)
    assert.same({}, got)
    sub:close()

    helper.ok(admin:grant(who(), doc, "read"))
    sub = client:read_durable(stream(doc), 0, function(item) got[#got + 1] = item.sequence end)
    helper.run_until(alice, function() return #got == 1 end)
    sub:close()
  end)

  it("activates no node it may not read, and tells it from no node by nothing", function()
    local hidden, shown = ns .. "/hidden", ns .. "/shown"
    helper.ok(admin:put_node { path = hidden, node_type = "AclDoc", content = {} })
    helper.ok(admin:put_node { path = shown, node_type = "AclDoc", content = {} })
    local before = alice:stats().activations
    local hub = assert(alice:hub(hidden))
    local absent = assert(alice:hub(ns .. "/none"))
    assert.equal(before, alice:stats().activations, "the hidden node's hub was activated")
    assert.equal(absent.node_type, hub.node_type, "the hidden node's type shows")
    -- with read, the node's own hub
    helper.ok(admin:grant(who(), shown, "read"))
    assert.equal("AclDoc", assert(alice:hub(shown)).node_type)
  end)

  it("reaches no node's hub it may not read by a request or a post either, node or none", function()
    local hidden, none = ns .. "/hidden", ns .. "/none"
    helper.ok(admin:put_node { path = hidden, node_type = "AclDoc", content = {} })
    local client = assert(alice:hub("client/" .. ns))
    local before = alice:stats().activations
    denied(helper.fails(client:request(hidden, "ping"), "EACCES"), "read", hidden)
    denied(helper.fails(client:request(none, "ping"), "EACCES"), "read", none)
    assert(client:post(hidden, "hello", {}))
    helper.run_until(alice, function()
      return #helper.log_lines(("the post of 'hello' from 'client/%s' to '%s' was refused: principal '%s' "
        .. "may not read '%s'"):format(ns, hidden, who(), hidden)) == 1
    end)
    assert.equal(before, alice:stats().activations, "a hub was activated")
    assert.is_nil(helper.find(alice, hidden))
    -- nor through the runtime's own hub, which its messages speak for
    assert.has_error(function() alice:reads_hub() end,
      ("mesh:reads_hub(): the runtime's own hub is not for a mesh acting as principal '%s'"):format(who()))
    -- with read, the request reaches the node's hub
    helper.ok(admin:grant(who(), hidden, "read"))
    helper.ok(client:request(hidden, "ping"))
    assert.is_not_nil(helper.find(alice, hidden))
  end)

  it("never counts a read it may not make against an item (max_attempts): nothing is "
    .. "dead-lettered, nothing acknowledged", function()
    local owner, events = ns .. "/counted", ns .. "/events"
    helper.ok(admin:grant(who(), owner, "read,write")) -- not `events`
    helper.ok(admin:hub("client/" .. ns .. "/admin"):publish_durable({ namespace = FAMILY, key = owner },
      { text = "x" }))
    local hub = assert(alice:hub("client/" .. ns))
    assert.is_true(hub:consume { namespace = FAMILY, key = function() return owner end,
      max_attempts = 1, handler = function() end,
      source = function()
        return durable.source { items_namespace = events,
          sequence_of = function(node) return tonumber(node.id) end,
          payload_of = function(node) return node.content end }
      end })
    helper.run_until(alice, function() return #helper.log_lines("was NOT acknowledged") >= 3 end)
    assert.equal(0, #helper.log_lines("moved to the dead letters"))
    local s = helper.ok(admin:get_node((durable.stream_path { namespace = FAMILY, key = owner })))
    assert.equal(0, s.content.Checkpoint)
    assert.equal(1, s.content.LastSequence)
  end)

  it("consumes only with read and write on the owner", function()
    local ro, rw = ns .. "/ro", ns .. "/rw"
    helper.ok(admin:put_node { path = ro, node_type = "AclDoc", content = {} })
    helper.ok(admin:put_node { path = rw, node_type = "AclDoc", content = {} })
    -- read alone: the claim is refused, logged, and nothing is handled
    helper.ok(admin:grant(who(), ro, "read"))
    local ahub = admin:hub("client/admin" .. ns)
    helper.ok(ahub:publish_durable(stream(ro), { text = "no" }))
    assert(alice:hub(ro)) -- its consumer starts, and asks to claim
    helper.run_until(alice, function()
      return #helper.log_lines(("principal '%s' may not write '%s'"):format(who(), ro)) > 0
    end)
    local ro_state = helper.ok(admin:get_node(durable.stream_path(stream(ro)))).content
    assert.is_true(ro_state.Subscriber == nil or ro_state.Subscriber == durable.null)
    assert.equal(0, ro_state.Checkpoint or 0)
    assert.is_nil(helper.ok(admin:get_node(ro)).content.text)

    -- read and write: alice publishes through her own mesh, whose stream hub
    -- wakes the owner there; her consumer claims, handles, acknowledges

    helper.ok(admin:grant(who(), rw, "read,write"))
    local client = alice:hub("client/" .. ns)
    helper.ok(client:publish_durable(stream(rw), { text = "p1" }))
    helper.ok(client:publish_durable(stream(rw), { text = "p2" }))
    helper.run_until(alice, function()
      local node = helper.ok(alice:get_node(rw))
      return node.content.text == "p1p2"
    end)
    helper.run_until(alice, function()
      return helper.ok(admin:get_node(durable.stream_path(stream(rw)))).content.Checkpoint == 2
    end)
  end)

  it("commits a handler's transaction as the principal: one denied write, nothing written", function()
    local doc, other = ns .. "/tx", ns .. "/forbidden"
    helper.ok(admin:put_node { path = doc, node_type = "AclTx", content = {} })
    helper.ok(admin:grant(who(), doc, "read,write"))
    local client = alice:hub("client/" .. ns)
    helper.ok(client:publish_durable(stream(doc), { text = "a", other = other }))
    helper.run_until(alice, function()
      return #helper.log_lines(("principal '%s' may not write '%s'"):format(who(), other)) > 0
    end)
    assert.is_nil(helper.ok(admin:get_node(doc)).content.text, "nothing of the item")
    assert.is_nil(helper.ok(admin:get_node(other)))
    assert.equal(0, helper.ok(admin:get_node(durable.stream_path(stream(doc)))).content.Checkpoint or 0)
    -- granted, the retry commits both
    helper.ok(admin:grant(who(), other, "write"))
    helper.run_until(alice, function()
      return helper.ok(admin:get_node(doc)).content.text == "a"
    end)
    assert.is_not_nil(helper.ok(admin:get_node(other)))
  end)

  it("fails an item whose transaction appends where the principal may not write", function()
    local doc, other = ns .. "/txp", ns .. "/elsewhere"
    helper.ok(admin:put_node { path = doc, node_type = "AclTx", content = {} })
    helper.ok(admin:grant(who(), doc, "read,write"))
    local client = alice:hub("client/" .. ns)
    helper.ok(client:publish_durable(stream(doc), { text = "a", to = other }))
    helper.run_until(alice, function()
      return #helper.log_lines(("principal '%s' may not write '%s'"):format(who(), other)) > 0
    end)
    assert.is_nil(helper.ok(admin:get_node(doc)).content.text, "nothing of the item")
    assert.equal(0, helper.ok(admin:get_node(durable.stream_path(stream(doc)))).content.Checkpoint or 0)
  end)

  it("may not reach a stream hub by its protocol: EACCES, nothing appended", function()
    local doc = ns .. "/raw"
    helper.ok(admin:put_node { path = doc, node_type = "AclDoc", content = {} })
    local ahub = admin:hub("client/admin" .. ns)
    helper.ok(ahub:publish_durable(stream(doc), { text = "one" }))
    local client = alice:hub("client/" .. ns)
    local path = durable.stream_path(stream(doc))
    for _, req in ipairs {
      { "durable.append", { PayloadJson = '{"text":"x"}' } },
      { "durable.claim", { Subscriber = "client/" .. ns } },
    } do
      local message = helper.fails(client:request(path, req[1], req[2]), "EACCES")
      assert.truthy(message:find("the stream protocol is the runtime's", 1, true), message)
    end
    local state = helper.ok(admin:get_node(path)).content
    assert.equal(1, state.LastSequence)
    assert.is_true(state.Subscriber == nil or state.Subscriber == durable.null)
  end)

  it("finds what it may read in a type listing behind pages of what it may not", function()
    for i = 1, 120 do
      helper.ok(admin:put_node { path = ("%s/a%03d"):format(ns, i), node_type = "AclMany", content = {} })
    end
    helper.ok(admin:put_node { path = ns .. "/zzz", node_type = "AclMany", content = {} })
    helper.ok(admin:grant(who(), ns .. "/zzz", "read"))
    local found = helper.ok(alice:query("type:AclMany"))
    local mine = {}
    for _, n in ipairs(found) do if n.path:sub(1, #ns) == ns then mine[#mine + 1] = n.path end end
    assert.same({ ns .. "/zzz" }, mine)
  end)

  it("may not grant, and lists only its own grants", function()
    local doc = ns .. "/doc"
    local message = helper.fails(alice:grant(who(), doc, "read,write"), "EACCES")
    assert.truthy(message:find("grants are the platform's", 1, true), message)
    helper.fails(alice:revoke(who(), doc), "EACCES")
    assert.same({}, helper.ok(alice:grants()))
    helper.ok(admin:grant(who(), doc, "read"))
    helper.ok(admin:grant("bob-" .. ns:gsub("/", "-"), doc, "write"))
    assert.same({ { principal = who(), prefix = doc, mode = "read" } }, helper.ok(alice:grants()))
    helper.fails(alice:grants("bob-" .. ns:gsub("/", "-")), "EACCES")
    local all = helper.ok(admin:grants())
    local mine = {}
    for _, g in ipairs(all) do
      if g.prefix == doc then mine[#mine + 1] = g.principal .. " " .. g.mode end
    end
    table.sort(mine)
    assert.same({ who() .. " read", "bob-" .. ns:gsub("/", "-") .. " write" }, mine)
  end)

  it("refuses 'platform' and malformed names as misuse", function()
    local ok, why = pcall(helper.open, { store = url, principal = "platform" })
    assert.is_false(ok)
    assert.truthy(tostring(why):find("'platform' is not a principal's name", 1, true), why)
    assert.has_error(function() helper.open { store = url, principal = "" } end)
    assert.has_error(function() helper.open { store = url, principal = "a\nb" } end)
    assert.has_error(function() helper.open { store = url, principal = 7 } end)
    assert.has_error(function() admin:grant("platform", ns, "read") end)
    assert.has_error(function() admin:grant(who(), ns, "execute") end)
    -- "Platform" is an ordinary principal: it may do nothing
    local p = helper.open { store = url, principal = "Platform" }
    helper.ok(admin:put_node { path = ns .. "/doc", content = {} })
    helper.fails(p:get_node(ns .. "/doc"), "EACCES")
  end)
end)
