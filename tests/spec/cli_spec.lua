-- cli_spec.lua: the `durable` command, driven as a user drives it.
--
-- Runs the built binary (env DURABLE_BIN, else $DURABLE_BUILD_DIR/durable,
-- else ./build/durable) and pins
-- its contract: exit 0 / 1 failure / 2 bad usage, one line on stderr, content
-- kept byte for byte, bad input refused before anything is written.
--
-- Store-parametrised: DURABLE_TEST_STORE=sqlite (default; a temp file per
-- test) or postgres (DURABLE_TEST_PG is the URL; the database is shared, so
-- every test works under its own namespace "clispec/<run>n<test>").

local json = require "dkjson"

local cmd = require "command"
local KIND, quote, read_file, spit = cmd.KIND, cmd.quote, cmd.read_file, cmd.spit
local tmpname, sleep, wait_for = cmd.tmpname, cmd.sleep, cmd.wait_for
local command_line, run, spawn, exit_code = cmd.command_line, cmd.run, cmd.spawn, cmd.exit_code
local P -- this test's namespace (cmd.store is its store)

local function one_line(s)
  return s:match("^[^\n]+\n$") ~= nil
end

local function children(ns, store)
  local code, out, err = run{ "search", "namespace:" .. ns, store = store }
  -- a store that was never made holds nothing either
  if code == 1 and err:find("no database at", 1, true) then return {}, "" end
  assert.equal(0, code, err)
  local nodes = {}
  for line in out:gmatch("[^\n]+") do nodes[#nodes + 1] = assert(json.decode(line), line) end
  return nodes, out
end

local ISO = "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$"






-- Lines of stderr that are not library log lines (those carry a time stamp).
local function error_lines(err)
  local lines = {}
  for line in err:gmatch("[^\n]+") do
    if not line:match("^%d%d%d%d%-%d%d%-%d%dT") then lines[#lines + 1] = line end
  end
  return lines
end

describe("durable (" .. KIND .. ")", function()
  before_each(function()
    local _
    _, P = cmd.begin("clispec")
  end)

  after_each(cmd.finish)

  describe("put and get", function()
    it("round-trips content byte for byte, $type first", function()
      local content = '{"$type":"X","b":1,"a":"é"}'
      local code, out, err = run{ "put", P .. "/doc", "X", content }
      assert.equal(0, code, err)
      local version = out:match("^" .. P:gsub("%p", "%%%0") .. "/doc version (%d+)\n$")
      assert.truthy(version, out)
      assert.equal("", err)

      code, out, err = run{ "get", "@" .. P .. "/doc" }
      assert.equal(0, code, err)
      assert.equal("", err)
      assert.equal(',"content":' .. content .. "}\n", out:sub(-(#content + 13)))
      local node = assert(json.decode(out), out)
      assert.equal(P .. "/doc", node.path)
      assert.equal(P, node.namespace)
      assert.equal("doc", node.id)
      assert.equal("X", node.node_type)
      assert.equal(P .. "/doc", node.main_node)
      assert.equal(tonumber(version), node.version)
      assert.matches(ISO, node.created_at)
      assert.matches(ISO, node.updated_at)
    end)

    it("keeps whitespace and number spellings of content read from stdin", function()
      local content = '{ "$type" : "Y",\n  "n" : [1, 2.50, 1e3] }'
      local code, _, err = run{ "put", P .. "/doc", "Y", "-", stdin = content }
      assert.equal(0, code, err)
      local out
      code, out, err = run{ "get", P .. "/doc" } -- a bare path is accepted too
      assert.equal(0, code, err)
      assert.equal(',"content":' .. content .. "}\n", out:sub(-(#content + 13)))
      local nodes = children(P) -- JSON lines: still one line per node
      assert.equal(1, #nodes)
      assert.same({ 1, 2.5, 1000 }, nodes[1].content.n)
    end)

    it("defaults content to {} and grows the version with each write", function()
      local code, out, err = run{ "put", P .. "/doc", "Doc" }
      assert.equal(0, code, err)
      local v1 = tonumber(out:match("version (%d+)"))
      code, out, err = run{ "put", P .. "/doc", "Doc", '{"k":2}' }
      assert.equal(0, code, err)
      local v2 = tonumber(out:match("version (%d+)"))
      assert.is_true(v2 > v1)
      code, out = run{ "get", "@" .. P .. "/doc" }
      assert.equal(0, code)
      assert.equal(v2, json.decode(out).version)
      assert.matches(',"content":{"k":2}}\n$', out)
    end)

    it("get of a missing node exits 1 naming the path", function()
      assert.equal(0, (run{ "put", P .. "/something", "T", "{}" })) -- the store is made
      local code, out, err = run{ "get", "@" .. P .. "/nothing" }
      assert.equal(1, code)
      assert.equal("", out)
      assert.equal("durable: get: no node at '" .. P .. "/nothing'\n", err)
    end)
  end)

  describe("bad input gets a clear error and writes nothing", function()
    local long_segment = string.rep("s", 256)
    local cases = {
      { "an empty segment", function() return P .. "//x" end, "empty" },
      { "a trailing '/'", function() return P .. "/x/" end, "empty" },
      { "a '.' segment", function() return P .. "/./x" end, "'%.'" },
      { "a '..' segment", function() return P .. "/../x" end, "'%.%.'" },
      { "a control character", function() return P .. "/a\tb" end, "control" },
      { "a DEL character", function() return P .. "/a\127b" end, "control" },
      { "a backslash", function() return P .. "/a\\b" end, "\\" },
      { "invalid UTF-8", function() return P .. "/a\255b" end, "UTF%-8" },
      { "a segment too long", function() return P .. "/" .. long_segment end, "long" },
      { "a path too long", function()
          return P .. string.rep("/" .. string.rep("p", 200), 5)
        end, "long" },
      { "a partition beginning with '_'", function() return "_" .. P end, "partition" },
    }
    for _, case in ipairs(cases) do
      it("refuses a path with " .. case[1], function()
        local path = case[2]()
        for _, args in ipairs{ { "put", path, "T", "{}" }, { "get", "@" .. path } } do
          local code, out, err = run(args)
          assert.is_true(code == 2 or code == 1, "exit " .. tostring(code))
          assert.equal("", out)
          assert.is_true(one_line(err), err)
          assert.matches("^durable: " .. args[1] .. ": ", err)
          assert.truthy(err:find(P, 1, true), "names the path: " .. err)
          assert.matches(case[3], err)
        end
        assert.same({}, (children(P)))
      end)
    end

    it("refuses content that is not JSON", function()
      for _, bad in ipairs{ '{"a":', "not json", "", '{"a":1} trailing' } do
        local code, out, err = run{ "put", P .. "/doc", "T", bad }
        assert.is_true(code == 2 or code == 1, "exit " .. tostring(code))
        assert.equal("", out)
        assert.matches("^durable: put: content is not JSON: .+ at line %d+ column %d+\n$", err)
      end
      local code, _, err = run{ "put", P .. "/doc", "T", "-", stdin = "{oops}" }
      assert.is_true(code == 2 or code == 1)
      assert.matches("^durable: put: content is not JSON: .+ at line 1 column %d+\n$", err)
      assert.same({}, (children(P)))
      assert.equal(1, (run{ "get", "@" .. P .. "/doc" }))
    end)

    it("stores a namespace carrying SQL as plain data", function()
      local sql = "x'; DROP TABLE mesh_nodes; --"
      local code, _, err = run{ "put", P .. "/before", "T", "{}" }
      assert.equal(0, code, err)
      for _, path in ipairs{ P .. "/" .. sql .. "/doc", sql .. "/" .. P:match("[^/]+$") } do
        local content = '{"q":"' .. sql .. '"}'
        code, _, err = run{ "put", path, "T", content }
        assert.equal(0, code, err)
        local out
        code, out, err = run{ "get", "@" .. path }
        assert.equal(0, code, err)
        local node = json.decode(out)
        assert.equal(path, node.path)
        assert.equal(sql, node.content.q)
      end
      local nodes = children(P .. "/" .. sql)
      assert.equal(1, #nodes)
      assert.equal(P .. "/" .. sql, nodes[1].namespace)
      assert.equal(0, (run{ "get", "@" .. P .. "/before" })) -- nothing dropped
    end)

    it("fails naming the store when the SQLite file cannot be written", function()
      local file = tmpname() -- a regular file, used as if it were a directory
      local store = "sqlite:" .. file .. "/sub/x.db"
      local code, out, err = run{ "put", "clispec/doc", "T", "{}", store = store }
      assert.equal(1, code)
      assert.equal("", out)
      assert.is_true(one_line(err), err)
      assert.matches("^durable: put: ", err)
      assert.truthy(err:find(file, 1, true), "names the store: " .. err)
    end)

    it("fails within 5 s naming the store when PostgreSQL cannot be reached", function()
      local started = os.time()
      local code, out, err = run{ "get", "@clispec/doc", store = "postgresql://127.0.0.1:1/nowhere" }
      assert.equal(1, code)
      assert.equal("", out)
      assert.is_true(one_line(err), err)
      assert.truthy(err:find("127.0.0.1", 1, true), "names the store: " .. err)
      assert.is_true(os.time() - started <= 6)
    end)
  end)

  describe("search", function()
    it("lists the children of a namespace in id order, all of them", function()
      for _, id in ipairs{ "b", "a", "c", "a1" } do
        assert.equal(0, (run{ "put", P .. "/" .. id, "T", '{"id":"' .. id .. '"}' }))
      end
      assert.equal(0, (run{ "put", P .. "/a/deep", "T", "{}" }))   -- a grandchild
      assert.equal(0, (run{ "put", P .. "x/a", "T", "{}" }))       -- a neighbour
      local nodes, out = children(P)
      local ids = {}
      for i, node in ipairs(nodes) do
        ids[i] = node.id
        assert.equal(P, node.namespace)
        assert.equal(node.id, node.content.id)
      end
      assert.same({ "a", "a1", "b", "c" }, ids)
      assert.matches('^{"path":"' .. P:gsub("%p", "%%%0") .. '/a","namespace":', out)
    end)

    it("path:P prints the node or nothing", function()
      assert.equal(0, (run{ "put", P .. "/one", "T", "{}" }))
      local code, out = run{ "search", "path:" .. P .. "/one" }
      assert.equal(0, code)
      assert.equal(P .. "/one", json.decode(out).path)
      code, out = run{ "search", "path:" .. P .. "/none" }
      assert.equal(0, code)
      assert.equal("", out)
    end)

    it("refuses a query of another kind with exit 2", function()
      local code, out, err = run{ "search", "owner:" .. P }
      assert.equal(2, code)
      assert.equal("", out)
      assert.is_true(one_line(err), err)
      assert.matches("usage: durable search", err, 1, true)
    end)
  end)

  describe("durable streams", function()
    local NS = "CliLog"
    local KEY, STREAM, ITEMS
    local PAYLOADS = { '{"$type":"X","b":1,"a":"é"}', '{"n":2}', '{ "n" : 3.50 }' }

    before_each(function()
      KEY = P .. "/doc"
      STREAM = KEY .. "/_DurableStream/" .. NS
      ITEMS = STREAM .. "/_DurableStreamItem"
    end)

    -- The owner and three items; the third read from stdin (a load of one
    -- JSON line, its sequence printed) with the line break a shell adds.
    local function publish_three()
      assert.equal(0, (run{ "put", KEY, "Document", "{}" }))
      for i, payload in ipairs(PAYLOADS) do
        local code, out, err
        if i == 3 then
          code, out, err = run{ "publish", NS, KEY, "-", "--print", stdin = payload .. "\n" }
        else
          code, out, err = run{ "publish", NS, KEY, payload }
        end
        assert.equal(0, code, err)
        assert.equal(i .. "\n", out)
        assert.same({}, error_lines(err))
      end
    end

    local function items_of(out)
      local items = {}
      for line in out:gmatch("[^\n]+") do items[#items + 1] = { line = line, item = assert(json.decode(line), line) } end
      return items
    end

    it("publish prints 1, 2, 3; read prints them in order, payloads byte for byte", function()
      publish_three()
      local code, out, err = run{ "read", NS, KEY }
      assert.equal(0, code, err)
      assert.same({}, error_lines(err))
      local items = items_of(out)
      assert.equal(3, #items)
      for i, got in ipairs(items) do
        assert.equal(i, got.item.sequence)
        assert.matches(ISO, got.item.appended_at)
        assert.equal('{"sequence":' .. i .. ',"appended_at":"' .. got.item.appended_at
                     .. '","payload":' .. PAYLOADS[i] .. "}", got.line)
      end
      assert.equal("é", items[1].item.payload.a)
    end)

    it("read --after N starts after N and exits 0 at once past the end", function()
      publish_three()
      local code, out, err = run{ "read", NS, KEY, "--after", "2" }
      assert.equal(0, code, err)
      local items = items_of(out)
      assert.equal(1, #items)
      assert.equal(3, items[1].item.sequence)
      assert.equal(PAYLOADS[3] .. "}", items[1].line:sub(-(#PAYLOADS[3] + 1)))
      for _, after in ipairs{ "3", "40" } do
        code, out, err = run{ "read", NS, KEY, "--after=" .. after }
        assert.equal(0, code, err)
        assert.equal("", out)
      end
    end)

    it("read of a stream that does not exist exits 1 naming it", function()
      assert.equal(0, (run{ "put", KEY, "Document", "{}" }))
      local code, out, err = run{ "read", NS, KEY }
      assert.equal(1, code)
      assert.equal("", out)
      assert.equal("durable: read: no stream " .. NS .. "@" .. KEY .. "\n", err)
      assert.same({}, (children(KEY .. "/_DurableStream"))) -- reading made nothing
    end)

    it("refuses bad stream ids and payloads with messages naming the rule, writing nothing", function()
      local cases = {
        { "", KEY, "A durable stream needs a non-empty Namespace without '/' (was '')." },
        { "a/b", KEY, "A durable stream needs a non-empty Namespace without '/' (was 'a/b')." },
        { NS, "", "Durable stream '" .. NS .. "' needs the owning node's path as Key." },
      }
      for _, case in ipairs(cases) do
        for _, args in ipairs{ { "publish", case[1], case[2], "{}" }, { "read", case[1], case[2] } } do
          local code, out, err = run(args)
          assert.equal(2, code, err)
          assert.equal("", out)
          assert.equal("durable: " .. args[1] .. ": " .. case[3] .. "\n", err)
        end
      end
      local name = NS .. "@" .. KEY
      -- one rule for a payload: JSON that every consumer decodes exactly
      -- (an integer within 64 bits, any other number within a double), and
      -- not null
      for _, bad in ipairs{ { "", "needs a payload%." }, { "   ", "needs a payload%." },
                            { "null", "needs a payload%." }, { " null\n", "needs a payload%." },
                            { "not json", "is not JSON: .+" }, { '{"a":', "is not JSON: .+" },
                            { '{"i":9223372036854775808}', "is not JSON: too big integer .+" },
                            { '{"i":-9223372036854775809}', "is not JSON: too big negative integer .+" },
                            { "[1e400]", "is not JSON: real number overflow .+" } } do
        local code, out, err = run{ "publish", NS, KEY, bad[1] }
        assert.equal(2, code, err)
        assert.equal("", out)
        assert.is_true(one_line(err), err)
        assert.matches("^durable: publish: A durable stream item for "
                       .. name:gsub("%p", "%%%0") .. " " .. bad[2] .. "\n$", err)
      end
      local code, _, err = run{ "publish", NS, KEY, "-", "--no-owner", stdin = "null\n" }
      assert.equal(1, code, err)
      assert.matches("line 1: A durable stream item for .* needs a payload", err)
      assert.same({}, (children(KEY .. "/_DurableStream")))
      assert.same({}, (children(KEY)))
    end)

    it("streams lists the stream: last 3, checkpoint 0, lag 3, no subscriber", function()
      publish_three()
      local code, out, err = run{ "streams" }
      assert.equal(0, code, err)
      assert.matches("^STREAM%s+LAST%s+CHECKPOINT%s+LAG%s+OLDEST%s+SUBSCRIBER%s+PROCESS%s+EPOCH%s+ATTEMPTS%s+DEAD"
        .. "%s+ORPHANED_AT%s+LAST_ERROR\n", out)
      local row
      for line in out:gmatch("[^\n]+") do
        if line:sub(1, #NS + #KEY + 2) == NS .. "@" .. KEY .. " " then row = line end
      end
      assert.truthy(row, out)
      -- OLDEST is an age (the items are a moment old); no attempts, no dead
      assert.matches("^%S+%s+3%s+0%s+3%s+%d+m?s%s+%-%s+%-%s+0%s+%-%s+0%s+%-%s+%-$", row)

      code, out, err = run{ "streams", "--json" }
      assert.equal(0, code, err)
      local found
      for line in out:gmatch("[^\n]+") do
        local s = assert(json.decode(line, 1, json.null), line)
        if s.stream == NS .. "@" .. KEY then found = s end
      end
      assert.truthy(found, out)
      assert.equal(NS, found.namespace)
      assert.equal(KEY, found.key)
      assert.equal(3, found.last)
      assert.equal(0, found.checkpoint)
      assert.equal(3, found.lag)
      assert.equal(json.null, found.subscriber)
      assert.equal(json.null, found.subscriber_instance)
      assert.equal(0, found.epoch)
      assert.equal(json.null, found.orphaned_at)
    end)

    it("get and search show the stream node and its 12-digit item nodes", function()
      publish_three()
      local code, out, err = run{ "get", "@" .. STREAM }
      assert.equal(0, code, err)
      local node = assert(json.decode(out, 1, json.null), out)
      assert.equal("DurableStream", node.node_type)
      assert.equal(KEY, node.main_node)
      assert.equal(NS, node.content.Namespace)
      assert.equal(KEY, node.content.Key)
      assert.equal(3, node.content.LastSequence)
      assert.equal(0, node.content.Checkpoint)
      assert.equal(json.null, node.content.Subscriber)

      local items = children(ITEMS)
      assert.equal(3, #items)
      for i, item in ipairs(items) do
        assert.equal(string.format("%012d", i), item.id)
        assert.equal("DurableStreamItem", item.node_type)
        assert.equal(KEY, item.main_node)
        assert.equal(i, item.content.Sequence)
        assert.equal(PAYLOADS[i], item.content.PayloadJson)
      end
    end)

    it("read --follow waits for the stream, prints the live tail, exits 0 on SIGTERM", function()
      assert.equal(0, (run{ "put", KEY, "Document", "{}" }))
      local job = spawn{ "read", NS, KEY, "--follow" }
      sleep(0.3) -- it is reading before the stream exists
      assert.is_nil(read_file(job.rc)) -- still running
      for i = 1, 2 do
        local code, out, err = run{ "publish", NS, KEY, '{"i":' .. i .. "}" }
        assert.equal(0, code, err)
        assert.equal(i .. "\n", out)
      end
      local out = wait_for(function()
        local s = read_file(job.out)
        return select(2, s:gsub("\n", "")) >= 2 and s
      end)
      assert.truthy(out, "the follower printed: " .. read_file(job.out))
      local items = items_of(out)
      assert.equal(2, #items)
      for i, got in ipairs(items) do
        assert.equal(i, got.item.sequence)
        local payload = '{"i":' .. i .. "}"
        assert.equal(payload .. "}", got.line:sub(-(#payload + 1)))
      end
      assert.is_true(os.execute("kill -TERM " .. job.pid))
      assert.equal(0, exit_code(job))
      assert.same({}, error_lines(read_file(job.err)))
    end)

    it("read --follow prints the backlog after --after, then the tail", function()
      publish_three()
      local job = spawn{ "read", NS, KEY, "--follow", "--after", "1" }
      assert.equal(0, (run{ "publish", NS, KEY, '{"n":4}' }))
      local out = wait_for(function()
        local s = read_file(job.out)
        return select(2, s:gsub("\n", "")) >= 3 and s
      end)
      assert.truthy(out, read_file(job.out))
      local seqs = {}
      for i, got in ipairs(items_of(out)) do seqs[i] = got.item.sequence end
      assert.same({ 2, 3, 4 }, seqs)
      os.execute("kill -INT " .. job.pid)
      assert.equal(0, exit_code(job))
    end)

    it("exits 2 on bad usage of publish, read and streams", function()
      for _, args in ipairs{ { "publish", NS, KEY }, { "publish", NS, KEY, "{}", "x" },
                             { "read", NS }, { "read", NS, KEY, "--after", "-1" },
                             { "read", NS, KEY, "--after", "x" }, { "read", NS, KEY, "--after" },
                             { "read", NS, KEY, "--bogus" }, { "streams", "extra" } } do
        local code, out, err = run(args)
        assert.equal(2, code, table.concat(args, " ") .. ": " .. err)
        assert.equal("", out)
        assert.is_true(one_line(err), err)
        assert.matches("^durable: " .. args[1] .. ": ", err)
      end
    end)
  end)

  describe("the command line", function()
    it("--help, COMMAND --help and --version exit 0", function()
      for _, args in ipairs{ { "--help" }, { "put", "--help" }, { "get", "--help" },
                             { "search", "--help" }, { "publish", "--help" },
                             { "read", "--help" }, { "streams", "--help" },
                             { "--version" } } do
        args.store = false
        local code, out, err = run(args)
        assert.equal(0, code, err)
        assert.equal("", err)
        assert.truthy(#out > 0)
      end
      local _, out = run{ "--version", store = false }
      assert.matches("^durable %d+%.%d+%.%d+\n$", out)
      _, out = run{ "get", "--help", store = false }
      assert.matches("usage: durable get", out, 1, true)
    end)

    it("exits 2 with one line on an unknown command, option or arity", function()
      for _, args in ipairs{ { "frobnicate" }, {}, { "put", P .. "/x" },
                             { "get" }, { "get", "@a/b", "extra" },
                             { "get", "--bogus", "@a/b" }, { "put", "--store" } } do
        local code, out, err = run(args)
        assert.equal(2, code, table.concat(args, " ") .. ": " .. err)
        assert.equal("", out)
        assert.is_true(one_line(err), err)
        assert.matches("^durable: ", err)
      end
      local _, _, err = run{ "frobnicate" }
      assert.truthy(err:find("frobnicate", 1, true))
      local code, out
      code, out, err = run{ "get", "@a/b", store = "bogus:x" } -- no such kind of store
      assert.equal(2, code, err)
      assert.equal("", out)
      assert.is_true(one_line(err), err)
      assert.truthy(err:find("bogus:x", 1, true), err)
    end)

    it("takes the store from DURABLE_STORE when --store is absent", function()
      local code, _, err = run{ "put", P .. "/env", "T", "{}", store = false,
                                env = { DURABLE_STORE = cmd.store } }
      assert.equal(0, code, err)
      assert.equal(0, (run{ "get", "@" .. P .. "/env" }))
    end)
  end)
end)
