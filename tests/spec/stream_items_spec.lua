-- stream_items_spec.lua: what a producer gets, and what a stream's nodes
-- hold: a publish is cold and durable; payload text is kept byte for byte;
-- sequences are never handed out twice, even past an item left above
-- LastSequence by a crash; bad stream ids and missing payloads are refused
-- with messages naming the rule before anything is written; only producers
-- create streams; the items of a stream owned by a thread message land in
-- durable_stream_items.
local helper = require "helper"
local durable = require "durable"
local probe = require "probe"

local FIXTURE = probe.FIXTURE
local FAMILY = probe.FAMILY
local STREAMS = probe.STREAMS

describe("a durable stream's items", function()
  helper.each()

  local mesh, ns, client

  local function open()
    mesh = helper.open { plugins = { FIXTURE }, streams = STREAMS }
    ns = helper.ns()
    client = mesh:hub("client/" .. ns)
    local delay = ns .. "/delay"
    helper.ok(mesh:put_node { path = delay, node_type = "StreamDelay" })
    probe.reset(delay, 2)
  end

  local function stream(owner) return { namespace = FAMILY, key = owner } end
  local function pause(ms) mesh:run_until(function() return false end, ms) end
  local function exists(path) return #helper.ok(mesh:query("path:" .. path)) end

  local function read_all(owner, n, after)
    local got = {}
    local sub = client:read_durable(stream(owner), after or 0, function(item) got[#got + 1] = item end)
    helper.run_until(mesh, function() return #got >= n end)
    sub:close()
    return got
  end

  it("are published cold: nothing is sent until the completion is used", function()
    open()
    local owner = ns .. "/cold"
    local path = durable.stream_path(stream(owner))
    local c = client:publish_durable(stream(owner), { value = 1 })
    pause(100)
    assert.equal("pending", c:status())
    assert.equal(0, exists(path), "no stream node yet")
    assert.equal(1, helper.ok(c))
    assert.equal(1, exists(path))
    -- a second use of the same completion does not publish again
    assert.equal(1, helper.ok(c:next(function(seq) return seq end)))
    assert.equal(1, helper.ok(mesh:get_node(path)).content.LastSequence)
  end)

  it("keep the payload text byte for byte: $type first, key order, unicode, number spellings", function()
    open()
    local owner = ns .. "/bytes"
    local texts = {
      '{"$type":"DocumentLogAppend","z":1,"a":"é ✓ \\u00e9 𝄞","n":1.50,"e":1e3,"nested":{"b":[],"a":{}}}',
      '{"a":1,  "$type":"Late"}',
      '"a plain string"',
      '[3,2,1]',
    }
    for i, text in ipairs(texts) do
      assert.equal(i, helper.ok(client:publish_durable(stream(owner), durable.json(text))))
    end
    -- a table: "$type" first, then its keys in byte order
    assert.equal(5, helper.ok(client:publish_durable(stream(owner),
      { text = "ü", ["$type"] = "DocumentLogAppend", offset = 0, Big = true })))
    texts[5] = '{"$type":"DocumentLogAppend","Big":true,"offset":0,"text":"ü"}'
    local got = read_all(owner, 5)
    local _, items_ns = durable.stream_path(stream(owner))
    for i, item in ipairs(got) do
      assert.equal(i, item.sequence)
      assert.equal(texts[i], item.raw)
      local node = helper.ok(mesh:get_node(("%s/%012d"):format(items_ns, i)))
      assert.equal(texts[i], node.content.PayloadJson)
      assert.equal("DurableStreamItem", node.node_type)
      assert.equal("integer", math.type(item.appended_at))
      assert.same({ namespace = FAMILY, key = owner }, item.stream)
    end
    assert.equal("DocumentLogAppend", got[1].payload["$type"])
    assert.equal("é ✓ é 𝄞", got[1].payload.a)
    assert.equal("a plain string", got[3].payload)
    assert.same({ 3, 2, 1 }, got[4].payload)
  end)

  it("never hand out a sequence twice, even with an item stored above LastSequence", function()
    open()
    local owner = ns .. "/crash"
    local path, items_ns = durable.stream_path(stream(owner))
    for i = 1, 3 do assert.equal(i, helper.ok(client:publish_durable(stream(owner), { value = i }))) end
    -- a crash between writing item 4 and recording LastSequence 4
    local function orphan_item(seq)
      helper.ok(mesh:put_node { path = ("%s/%012d"):format(items_ns, seq), node_type = "DurableStreamItem",
        content = { Sequence = seq, PayloadJson = ('{"value":%d}'):format(seq), AppendedAt = durable.null } })
    end
    orphan_item(4)
    assert.equal(3, helper.ok(mesh:get_node(path)).content.LastSequence)
    -- the active stream hub counted on 4: its create is refused, it derives again
    assert.equal(5, helper.ok(client:publish_durable(stream(owner), { value = 5 })))
    -- and a fresh activation derives from LastSequence and the highest item
    orphan_item(6)
    helper.ok(mesh:recycle(path))
    assert.equal(7, helper.ok(client:publish_durable(stream(owner), { value = 7 })))
    local seqs = {}
    for _, item in ipairs(read_all(owner, 7)) do
      seqs[#seqs + 1] = item.sequence
      assert.equal(item.sequence, item.payload.value)
    end
    assert.same(probe.range(7), seqs)
    assert.equal(7, helper.ok(mesh:get_node(path)).content.LastSequence)
  end)

  it("are refused for bad stream ids and missing payloads, with messages naming the rule, writing nothing",
    function()
      open()
      local key = ns .. "/refused"
      local ids = {
        { nil, key, "A durable stream needs a non-empty Namespace without '/' (was '')." },
        { "", key, "A durable stream needs a non-empty Namespace without '/' (was '')." },
        { "  ", key, "A durable stream needs a non-empty Namespace without '/' (was '  ')." },
        { "a/b", key, "A durable stream needs a non-empty Namespace without '/' (was 'a/b')." },
        { FAMILY, nil, "Durable stream '" .. FAMILY .. "' needs the owning node's path as Key." },
        { FAMILY, "", "Durable stream '" .. FAMILY .. "' needs the owning node's path as Key." },
        { FAMILY, ns .. "//x", "empty segment" },
      }
      for _, case in ipairs(ids) do
        local id = { namespace = case[1], key = case[2] }
        for _, call in ipairs {
          function() return client:publish_durable(id, { value = 1 }) end,
          function() return client:read_durable(id, 0, function() end) end,
          case[2] ~= nil and function()
            return client:consume { namespace = case[1], key = function() return case[2] end,
                                    handler = function() end }
          end or nil,
        } do
          local ok, err = pcall(call)
          assert.is_false(ok)
          assert.is_truthy(tostring(err):find(case[3], 1, true), ("expected %q in %q"):format(case[3], err))
        end
      end
      local name = FAMILY .. "@" .. key
      for _, payload in ipairs { durable.null, false } do
        if payload == false then payload = nil end
        local ok, err = pcall(client.publish_durable, client, { namespace = FAMILY, key = key }, payload)
        assert.is_false(ok)
        assert.matches("A durable stream item for " .. name:gsub("%p", "%%%0") .. " needs a payload%.$", err)
      end
      local ok, err = pcall(client.publish_durable, client, { namespace = FAMILY, key = key },
        { f = function() end })
      assert.is_false(ok)
      assert.matches("cannot encode a function", err)
      assert.has_error(function() durable.json("") end)
      assert.has_error(function() client:publish_durable("ProbeStream@x", { value = 1 }) end)
      pause(50)
      assert.equal(0, exists(durable.stream_path { namespace = FAMILY, key = key }), "nothing written")
    end)

  it("are never created by a consumer: its requests find no stream and make none", function()
    open()
    local owner = ns .. "/none"
    local path = durable.stream_path(stream(owner))
    local hub = assert(mesh:hub("client/" .. ns .. "/consumer"))
    assert.is_true(hub:consume {
      namespace = FAMILY, key = function() return owner end,
      handler = function(h, item) return probe.handle("none", h, item) end,
    })
    pause(300)
    assert.equal(0, exists(path), "a consumer without a stream stays dormant")
    -- the consumer's own requests, sent by hand: refused, nothing made
    for _, req in ipairs {
      { "durable.claim", { Subscriber = hub.address } },
      { "durable.ack", { Subscriber = hub.address, Epoch = 1, Sequence = 1 } },
      { "durable.release", { Subscriber = hub.address, Epoch = 1 } },
    } do
      helper.fails(hub:request(path, req[1], req[2]), "ENOTFOUND")
    end
    assert.equal(0, exists(path))
    -- a producer creates it, and the waiting consumer gets the items
    helper.ok(client:publish_durable(stream(owner), { value = 1 }))
    assert.equal(1, exists(path))
  end)

  it("of a stream owned by a thread message are stored in durable_stream_items, end to end", function()
    open()
    local owner = ns .. "/thread/_ThreadMessage/m1"
    -- the message itself consumes its stream (its NodeType has a consumer)
    helper.ok(mesh:put_node { path = owner, node_type = "DurableStreamConsumerProbe", content = { text = "hi" } })
    local path, items_ns = durable.stream_path(stream(owner))
    assert.equal(owner .. "/_DurableStream/" .. FAMILY, path)
    for i = 1, 3 do assert.equal(i, helper.ok(client:publish_durable(stream(owner), { value = i }))) end
    helper.run_until(mesh, function() return #probe.of(owner) == 3 end)
    assert.same({ 1, 2, 3 }, probe.snapshot(owner))
    local state = helper.ok(mesh:get_node(path)).content
    assert.equal(owner, state.Subscriber)
    assert.equal(3, #read_all(owner, 3))
    local items = helper.ok(mesh:query("namespace:" .. items_ns))
    assert.equal(3, #items)
    assert.equal(ns .. "/thread", items[1].main_node, "a satellite belongs to the first owner")
    -- which table holds them: ask the store itself
    local store = mesh:store_name()
    local sql = ("SELECT count(*) FROM %%sdurable_stream_items WHERE namespace = '%s';"
      .. " SELECT count(*) FROM %%sthreads WHERE namespace = '%s';"):format(items_ns, items_ns)
    local code, out, err
    if helper.KIND == "postgres" then
      local schema = ns:match("^[^/]+")
      sql = sql:format('"' .. schema .. '".', '"' .. schema .. '".')
      code, out, err = helper.sh("psql -X -A -t -q " .. helper.quote(store) .. " -c " .. helper.quote(sql))
    elseif store:match("^sqlite:/") then
      sql = sql:format("", "")
      code, out, err = helper.sh("sqlite3 " .. helper.quote(store:sub(8)) .. " " .. helper.quote(sql))
    else
      return pending("an in-memory SQLite store cannot be looked at from outside")
    end
    if code == 127 then return pending("no psql / sqlite3 on this machine") end
    assert.equal(0, code, err)
    assert.same({ "3", "0" }, { out:match("^(%d+)%s+(%d+)%s*$") })
  end)
end)
