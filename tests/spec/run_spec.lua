-- run_spec.lua: `durable run PLUGIN… [--store URL]`, the host, driven as an
-- operator drives it: a host process beside `durable publish` processes,
-- stopped with SIGINT or SIGTERM, started again.
--
-- Runs the built binary (env DURABLE_BIN, else $DURABLE_BUILD_DIR/durable,
-- else ./build/durable).  Store-parametrised like cli_spec.lua:
-- DURABLE_TEST_STORE=sqlite (default; a temp file per test) or postgres
-- (DURABLE_TEST_PG is the URL; the database is shared, so every test works
-- under its own namespace "runspec/<run>n<test>").
--
-- Slow items: the GATE plugin (written to a temp file below) is the
-- DocumentLog consumer of plugins/document_log.lua, except that an item
-- whose payload names a `gate` node is held until that node exists (the
-- handler polls the store; a hub timer cannot do it, since a leaving hub's
-- timers end with it).  The test opens the gate with `durable put`.

local json = require "dkjson"

local cmd = require "command"
local quote, read_file, spit, tmpname = cmd.quote, cmd.read_file, cmd.spit, cmd.tmpname
local sleep, wait_for, run, spawn = cmd.sleep, cmd.wait_for, cmd.run, cmd.spawn
local exit_code, running = cmd.exit_code, cmd.running
local P, KEY, STREAM -- this test's namespace, owner and stream node
local DOCUMENT_LOG = "plugins/document_log.lua"

local GATE_SOURCE = [[
-- the DocumentLog consumer, with items held until their `gate` node exists
local durable = require "durable"

local function wait_gate(hub, path, deadline)
  return hub:get_node(path):next(function(node)
    if node then return true end
    if os.time() > deadline then error("the gate " .. path .. " never opened") end
    return wait_gate(hub, path, deadline)
  end)
end

return {
  node_types = {
    Document = function(config)
      config:with_durable_stream_consumer {
        namespace = "DocumentLog",
        key = function(hub) return hub.address end,
        handler = function(hub, item)
          local gate = item.payload.gate
          local ready = gate and wait_gate(hub, gate, item.payload["until"] or 0) or durable.done(true)
          return ready:next(function()
            return hub:update_node(hub.address, function(node)
              local doc = node.content
              if (doc.applied or 0) >= item.sequence then return nil end
              doc.text = (doc.text or "") .. item.payload.text
              doc.applied = item.sequence
              return node
            end)
          end)
        end,
      }
    end,
  },
}
]]













local function signal(job, name)
  assert.is_true(os.execute("kill -" .. name .. " " .. job.pid) == true, "kill -" .. name)
end

-- A host of `plugin` on this test's store, up (its "hosting" line printed).
local function host(plugin, env)
  local job = spawn{ "run", plugin, env = env }
  local up = wait_for(function()
    return (read_file(job.err) or ""):find("durable run: hosting", 1, true) or not running(job)
  end, 10)
  assert.truthy(up and running(job), "the host did not start: " .. (read_file(job.err) or ""))
  return job
end

-- Stop a host with `name`; it must exit 0 within 10 s.  Returns its stderr.
local function stop(job, name)
  signal(job, name or "INT")
  local rc = exit_code(job, 10)
  local err = read_file(job.err) or ""
  assert.equal(0, rc, "the host's exit status after SIG" .. (name or "INT") .. ":\n" .. err)
  return err
end

local function get(path)
  local code, out, err = run{ "get", "@" .. path }
  if code ~= 0 then return nil, err end
  return assert(json.decode(out, 1, json.null), out)
end

local function doc() return assert(get(KEY)).content end
local function stream() return assert(get(STREAM)).content end

local function piece(i) return "p" .. i .. "." end
local function pieces(a, b)
  local out = {}
  for i = a, b do out[#out + 1] = piece(i) end
  return table.concat(out)
end

-- publish(i [, extra]): item i from a separate `durable publish` process.
local function publish(i, extra)
  local payload = { ["$type"] = "DocumentLogAppend", text = piece(i), offset = -1 }
  for k, v in pairs(extra or {}) do payload[k] = v end
  local code, out, err = run{ "publish", "DocumentLog", KEY, json.encode(payload) }
  assert.equal(0, code, err)
  return tonumber(out)
end

local function wait_applied(n, seconds)
  local ok = wait_for(function() return (doc().applied or 0) >= n end, seconds or 10)
  assert.truthy(ok, ("applied %s, expected %d"):format(tostring(doc().applied), n))
end

-- Lines of `err` (a host's stderr) that contain `text` (plain).
local function lines_with(err, text)
  local out = {}
  for line in err:gmatch("[^\n]+") do
    if line:find(text, 1, true) then out[#out + 1] = line end
  end
  return out
end

-- The sequences of the debug "item N" lines of this test's stream.
local function items_logged(err)
  local seqs = {}
  for _, line in ipairs(lines_with(err, "Durable stream consumer " .. KEY .. ": item ")) do
    seqs[#seqs + 1] = tonumber(line:match(": item (%d+) of DocumentLog"))
  end
  return seqs
end

local ISO = "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$"

-- The stream node after a graceful leave at `checkpoint` of `last`.
local function assert_released(checkpoint, last)
  local s = stream()
  assert.equal(json.null, s.Subscriber)
  assert.matches(ISO, s.OrphanedAt)
  assert.equal(KEY, s.LastSubscriber)
  assert.equal(checkpoint, s.Checkpoint)
  assert.equal(last, s.LastSequence)
end

describe("durable run (" .. cmd.KIND .. ")", function()
  local GATE

  before_each(function()
    local _
    _, P = cmd.begin("runspec")
    KEY = P .. "/doc"
    STREAM = KEY .. "/_DurableStream/DocumentLog"
    GATE = cmd.track(tmpname() .. ".lua")
    spit(GATE, GATE_SOURCE)
    local code, _, err = run{ "put", KEY, "Document", '{"title":"run spec"}' }
    assert.equal(0, code, err)
  end)

  after_each(cmd.finish)

  it("applies items published by other processes, in order, once each; SIGINT leaves and exits 0",
    function()
      local h = host(DOCUMENT_LOG)
      for i = 1, 5 do assert.equal(i, publish(i)) end
      wait_applied(5)
      local err = stop(h, "INT")
      local d = doc()
      assert.equal(pieces(1, 5), d.text)
      assert.equal(5, d.applied)
      assert.equal("run spec", d.title)
      assert_released(5, 5)
      assert.equal("", read_file(h.out))
      -- the default log level: one line when the lease is granted, one when
      -- it is released, nothing per item
      assert.equal(1, #lines_with(err, "DocumentLog@" .. KEY .. ": lease granted to " .. KEY),
        err)
      assert.equal(1, #lines_with(err, "DocumentLog@" .. KEY .. " ORPHANED: " .. KEY
        .. " released the lease at checkpoint 5 of 5"), err)
      for _, line in ipairs(lines_with(err, KEY)) do
        assert.is_nil(line:match("item %d"), line)
      end
      assert.equal(1, #lines_with(err, "SIGINT: leaving"), err)
    end)

  it("leaves the same way on SIGTERM", function()
    local h = host(DOCUMENT_LOG)
    publish(1)
    publish(2)
    wait_applied(2)
    local err = stop(h, "TERM")
    assert.equal(pieces(1, 2), doc().text)
    assert_released(2, 2)
    assert.equal(1, #lines_with(err, "SIGTERM: leaving"), err)
  end)

  it("applies items published while no host ran, resuming after the checkpoint (debug: a line per item)",
    function()
      publish(1) -- before any host: the host finds it at start
      local h = host(DOCUMENT_LOG)
      publish(2)
      publish(3)
      wait_applied(3)
      stop(h, "INT")
      assert_released(3, 3)
      for i = 4, 6 do assert.equal(i, publish(i)) end
      local s = stream()
      assert.equal(3, s.Checkpoint)
      assert.equal(6, s.LastSequence)
      assert.equal(pieces(1, 3), doc().text) -- nobody applied them yet

      h = host(DOCUMENT_LOG, { DURABLE_LOG = "debug" })
      wait_applied(6)
      local err = stop(h, "INT")
      assert.equal(pieces(1, 6), doc().text)
      assert.equal(6, doc().applied)
      assert_released(6, 6)
      -- handed over from the checkpoint on: 4, 5, 6, and never 1..3 again
      assert.same({ 4, 5, 6 }, items_logged(err), err)
      assert.equal(1, #lines_with(err, "holds DocumentLog@" .. KEY), err)
      assert.truthy(lines_with(err, "resuming after acknowledged sequence 3")[1], err)
    end)

  it("on SIGINT, finishes and acknowledges the item in flight, starts no new one", function()
    publish(1)
    publish(2, { gate = P .. "/gate", ["until"] = os.time() + 20 })
    publish(3)
    local h = host(GATE, { DURABLE_LOG = "debug" })
    assert.truthy(wait_for(function() return items_logged(read_file(h.err))[2] end),
      "item 2 was never handed over: " .. read_file(h.err))
    signal(h, "INT")
    sleep(0.3)
    assert.is_true(running(h), "the host waits for the item in flight")
    assert.equal(0, (run{ "put", P .. "/gate", "Gate", "{}" }))
    assert.equal(0, exit_code(h, 10), read_file(h.err))
    local err = read_file(h.err)
    assert.equal(pieces(1, 2), doc().text)
    assert_released(2, 3)
    assert.same({ 1, 2 }, items_logged(err), err)

    -- the next host goes on with item 3
    h = host(DOCUMENT_LOG)
    wait_applied(3)
    stop(h, "INT")
    assert.equal(pieces(1, 3), doc().text)
    assert_released(3, 3)
  end)

  it("on SIGINT, releases the lease of a consumer in backoff after a failed item", function()
    local code, _, err = run{ "publish", "DocumentLog", KEY, '{"not":"an append"}' }
    assert.equal(0, code, err)
    local h = host(DOCUMENT_LOG)
    assert.truthy(wait_for(function()
      return read_file(h.err):find("NOT acknowledged", 1, true)
    end), "the item never failed: " .. read_file(h.err))
    stop(h, "INT")
    assert_released(0, 1) -- not acknowledged, and free for the next host
  end)

  it("dead and requeue: a consumer with max_attempts moves a bad item aside; requeue appends "
    .. "it again", function()
    local picky = P .. "/picky"
    assert.equal(0, (run{ "put", picky, "Picky", "{}" }))
    for _, payload in ipairs { '{"i":1}', '{"i":2,"bad":true}', '{"i":3}' } do
      local code, _, err = run{ "publish", "Picky", picky, payload }
      assert.equal(0, code, err)
    end
    local h = host("tests/spec/fixtures/picky.lua") -- one backoff (1 s) per bad item
    assert.truthy(wait_for(function()
      local s = get(picky .. "/_DurableStream/Picky")
      return s and s.content.Checkpoint == 3
    end, 15), "the stream did not go past the bad item: " .. read_file(h.err))
    assert.same({ 1, 3 }, assert(get(picky)).content.seen)
    assert.equal(1, #lines_with(read_file(h.err), "moved to the dead letters Picky.dead@" .. picky))
    -- durable dead: one line, the item, why, how often, its payload text
    local code, out, err = run{ "dead", "Picky", picky }
    assert.equal(0, code, err)
    local lines = {}
    for line in out:gmatch("[^\n]+") do lines[#lines + 1] = json.decode(line, 1, json.null) end
    assert.equal(1, #lines, out)
    local letter = lines[1].payload
    assert.equal("Picky@" .. picky, letter.Stream)
    assert.equal(2, letter.Sequence)
    assert.equal(2, letter.Attempts)
    assert.matches("item 2 is bad", letter.Reason)
    assert.equal('{"i":2,"bad":true}', letter.PayloadJson)
    -- requeue: the payload again, at a new sequence, handled (and failing)
    -- like any item
    code, out, err = run{ "requeue", "Picky", picky, "2" }
    assert.equal(0, code, err)
    assert.equal("4\n", out)
    assert.truthy(wait_for(function()
      local s = get(picky .. "/_DurableStream/Picky")
      return s and s.content.Checkpoint == 4
    end, 15), read_file(h.err))
    code, out = run{ "dead", "Picky", picky }
    assert.equal(2, select(2, out:gsub("\n", "")), out)
    stop(h, "INT")
    -- what is not there is said so
    code, out, err = run{ "requeue", "Picky", picky, "1" }
    assert.equal(1, code)
    assert.matches("Picky@" .. picky:gsub("%p", "%%%0") .. " has no dead letter for item 1", err)
    code, _, err = run{ "requeue", "Picky", picky, "two" }
    assert.equal(2, code)
    assert.matches("SEQUENCE must be an item's sequence", err)
    code, out, err = run{ "dead", "Picky", P .. "/nobody" }
    assert.equal(0, code, err)
    assert.equal("", out)
  end)

  it("seek --to moves the checkpoint of a running host's stream: it replays what follows", function()
    local picky = P .. "/seek"
    local function checkpoint()
      local s = get(picky .. "/_DurableStream/Picky")
      return s and s.content.Checkpoint
    end
    assert.equal(0, (run{ "put", picky, "Picky", "{}" }))
    for i = 1, 3 do
      local code, _, err = run{ "publish", "Picky", picky, ('{"i":%d}'):format(i) }
      assert.equal(0, code, err)
    end
    local h = host("tests/spec/fixtures/picky.lua", { DURABLE_LOG = "debug" })
    assert.truthy(wait_for(function() return checkpoint() == 3 end, 10), read_file(h.err))
    local code, out, err = run{ "seek", "Picky", picky, "--to", "1" }
    assert.equal(0, code, err)
    assert.equal("Picky@" .. picky .. ": checkpoint 1 (was 3)\n", out)
    -- the host, caught up and idle, is woken: items 2 and 3 once more
    assert.truthy(wait_for(function()
      local seen = assert(get(picky)).content.seen or {}
      return #seen == 5 and checkpoint() == 3
    end, 10), read_file(h.err))
    assert.same({ 1, 2, 3, 2, 3 }, assert(get(picky)).content.seen)
    -- a skip to the end leaves nothing waiting: the holder hears of it all
    -- the same, and the next item is handed over once
    code, out, err = run{ "seek", "Picky", picky, "--to", "3" }
    assert.equal(0, code, err)
    sleep(0.5)
    code, _, err = run{ "publish", "Picky", picky, '{"i":4}' }
    assert.equal(0, code, err)
    assert.truthy(wait_for(function() return checkpoint() == 4 end, 10), read_file(h.err))
    assert.equal(1, #lines_with(read_file(h.err), "Durable stream consumer " .. picky .. ": item 4 of Picky"),
      read_file(h.err))
    stop(h, "INT")
    code, _, err = run{ "seek", "Picky", picky, "--to", "5" }
    assert.equal(1, code)
    assert.matches("its items are 1 to 4", err)
    code, _, err = run{ "seek", "Picky", picky }
    assert.equal(2, code)
    assert.matches("%-%-to N is missing", err)
  end)

  it("trim --through deletes acknowledged items; a read of them says they were trimmed", function()
    local picky = P .. "/trim"
    assert.equal(0, (run{ "put", picky, "Picky", "{}" }))
    for i = 1, 3 do
      local code, _, err = run{ "publish", "Picky", picky, ('{"i":%d}'):format(i) }
      assert.equal(0, code, err)
    end
    local h = host("tests/spec/fixtures/picky.lua")
    assert.truthy(wait_for(function()
      local s = get(picky .. "/_DurableStream/Picky")
      return s and s.content.Checkpoint == 3
    end, 10), read_file(h.err))
    stop(h, "INT")
    local code, out, err = run{ "trim", "Picky", picky, "--through", "2" }
    assert.equal(0, code, err)
    assert.equal("Picky@" .. picky .. ": trimmed through 2 (2 items deleted)\n", out)
    code, out, err = run{ "read", "Picky", picky }
    assert.equal(1, code, out)
    assert.matches("items up to 2 were trimmed, so item 1 is not there; read after 2", err)
    code, out = run{ "read", "Picky", picky, "--after", "2" }
    assert.equal(0, code)
    assert.matches('"sequence":3', out)
    code, _, err = run{ "publish", "Picky", picky, '{"i":4}' }
    assert.equal(0, code, err)
    code, _, err = run{ "trim", "Picky", picky, "--through", "4" }
    assert.equal(1, code)
    assert.matches("item 4 is not acknowledged %(checkpoint 3%); trimming past the checkpoint needs force", err)
    code, out, err = run{ "trim", "Picky", picky, "--through", "4", "--force" }
    assert.equal(0, code, err)
    assert.equal("Picky@" .. picky .. ": trimmed through 4 (2 items deleted)\n", out)
    code, _, err = run{ "trim", "Picky", picky }
    assert.equal(2, code)
    assert.matches("%-%-through N is missing", err)
  end)

  it("delete-stream is refused under a running host unless forced; the host consumes the new "
    .. "stream from sequence 1", function()
    local picky = P .. "/delete"
    local path = picky .. "/_DurableStream/Picky"
    assert.equal(0, (run{ "put", picky, "Picky", "{}" }))
    for i = 1, 2 do
      local code, _, err = run{ "publish", "Picky", picky, ('{"i":%d}'):format(i) }
      assert.equal(0, code, err)
    end
    local h = host("tests/spec/fixtures/picky.lua")
    assert.truthy(wait_for(function()
      local s = get(path)
      return s and s.content.Checkpoint == 2
    end, 10), read_file(h.err))
    local code, out, err = run{ "delete-stream", "Picky", picky }
    assert.equal(1, code, out)
    assert.matches("Deleting durable stream Picky@" .. picky:gsub("%p", "%%%0")
      .. " failed: durable stream .* is held by .*needs force", err)
    assert.truthy(get(path), "refused: the stream stays")
    code, out, err = run{ "delete-stream", "Picky", picky, "--force" }
    assert.equal(0, code, err)
    assert.equal("Picky@" .. picky .. ": deleted (2 items)\n", out)
    assert.is_nil(get(path))
    code, out, err = run{ "publish", "Picky", picky, '{"i":3}' }
    assert.equal(0, code, err)
    assert.equal("1\n", out, "a new stream, from sequence 1")
    assert.truthy(wait_for(function()
      local s = get(path)
      return s and s.content.Checkpoint == 1
    end, 10), read_file(h.err))
    assert.same({ 1, 2, 3 }, assert(get(picky)).content.seen)
    stop(h, "INT")
    code, _, err = run{ "delete-stream", "Picky" }
    assert.equal(2, code)
    assert.matches("expected NAMESPACE and KEY", err)
  end)

  it("retention sets a family's policy for its hosts: acknowledged items go, the rest stay",
    function()
      local picky = P .. "/retention"
      local items = picky .. "/_DurableStream/Picky/_DurableStreamItem"
      finally(function() run{ "retention", "Picky", "--clear" } end)
      local code, out, err = run{ "retention", "Picky", "1" }
      assert.equal(0, code, err)
      assert.equal("Picky: retention 1\n", out)
      code, out = run{ "retention" }
      assert.equal(0, code)
      assert.matches("Picky\t1\n", out)
      assert.equal(0, (run{ "put", picky, "Picky", "{}" }))
      for _, payload in ipairs { '{"i":1}', '{"i":2}', '{"i":3}', '{"bad":true}', '{"i":5}' } do
        code, _, err = run{ "publish", "Picky", picky, payload }
        assert.equal(0, code, err)
      end
      local h = host("tests/spec/fixtures/picky.lua")
      local function kept()
        local _, listing = run{ "search", "namespace:" .. items }
        local seqs = {}
        for id in listing:gmatch('"id":"(%d+)"') do seqs[#seqs + 1] = tonumber(id) end
        return seqs
      end
      -- item 4 is dead-lettered and acknowledged: only 5, the newest, stays
      assert.truthy(wait_for(function()
        local s = get(picky .. "/_DurableStream/Picky")
        return s and s.content.Checkpoint == 5 and #kept() == 1
      end, 15), read_file(h.err))
      assert.same({ 5 }, kept())
      stop(h, "INT")
      code, out, err = run{ "retention", "Picky", "--clear" }
      assert.equal(0, code, err)
      assert.matches("retention cleared", out)
      code, out = run{ "retention", "Picky" }
      assert.equal("Picky\t-\n", out)
      code, _, err = run{ "retention", "Picky", "soon" }
      assert.equal(2, code)
      assert.matches("'soon' is not a retention policy", err)
    end)

  -- A host stuck leaving (item 2 waits for a gate nobody opens), then
  -- stopped by a second signal.
  local function hard_exit(first, second)
    publish(1)
    publish(2, { gate = P .. "/gate", ["until"] = os.time() + 20 })
    publish(3)
    local h = host(GATE, { DURABLE_LOG = "debug" })
    assert.truthy(wait_for(function() return items_logged(read_file(h.err))[2] end),
      "item 2 was never handed over: " .. read_file(h.err))
    signal(h, first)
    assert.truthy(wait_for(function()
      return read_file(h.err):find("SIG" .. first .. ": leaving", 1, true) or not running(h)
    end), read_file(h.err))
    sleep(0.3)
    assert.is_true(running(h), "the leave waits for the item in flight")
    local t0 = os.time()
    signal(h, second)
    local rc = exit_code(h, 3)
    assert.is_true(os.time() - t0 <= 2, "exited at once")
    return rc
  end

  for _, signals in ipairs{ { "INT", "TERM", 143 }, { "TERM", "INT", 130 } } do
    it(("a second signal during the leave exits at once (SIG%s then SIG%s: %d); nothing acknowledged is lost")
      :format(signals[1], signals[2], signals[3]), function()
      assert.equal(signals[3], hard_exit(signals[1], signals[2]))
      assert.equal(pieces(1, 1), doc().text)
      assert.equal(1, doc().applied)
      local s = stream()
      assert.equal(1, s.Checkpoint) -- item 1 stays acknowledged
      assert.equal(3, s.LastSequence)
      -- a later host on a shared PostgreSQL must not wait on this gate
      assert.equal(0, (run{ "put", P .. "/gate", "Gate", "{}" }))
    end)
  end

  it("a host started after a hard exit resumes after the checkpoint", function()
    hard_exit("INT", "TERM")
    assert.equal(0, (run{ "put", P .. "/gate", "Gate", "{}" }))
    local h = host(DOCUMENT_LOG)
    wait_applied(3)
    stop(h, "INT")
    assert.equal(pieces(1, 3), doc().text)
    assert_released(3, 3)
  end)

  it("refuses a broken plugin with its file and line, exits 1, and starts nothing", function()
    publish(1)
    local broken = tmpname() .. ".lua"
    cmd.track(broken)
    spit(broken, "return {\n  node_types = {\n    Broken = function(config)\n"
      .. "      config:on(\"x\", function() end) end end,\n  },\n}\n")
    local before = assert(get(STREAM))
    local job = spawn{ "run", DOCUMENT_LOG, broken }
    local rc = exit_code(job, 10)
    local err = read_file(job.err)
    assert.equal(1, rc, err)
    assert.equal("", read_file(job.out))
    assert.matches("^durable: run: plugin " .. broken:gsub("%p", "%%%0") .. ":4: [^\n]+\n$", err)
    -- nothing started: the stream was not claimed, the document not touched
    local after = assert(get(STREAM))
    assert.equal(before.version, after.version)
    assert.equal(0, after.content.Checkpoint)
    assert.equal(json.null, after.content.Subscriber)
    assert.is_nil(doc().applied)
  end)

  it("exits 2 with a usage line when no plugin is given", function()
    local code, out, err = run{ "run" }
    assert.equal(2, code, err)
    assert.equal("", out)
    assert.matches("^durable: run: [^\n]*usage: durable run[^\n]*\n$", err)
    code, out = run{ "run", "--help", store = false }
    assert.equal(0, code)
    assert.matches("usage: durable run", out, 1, true)
  end)
end)
