-- input_spec.lua: what the Lua face takes from its caller is checked before
-- anything happens, and a refusal writes nothing and names what was wrong.
--
--   - a NUL byte in a name (path, namespace, key, node type, hub address,
--     message type, query, JSON text) is refused: C would end the string
--     there ("Space/a\0/../../etc" would name "Space/a");
--   - a hub address is a path (mesh:hub("a//b") is refused, "client/app"
--     is fine);
--   - node types are one line of printable UTF-8 of 1..255 bytes;
--   - the C primitives (mesh._write, hub._publish, ...) are not on user
--     objects.
local helper = require "helper"
local durable = require "durable"
local core = require "durable.core"

-- The message of the error `fn` raises (fails when it does not raise).
local function raised(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

-- `fn` raises a message that contains each of the plain strings given.
local function refuses(fn, ...)
  local message = raised(fn)
  for _, part in ipairs({ ... }) do assert.matches(part, message, 1, true) end
  return message
end

-- The nodes under `ns`.
local function nodes(mesh, ns) return helper.ok(mesh:query("namespace:" .. ns)) end

local function plugin_file(text)
  local file = helper.tmpname(".lua")
  local f = assert(io.open(file, "w"))
  f:write(text)
  f:close()
  return file
end

describe("input", function()
  helper.each()

  describe("a NUL byte", function()
    it("in a path is refused by every node call, and nothing is written", function()
      local mesh = helper.open()
      local ns = helper.ns()
      local bad = ns .. "/a\0/../../etc"
      local shown = 'path must not contain a NUL byte (was "' .. ns .. '/a\\0/../../etc")'
      refuses(function() mesh:put_node { path = bad, content = {} } end, shown)
      refuses(function() mesh:get_node(bad) end, "path must not contain a NUL byte")
      refuses(function() mesh:delete_node(bad) end, "path must not contain a NUL byte")
      refuses(function() mesh:read(bad) end, "path must not contain a NUL byte")
      refuses(function() mesh:recycle(bad) end, "must not contain a NUL byte")
      -- update_node reads first: the read is refused at the call
      refuses(function() mesh:update_node(bad, function(n) return n end) end,
        "path must not contain a NUL byte")
      assert.same({}, nodes(mesh, ns))
      assert.is_nil(helper.ok(mesh:get_node(ns .. "/a")))
      assert.is_nil(core.path_check(bad))
      assert.matches("must not contain a NUL byte", select(2, core.path_check(bad)), 1, true)
    end)

    it("in a node type, a query or its cursor is refused", function()
      local mesh = helper.open()
      local ns = helper.ns()
      refuses(function() mesh:put_node { path = ns .. "/a", node_type = "Doc\0ument" } end,
        'node_type must not contain a NUL byte (was "Doc\\0ument")')
      refuses(function() mesh:query("namespace:" .. ns .. "\0/x") end,
        "query must not contain a NUL byte")
      refuses(function() core.primitives.mesh.query(mesh, "namespace:" .. ns, "a\0b", 10,
        function() end) end, "after must not contain a NUL byte")
      assert.same({}, nodes(mesh, ns))
    end)

    it("in a hub address or a message type is refused", function()
      local mesh = helper.open()
      local ns = helper.ns()
      helper.ok(mesh:put_node { path = ns .. "/doc", content = {} })
      refuses(function() mesh:hub("client/a\0b") end,
        'hub address must not contain a NUL byte (was "client/a\\0b")')
      local client = mesh:hub("client/spec")
      refuses(function() client:request(ns .. "/doc\0/x", "ping") end,
        "request: address must not contain a NUL byte")
      refuses(function() client:request(ns .. "/doc", "pi\0ng") end,
        "request: message type must not contain a NUL byte")
      refuses(function() client:post(ns .. "/doc\0", "ping") end,
        "post: address must not contain a NUL byte")
      refuses(function() client:post(ns .. "/doc", "x\0y") end,
        "post: message type must not contain a NUL byte")
      refuses(function() client:timer(1, "x\0y") end,
        "timer: message type must not contain a NUL byte")
      assert.is_nil(helper.find(mesh, "client/a"))
    end)

    it("in a stream's namespace or key is refused, and nothing is appended", function()
      local mesh = helper.open()
      local ns = helper.ns()
      local owner = ns .. "/a"
      local client = mesh:hub("client/spec")
      refuses(function()
        client:publish_durable({ namespace = "L\0/x", key = owner .. "\0//" }, { n = 1 })
      end, "stream namespace must not contain a NUL byte")
      refuses(function() client:publish_durable({ namespace = "L", key = owner .. "\0//" }, 1) end,
        'stream key must not contain a NUL byte (was "' .. owner .. '\\0//")')
      refuses(function() client:read_durable({ namespace = "L\0x", key = owner }, 0,
        function() end) end, "stream namespace must not contain a NUL byte")
      refuses(function() client:consume { namespace = "L\0x", handler = function() end } end,
        "stream namespace must not contain a NUL byte")
      refuses(function() durable.stream_path { namespace = "L", key = owner .. "\0x" } end,
        "stream key must not contain a NUL byte")
      refuses(function() durable.document_parts(owner .. "\0x") end,
        "must not contain a NUL byte")
      refuses(function() durable.source { items_namespace = owner .. "\0x",
        sequence_of = function() end } end, "must not contain a NUL byte")
      -- the primitive itself refuses too (payload text included)
      refuses(function() core.primitives.hub.publish(client, "L", owner .. "\0//", "1",
        function() end) end, "stream key must not contain a NUL byte")
      refuses(function() core.primitives.hub.publish(client, "L", owner, "1\0garbage",
        function() end) end, "payload JSON text must not contain a NUL byte")
      assert.same({}, nodes(mesh, owner .. "/_DurableStream"))
      assert.same({}, nodes(mesh, "L@" .. owner))
      assert.same({}, nodes(mesh, ns))
    end)

    it("in JSON text is refused; in a string value it is refused by the store, never cut",
      function()
        local mesh = helper.open()
        local ns = helper.ns()
        refuses(function() durable.json('{"a":1}\0{"b":2}') end,
          "durable.json: JSON text must not contain a NUL byte")
        local value, message, code = durable.decode('{"a":1}\0junk')
        assert.is_nil(value)
        assert.equal("EINVAL", code)
        assert.matches("must not contain a NUL byte", message, 1, true)
        refuses(function() durable.encode { ["a\0b"] = 1 } end,
          "object keys must not contain a NUL byte")
        -- a NUL inside a string value is \u0000 in the text, which the store
        -- refuses (so does PostgreSQL's jsonb): refused, with the write named
        assert.equal('{"s":"a\\u0000b"}', durable.encode { s = "a\0b" })
        refuses(function() mesh:put_node { path = ns .. "/v", content = { s = "a\0b" } } end,
          "content of '" .. ns .. "/v' is not JSON")
        assert.same({}, nodes(mesh, ns))
      end)

    it("in a NodeType name or a message type of a plugin is refused at open", function()
      local file = plugin_file([[
return { node_types = { ["Doc\0ument"] = function(config) end } }
]])
      refuses(function() durable.open { store = "sqlite::memory:", plugins = { file } } end,
        file, "node type must not contain a NUL byte")
      file = plugin_file([[
return { node_types = { Doc = function(config)
  config:on("he\0llo", function() return 1 end)
end } }
]])
      refuses(function() durable.open { store = "sqlite::memory:", plugins = { file } } end,
        "message type must not contain a NUL byte")
      assert.equal(0, core.meshes())
    end)

    it("in the store URL is refused", function()
      refuses(function() durable.open { store = "sqlite::memory:\0x" } end,
        "'store' must not contain a NUL byte")
    end)
  end)

  describe("a hub address", function()
    it("must be a path: mesh:hub('a//b') is refused, naming the address and the rule", function()
      local mesh = helper.open()
      for _, bad in ipairs { "a//b", "client/", "/client", "client/../x", "_x/y", "client\\x" } do
        refuses(function() mesh:hub(bad) end, "hub address: path '" .. bad .. "' is invalid")
        assert.is_nil(helper.find(mesh, bad))
      end
      refuses(function() mesh:hub("a//b") end, "empty segment")
      local client = mesh:hub("client/spec")
      refuses(function() client:request("a//b", "ping") end,
        "cannot send 'ping': path 'a//b' is invalid")
      refuses(function() client:post("a//b", "ping") end,
        "cannot send 'ping': path 'a//b' is invalid")
      refuses(function() mesh:recycle("a//b") end, "hub address: path 'a//b' is invalid")
      assert.equal(0, mesh:stats().activations)
    end)

    it("used by the specs and examples is valid", function()
      local mesh = helper.open()
      for _, good in ipairs { "client/spec", "client/app", "client/gc", "client/embed",
                              "client/mp-producer", "cli/publish-1", "bench/producer" } do
        assert.equal(good, mesh:hub(good).address)
      end
    end)
  end)

  describe("a node type", function()
    local long = ("T"):rep(256)

    it("that is not one line of printable UTF-8 of at most 255 bytes is refused", function()
      local mesh = helper.open()
      local ns = helper.ns()
      for _, case in ipairs {
        { "Doc\nument", "node type 'Doc\\x0aument' is invalid: control character at byte 3" },
        { "Doc\r", "control character" },
        { "Doc\xc2\x85", "control character" },
        { "Doc\xff", "node type 'Doc\\xff' is invalid: not valid UTF-8 at byte 3" },
        { "\xed\xa0\x80", "not valid UTF-8" },
        { long, "longer than 255 bytes (256)" },
      } do
        refuses(function() helper.ok(mesh:put_node { path = ns .. "/a", node_type = case[1] }) end,
          "write of '" .. ns .. "/a'", case[2])
      end
      assert.same({}, nodes(mesh, ns))
      -- update_node's node type goes through the same check: a failed completion
      local message = helper.fails(mesh:update_node(ns .. "/u", function(n)
        n.node_type = "Bad\ntype"
        return n
      end), "EINVAL")
      assert.matches("control character", message, 1, true)
      assert.same({}, nodes(mesh, ns))
    end)

    it("may be none, and may be 255 bytes of any printable UTF-8", function()
      local mesh = helper.open()
      local ns = helper.ns()
      assert.equal("", helper.ok(mesh:put_node { path = ns .. "/none" }).node_type)
      assert.equal("", helper.ok(mesh:put_node { path = ns .. "/empty", node_type = "" }).node_type)
      assert.equal(long:sub(2), helper.ok(mesh:put_node { path = ns .. "/l",
        node_type = long:sub(2) }).node_type)
      assert.equal("Café 日本 (v2)", helper.ok(mesh:put_node { path = ns .. "/u",
        node_type = "Café 日本 (v2)" }).node_type)
      assert.is_true(core.node_type_check("Document"))
      assert.is_nil(core.node_type_check(""))
    end)

    it("named by a plugin is checked at open, with the file and the line", function()
      for _, case in ipairs {
        { '[""] = function(config) end', "node type is empty" },
        { '["Bad\\nType"] = function(config) end', "node type 'Bad\\x0aType' is invalid" },
        { '["' .. long .. '"] = function(config) end', "longer than 255 bytes" },
      } do
        local file = plugin_file("return { node_types = {\n  " .. case[1] .. "\n} }\n")
        local message = refuses(function()
          durable.open { store = "sqlite::memory:", plugins = { file } }
        end, file .. ":", case[2])
        assert.is_nil(message:find("\n", 1, true), "one line: " .. message)
      end
      assert.equal(0, core.meshes())
    end)

    it("configured through the primitives is checked too", function()
      local mesh = helper.open()
      refuses(function() core.primitives.mesh.node_type(mesh, "") end, "node type is empty")
      refuses(function() core.primitives.mesh.on(mesh, "A\nB", "x", function() end) end,
        "node type 'A\\x0aB' is invalid")
      refuses(function() core.primitives.mesh.consume_type(mesh, long, "L", {}) end,
        "longer than 255 bytes")
    end)
  end)

  describe("the C primitives", function()
    local MESH = { "_step", "_now", "_get", "_query", "_write", "_node_type", "_on", "_on_init",
                   "_on_dispose", "_client", "_find", "_activate", "_recycle", "_read",
                   "_consume_type" }
    local HUB = { "_request", "_publish", "_read", "_consume" }

    it("are not on user objects", function()
      local mesh = helper.open()
      local hub = mesh:hub("client/spec")
      for _, name in ipairs(MESH) do
        assert.is_nil(mesh[name], "mesh." .. name)
        assert.is_nil(rawget(getmetatable(mesh).__index, name), "the mesh's methods: " .. name)
        assert.is_nil(core.Mesh[name], "core.Mesh." .. name)
      end
      for _, name in ipairs(HUB) do
        assert.is_nil(hub[name], "hub." .. name)
        assert.is_nil(core.Hub[name], "core.Hub." .. name)
      end
      -- not a single "_" method is left, whoever adds one later
      for _, methods in ipairs { core.Mesh, core.Hub } do
        for name in pairs(methods) do
          assert.is_nil(tostring(name):match("^_%a"), "a primitive on user objects: " .. name)
        end
      end
    end)

    it("are kept for the runtime's own modules, and everything still works", function()
      for _, name in ipairs(MESH) do
        assert.is_function(core.primitives.mesh[name:sub(2)], name)
      end
      for _, name in ipairs(HUB) do
        assert.is_function(core.primitives.hub[name:sub(2)], name)
      end
      local mesh = helper.open()
      local ns = helper.ns()
      helper.ok(mesh:put_node { path = ns .. "/doc", node_type = "Plain", content = { n = 1 } })
      local client = mesh:hub("client/spec")
      assert.equal("pong", helper.ok(client:request(ns .. "/doc", "ping")))
      assert.equal(2, helper.ok(mesh:update_node(ns .. "/doc", function(n)
        n.content.n = n.content.n + 1
        return n
      end)).content.n)
      assert.equal(1, helper.ok(client:publish_durable({ namespace = "L", key = ns .. "/doc" },
        { x = 1 })))
      assert.is_true(helper.ok(mesh:recycle(ns .. "/doc")))
    end)
  end)
end)
