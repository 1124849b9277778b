-- stream_ids_spec.lua: idempotent producers (publish ids).  A publish
-- may carry an id; a publish whose id the stream already holds completes
-- with the sequence it got the first time and appends nothing -- from Lua,
-- from the `durable publish --id` command, from another mesh or process on
-- the same store, and after a producer was killed or cut off mid-commit and
-- retried.  The id is remembered by a write-once node
-- {stream}/_DurableStreamId/{id} made in the item's transaction, so the
-- store's key decides, not a cache.  Store-parametrised (DURABLE_TEST_STORE).
local helper = require "helper"
local cmd = require "command"
local durable = require "durable"

local q = helper.quote
local BIN = os.getenv("DURABLE_BIN") or helper.BUILD .. "/durable"
local PRODUCER = helper.fixture "id_producer.lua"

local function stream_of(key) return { namespace = "Ids", key = key } end
local function stream_path(key) return key .. "/_DurableStream/Ids" end

-- The items of the stream as { sequence -> payload table }, and their count.
local function items(mesh, key)
  local nodes = helper.ok(mesh:query("namespace:" .. stream_path(key) .. "/_DurableStreamItem"))
  local out = {}
  for _, node in ipairs(nodes) do
    out[node.content.Sequence] = durable.decode(node.content.PayloadJson)
  end
  return out, #nodes
end

describe("an idempotent publish", function()
  helper.each()

  it("answers a repeated id with the sequence it got the first time, and appends nothing", function()
    local mesh = helper.open{}
    local key = helper.ns()
    local client = mesh:hub("client/" .. key)
    local s = stream_of(key)
    assert.equal(1, helper.ok(client:publish_durable(s, { n = 1 }, { id = "order-1" })))
    assert.equal(2, helper.ok(client:publish_durable(s, { n = 2 })))
    assert.equal(3, helper.ok(client:publish_durable(s, { n = 3 }, { id = "order-3" })))
    -- the retries: the same ids, even with another payload
    assert.equal(1, helper.ok(client:publish_durable(s, { n = 1 }, { id = "order-1" })))
    assert.equal(3, helper.ok(client:publish_durable(s, { n = "other" }, { id = "order-3" })))
    assert.equal(4, helper.ok(client:publish_durable(s, { n = 4 }, { id = "order-4" })))
    local got, count = items(mesh, key)
    assert.equal(4, count)
    assert.same({ { n = 1 }, { n = 2 }, { n = 3 }, { n = 4 } }, got)
    -- the id is a node of the stream, naming its sequence
    local node = helper.ok(mesh:get_node(stream_path(key) .. "/_DurableStreamId/order-3"))
    assert.equal("DurableStreamId", node.node_type)
    assert.same({ Sequence = 3 }, node.content)
    assert.equal(key, node.main_node)
    -- ids are per stream: the same id on another stream is another item
    local other = { namespace = "Ids2", key = key }
    assert.equal(1, helper.ok(client:publish_durable(other, { n = 1 }, { id = "order-3" })))
    -- and the stream is listed as before, its state as doc/design.md tells it
    local state = helper.ok(mesh:get_node(stream_path(key))).content
    assert.equal(4, state.LastSequence)
  end)

  it("refuses a bad id with a message naming the id and the rule, writing nothing", function()
    local mesh = helper.open{}
    local key = helper.ns()
    local client = mesh:hub("client/" .. key)
    local s = stream_of(key)
    local function refused(id, pattern)
      local ok, message = pcall(client.publish_durable, client, s, { n = 1 }, { id = id })
      assert.is_false(ok, "the id was taken: " .. tostring(id))
      assert.matches(pattern, message)
    end
    refused("a/b", "publish id 'a/b' is invalid: '/' is not allowed", nil)
    refused("", "publish id is empty")
    refused(("x"):rep(129), "publish id 'x+%.*' is invalid: longer than 128 bytes %(129%)")
    refused("..", "publish id '%.%.' is invalid: '%.' and '%.%.' are not allowed")
    refused("a\tb", "publish id 'a\\x09b' is invalid: control character at byte 1")
    refused("a\\b", "publish id 'a\\b' is invalid: '\\' is not allowed")
    refused("a\0b", "publish id must not contain a NUL byte")
    refused("\xff", "not valid UTF%-8 at byte 0")
    refused(42, "the publish id must be a string, not number")
    local ok, message = pcall(client.publish_durable, client, s, { n = 1 }, { idd = "x" })
    assert.is_false(ok)
    assert.matches("unknown option 'idd'", message)
    ok, message = pcall(client.publish_durable, client, s, { n = 1 }, "x")
    assert.is_false(ok)
    assert.matches("options must be a table", message)
    -- 128 bytes, spaces and non-ASCII are fine
    assert.equal(1, helper.ok(client:publish_durable(s, { n = 1 }, { id = ("y"):rep(128) })))
    assert.equal(2, helper.ok(client:publish_durable(s, { n = 2 }, { id = "größe 7" })))
    local _, count = items(mesh, key)
    assert.equal(2, count)
  end)

  it("refuses an id whose node's path would be too long for its stream", function()
    local mesh = helper.open{}
    local key = helper.ns() .. "/" .. ("k"):rep(200) .. "/" .. ("k"):rep(200) .. "/"
      .. ("k"):rep(200) .. "/" .. ("k"):rep(200) .. "/" .. ("k"):rep(100)
    local client = mesh:hub("client/long")
    local s = stream_of(key)
    assert.equal(1, helper.ok(client:publish_durable(s, { n = 1 })))
    local ok, message = pcall(client.publish_durable, client, s, { n = 2 }, { id = ("z"):rep(100) })
    assert.is_false(ok)
    -- the id quoted shortened (the message would pass 512 bytes), the reason whole
    assert.matches("publish id 'z+%.%.%.%(100 bytes%)' is too long for the stream", message)
    assert.matches("its node's path would pass 1024 bytes", message, 1, true)
    local _, count = items(mesh, key)
    assert.equal(1, count)
  end)

  it("is answered by the stream hub from the stored id when a duplicate gets past the producer", function()
    -- a JSON append goes straight to the stream hub, without the producer's
    -- look-up: the id node's key refuses the batch, and the hub answers from it
    local mesh = helper.open{}
    local key = helper.ns()
    local client = mesh:hub("client/" .. key)
    local s = stream_of(key)
    assert.equal(1, helper.ok(client:publish_durable(s, { n = 1 }, { id = "a" })))
    local path = stream_path(key)
    helper.ok(mesh:recycle(path)) -- a fresh hub: the requests below share a batch
    local sent = {
      client:request(path, "durable.append", { PayloadJson = '{"n":2}' }),
      client:request(path, "durable.append", { PayloadJson = '{"n":"dup"}', Id = "a" }),
      client:request(path, "durable.append", { PayloadJson = '{"n":3}', Id = "b" }),
    }
    local answers = helper.ok(durable.all(sent))
    assert.equal(1, answers[2].Sequence)
    -- the others were decided again, appended once each
    local got, count = items(mesh, key)
    assert.equal(3, count)
    assert.same({ n = 2 }, got[answers[1].Sequence])
    assert.same({ n = 3 }, got[answers[3].Sequence])
    assert.same({ 2, 3 }, { answers[1].Sequence, answers[3].Sequence })
    -- a bad Id in JSON is refused by the hub too
    local message = helper.fails(client:request(path, "durable.append",
      { PayloadJson = "{}", Id = "x/y" }), "EINVAL")
    assert.matches("publish id 'x/y' is invalid", message)
    message = helper.fails(client:request(path, "durable.append",
      { PayloadJson = "{}", Id = 7 }), "EINVAL")
    assert.matches("Id is not a string", message)
  end)

  it("makes one item of one id repeated inside one batch", function()
    local mesh = helper.open{}
    local key = helper.ns()
    local client = mesh:hub("client/" .. key)
    local s = stream_of(key)
    assert.equal(1, helper.ok(client:publish_durable(s, { n = 0 })))
    local path = stream_path(key)
    helper.ok(mesh:recycle(path))
    local sent = {}
    for i = 1, 3 do
      sent[#sent + 1] = client:request(path, "durable.append", { PayloadJson = '{"n":"x"}', Id = "x" })
      sent[#sent + 1] = client:request(path, "durable.append", { PayloadJson = ('{"n":%d}'):format(i) })
    end
    local answers = helper.ok(durable.all(sent))
    assert.equal(answers[1].Sequence, answers[3].Sequence)
    assert.equal(answers[1].Sequence, answers[5].Sequence)
    local got, count = items(mesh, key)
    assert.equal(5, count) -- n = 0, x once, 1, 2, 3
    assert.same({ n = "x" }, got[answers[1].Sequence])
    local seen = {}
    for seq = 1, 5 do seen[#seen + 1] = tostring(got[seq].n) end
    table.sort(seen)
    assert.same({ "0", "1", "2", "3", "x" }, seen)
  end)

  it("gives one item for the same ids published at once by two meshes on one store", function()
    local store = helper.store()
    local a = helper.open{ store = store }
    local b = helper.open{ store = store }
    local key = helper.ns()
    local s = stream_of(key)
    local ca, cb = a:hub("client/a"), b:hub("client/b")
    local n, left = 40, 80
    local seq_a, seq_b = {}, {}
    for i = 1, n do
      ca:publish_durable(s, { i = i }, { id = "p" .. i })
        :next(function(seq) seq_a[i] = seq; left = left - 1 end)
      cb:publish_durable(s, { i = i }, { id = "p" .. i })
        :next(function(seq) seq_b[i] = seq; left = left - 1 end)
    end
    local deadline = os.time() + 20
    while left > 0 do
      a:run_until(function() return left == 0 end, 5)
      b:run_until(function() return left == 0 end, 5)
      assert.is_true(os.time() < deadline, "the publishes did not finish")
    end
    local got, count = items(a, key)
    assert.equal(n, count)
    for i = 1, n do
      assert.equal(seq_a[i], seq_b[i], "id p" .. i)
      assert.same({ i = i }, got[seq_a[i]])
    end
  end)
end)

describe("durable publish --id", function()
  before_each(function() cmd.begin("idspec") end)
  after_each(cmd.finish)

  it("prints the same sequence for the same id and appends once", function()
    local key = cmd.ns .. "/doc"
    assert.equal(0, (cmd.run { "put", key, "Doc", "{}" }))
    local code, out, err = cmd.run { "publish", "--id", "msg-1", "Ids", key, '{"text":"hi"}' }
    assert.equal(0, code, err)
    assert.equal("1\n", out)
    code, out, err = cmd.run { "publish", "Ids", key, '{"text":"other"}' }
    assert.equal(0, code, err)
    assert.equal("2\n", out)
    code, out, err = cmd.run { "publish", "--id=msg-1", "Ids", key, '{"text":"hi"}' }
    assert.equal(0, code, err)
    assert.equal("1\n", out)
    code, out = cmd.run { "read", "Ids", key }
    assert.equal(0, code)
    local lines = {}
    for line in out:gmatch("[^\n]+") do lines[#lines + 1] = line end
    assert.equal(2, #lines)
    assert.matches('"payload":{"text":"hi"}', lines[1])
    code, out = cmd.run { "get", "@" .. key .. "/_DurableStream/Ids/_DurableStreamId/msg-1" }
    assert.equal(0, code)
    assert.matches('"content":{"Sequence":1}', out)
  end)

  it("refuses a bad id with exit 2 and writes nothing", function()
    local key = cmd.ns .. "/doc"
    local code, out, err = cmd.run { "publish", "--id", "a/b", "Ids", key, "{}" }
    assert.equal(2, code)
    assert.equal("", out)
    assert.matches("publish id 'a/b' is invalid: '/' is not allowed", err)
    code, _, err = cmd.run { "publish", "--id", "", "Ids", key, "{}" }
    assert.equal(2, code)
    assert.matches("publish id is empty", err)
    code, _, err = cmd.run { "read", "Ids", key }
    assert.equal(1, code)
    assert.is_truthy(err:find("no stream", 1, true) or err:find("no database at", 1, true), err)
  end)
end)

describe("a producer killed or cut off mid-publish, retried with the same ids", function()
  before_each(function() cmd.begin("idspec") end)
  after_each(cmd.finish)

  local function ok_lines(text)
    local seqs = {}
    for i, seq in text:gmatch("ok (%d+) (%d+)") do seqs[tonumber(i)] = tonumber(seq) end
    return seqs
  end

  local function check_once(key, n, heard)
    local mesh = assert(durable.open{ store = cmd.store })
    local got, count = items(mesh, key)
    assert.equal(n, count)
    local where = {}
    for seq, payload in pairs(got) do
      assert.is_nil(where[payload.i], "item " .. payload.i .. " appended twice")
      where[payload.i] = seq
    end
    for i = 1, n do assert.is_not_nil(where[i], "item " .. i .. " is missing") end
    for i, seq in pairs(heard) do assert.equal(where[i], seq, "item " .. i) end
    mesh:close()
  end

  it("finds each item exactly once after a SIGKILL and a rerun", function()
    local key = cmd.ns .. "/doc"
    -- enough that the kill lands in the middle: 200 took less than the
    -- 50 ms between two looks at its output once appends got faster
    local n = 2000
    local first = cmd.spawn { "lua", PRODUCER, key, tostring(n), "8" }
    -- killed in the middle: some publishes heard, some in flight
    assert.is_truthy(cmd.wait_for(function()
      local _, c = (cmd.read_file(first.out) or ""):gsub("\nok ", "")
      return c >= 30 or not cmd.running(first)
    end, 20))
    os.execute("kill -KILL " .. first.pid)
    cmd.exit_code(first, 5)
    local heard = ok_lines(cmd.read_file(first.out) or "")
    assert.is_nil((cmd.read_file(first.out) or ""):find("done", 1, true), "finished before the kill")
    assert.is_truthy(next(heard), "nothing was heard before the kill")
    -- the rerun publishes everything again, with the same ids
    local code, out, err = cmd.run { "lua", PRODUCER, key, tostring(n), "8" }
    assert.equal(0, code, err)
    local again = ok_lines(out)
    for i, seq in pairs(heard) do assert.equal(seq, again[i], "item " .. i .. " got a new sequence") end
    check_once(key, n, again)
  end)

  it("finds each item exactly once when the answers to its commits are lost #postgres", function()
    if cmd.KIND ~= "postgres" then return pending("PostgreSQL only") end
    local function param(name)
      local v = cmd.PG:match("[?&]" .. name .. "=([^&]+)")
      return v and (v:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
    end
    local host, port = param("host"), param("port") or "5432"
    if not (host and host:sub(1, 1) == "/") then
      return pending("needs DURABLE_TEST_PG on a unix socket (host=/DIR): the link is one")
    end
    -- the producer reaches the server through a link that loses the answer
    -- to every 5th commit, closing the connection: the items are saved, and
    -- the producer hears "the write may or may not have been saved"; it
    -- retries each failure with the same id
    -- under /tmp, whatever TMPDIR says: a socket's path has 107 bytes at most
    local mk = io.popen("mktemp -d /tmp/durable-link.XXXXXX")
    local dir = assert(mk:read("l"), "mktemp -d failed")
    mk:close()
    finally(function() os.execute("rm -rf " .. q(dir)) end)
    local link = cmd.spawn { "tests/support/pg_link.lua", dir .. "/.s.PGSQL." .. port,
                             host .. "/.s.PGSQL." .. port, "cut_commits=5", program = "lua5.4" }
    assert.truthy(cmd.wait_for(function()
      return (cmd.read_file(link.out) or ""):find("listening", 1, true)
    end, 10), "the link did not start: " .. (cmd.read_file(link.err) or ""))
    local url = cmd.PG:gsub("([?&]host=)[^&]+", "%1" .. dir)
    local key = cmd.ns .. "/doc"
    local job = cmd.spawn { "lua", PRODUCER, key, "200", "2", store = url }
    local code = cmd.exit_code(job, 120)
    assert.equal(0, code, cmd.read_file(job.err))
    local out = cmd.read_file(job.out)
    local n = tonumber(out:match("\ndone (%d+)\n$"))
    assert.equal(200, n, out:sub(-300))
    check_once(key, n, ok_lines(out))
    local cuts = tonumber(out:match("\ncuts (%d+)\n"))
    assert.is_not_nil(cuts, out:sub(-300))
    assert.is_true(cuts >= 3, ("only %d commits' answers were lost"):format(cuts))
  end)
end)
