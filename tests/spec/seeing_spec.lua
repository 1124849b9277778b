-- seeing_spec.lua: what an operator sees of streams: `durable streams`
-- with the backlog's age, a failing consumer's attempts and error and the
-- dead-letter count; the counters of
-- mesh:stats().streams; `durable run --metrics HOST:PORT` scraped with curl
-- while the host drains a stream; bad --metrics values refused.
--
-- Store-parametrised like run_spec.lua (DURABLE_TEST_STORE=sqlite|postgres).
-- On PostgreSQL the database is shared by every spec, so each test uses a
-- family of its own (SOURCE below, written to a temp plugin file): the
-- metrics' per-family sums see only this test's streams.

local json = require "dkjson"
local helper = require "helper"
local durable = require "durable"

local cmd = require "command"
local read_file, spit, tmpname = cmd.read_file, cmd.spit, cmd.tmpname
local sleep, wait_for, run, spawn = cmd.sleep, cmd.wait_for, cmd.run, cmd.spawn
local exit_code, running = cmd.exit_code, cmd.running

-- A Seen node consumes FAMILY@{its path} with max_attempts = 2: an item
-- whose payload has "bad" fails every time ("item N is bad"); the others
-- are appended to the node's "seen" list.
local SOURCE = [[
local durable = require "durable"
return {
  node_types = {
    Seen = function(config)
      config:with_durable_stream_consumer {
        namespace = FAMILY,
        max_attempts = 2,
        handler = function(hub, item, tx)
          if item.payload.bad then
            -- bad = "latin1": a message that is not UTF-8, as a handler may raise
            durable.fail("EINVAL", "item " .. item.sequence .. " is bad"
              .. (item.payload.bad == "latin1" and " caf\xE9" or ""))
          end
          tx:update_node(hub.address, function(node)
            local seen = node.content.seen or {}
            seen[#seen + 1] = item.payload.i
            node.content.seen = seen
            return node
          end)
        end,
      }
    end,
  },
}
]]

local tests = 0
local function plugin(family)
  local file = cmd.track(tmpname() .. ".lua")
  spit(file, (SOURCE:gsub("FAMILY", ("%q"):format(family))))
  return file
end

local function signal(job, name)
  assert.is_true(os.execute("kill -" .. name .. " " .. job.pid) == true, "kill -" .. name)
end

local function host(args, env)
  local job = spawn(args)
  local up = wait_for(function()
    return (read_file(job.err) or ""):find("durable run: hosting", 1, true) or not running(job)
  end, 10)
  assert.truthy(up and running(job), "the host did not start: " .. (read_file(job.err) or ""))
  return job
end

local function stop(job)
  signal(job, "INT")
  local rc = exit_code(job, 10)
  local err = read_file(job.err) or ""
  assert.equal(0, rc, "the host's exit status after SIGINT:\n" .. err)
  return err
end

local function lines_with(err, text)
  local n = 0
  for line in err:gmatch("[^\n]+") do
    if line:find(text, 1, true) then n = n + 1 end
  end
  return n
end

describe("seeing streams (" .. cmd.KIND .. ")", function()
  local P, KEY, FAMILY, PLUGIN

  before_each(function()
    local _
    _, P = cmd.begin("seespec")
    tests = tests + 1
    FAMILY = ("See%s%d"):format(cmd.RUN, tests)
    KEY = P .. "/seen"
    PLUGIN = plugin(FAMILY)
    local code, _, err = run{ "put", KEY, "Seen", "{}" }
    assert.equal(0, code, err)
  end)

  after_each(cmd.finish)

  local function publish(payload)
    local code, out, err = run{ "publish", FAMILY, KEY, json.encode(payload) }
    assert.equal(0, code, err)
    return tonumber(out)
  end

  -- this test's stream as `durable streams --json` shows it
  local function listed()
    local code, out, err = run{ "streams", "--json" }
    assert.equal(0, code, err)
    for line in out:gmatch("[^\n]+") do
      local row = assert(json.decode(line, 1, json.null), line)
      if row.stream == FAMILY .. "@" .. KEY then return row end
    end
  end

  it("durable streams shows the backlog's age, a failing consumer's attempts and error, "
    .. "and the dead letters; the attempts count across a restart of the host", function()
    publish{ i = 1 }
    publish{ i = 2, bad = true }
    publish{ i = 3 }
    sleep(0.3)
    local row = assert(listed())
    assert.equal(3, row.lag)
    assert.is_string(row.oldest_unacknowledged_at)
    assert.is_true(row.oldest_unacknowledged_age_ms >= 250, tostring(row.oldest_unacknowledged_age_ms))
    assert.equal(0, row.attempts)
    assert.equal(json.null, row.last_error)
    assert.equal(0, row.dead_letters)

    -- host A: item 1 goes, item 2 fails once (then a 1 s backoff)
    local a = host{ "run", PLUGIN }
    row = wait_for(function()
      local r = listed()
      return r and r.attempts == 1 and r
    end, 10)
    local a_err = stop(a)
    assert.truthy(row, "no failure was shown: " .. a_err)
    assert.equal(1, row.checkpoint)
    assert.equal(2, row.lag)
    assert.matches("item 2 is bad", row.last_error)
    assert.is_string(row.failed_at)
    assert.is_true(row.oldest_unacknowledged_age_ms >= 250)
    -- the table says it too
    local code, out = run{ "streams" }
    assert.equal(0, code)
    assert.matches("ATTEMPTS", out)
    assert.matches("DEAD", out)
    assert.matches("OLDEST", out)
    local line = out:match("[^\n]*" .. (FAMILY .. "@" .. KEY):gsub("%p", "%%%0") .. "[^\n]*")
    assert.truthy(line, out)
    assert.matches("item 2 is bad", line)

    -- host B: the second failure is the item's second (counted from the
    -- record host A left), so it is dead-lettered at once: B never backs off
    local b = host{ "run", PLUGIN }
    assert.truthy(wait_for(function()
      local r = listed()
      return r and r.checkpoint == 3
    end, 15), read_file(b.err))
    local b_err = stop(b)
    assert.equal(1, lines_with(b_err, "failed 2 times"), b_err)
    assert.equal(0, lines_with(b_err, "was NOT acknowledged"), b_err)
    row = assert(listed())
    assert.equal(0, row.lag)
    assert.equal(json.null, row.oldest_unacknowledged_at)
    assert.equal(0, row.attempts)
    assert.equal(json.null, row.last_error)
    assert.equal(1, row.dead_letters)
    -- the lease's history, as the stream node keeps it: host B held it last
    -- and let it go when it stopped
    local node_code, node_out, node_err = run{ "get", "@" .. KEY .. "/_DurableStream/" .. FAMILY }
    assert.equal(0, node_code, node_err)
    local stored = assert(json.decode(node_out, 1, json.null), node_out).content
    assert.equal(json.null, row.subscriber)
    assert.equal(KEY, row.last_subscriber)
    assert.equal(stored.LastSubscriber, row.last_subscriber)
    for field, name in pairs { subscribed_at = "SubscribedAt", checkpoint_at = "CheckpointAt",
                               orphaned_at = "OrphanedAt" } do
      assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$", row[field], field)
      assert.equal(stored[name], row[field], field)
    end
    local _, table_out = run{ "streams" }
    local table_line = table_out:match("[^\n]*" .. (FAMILY .. "@" .. KEY):gsub("%p", "%%%0") .. "[^\n]*")
    assert.truthy(table_line:find("  " .. row.orphaned_at .. "  ", 1, true), table_line)
  end)

  it("a handler's message that is not UTF-8 is recorded with '?' for each byte past ASCII",
    function()
    publish{ i = 1, bad = "latin1" }
    local a = host{ "run", PLUGIN }
    local row = wait_for(function()
      local r = listed()
      return r and r.attempts == 1 and r
    end, 10)
    stop(a)
    assert.truthy(row, "no failure was shown")
    assert.matches("item 1 is bad caf%?$", row.last_error)
  end)

  it("a failure recorded by a host that stopped is not shown once another host handled "
    .. "the item, and a seek clears it; a node that is no stream is left out", function()
    publish{ i = 1, bad = true }
    local a = host{ "run", PLUGIN }
    assert.truthy(wait_for(function()
      local r = listed()
      return r and r.attempts == 1
    end, 10), read_file(a.err))
    stop(a)
    -- the item is made good by hand: the next host handles it at once
    local item = KEY .. "/_DurableStream/" .. FAMILY .. "/_DurableStreamItem/000000000001"
    local code, _, err = run{ "put", item, "DurableStreamItem",
      json.encode { Sequence = 1, PayloadJson = '{"i":1}', AppendedAt = json.null } }
    assert.equal(0, code, err)
    local b = host{ "run", PLUGIN }
    assert.truthy(wait_for(function()
      local r = listed()
      return r and r.checkpoint == 1
    end, 10), read_file(b.err))
    stop(b)
    assert.equal(0, listed().attempts, "a record of an item handled since is not shown")
    -- replayed, item 1 (good now) is not dead-lettered on an old count:
    -- the seek clears the record
    code, _, err = run{ "seek", FAMILY, KEY, "--to", "0" }
    assert.equal(0, code, err)
    local record = KEY .. "/_DurableStream/" .. FAMILY .. "/_DurableStreamFailure"
    local out
    code, out = run{ "get", "@" .. record }
    assert.are_not.equal(0, code, "the record is gone: " .. tostring(out))
    assert.equal(0, listed().attempts)
    -- a DurableStream node anywhere, made by hand, breaks no listing
    code, _, err = run{ "put", P .. "/stray", "DurableStream", "{}" }
    assert.equal(0, code, err)
    code, _, err = run{ "streams" }
    assert.equal(0, code, err)
    assert.truthy(listed())
  end)

  it("durable streams --help names the new columns", function()
    local code, out = run{ "streams", "--help" }
    assert.equal(0, code)
    for _, word in ipairs { "OLDEST", "ATTEMPTS", "LAST_ERROR", "DEAD", "dead_letters" } do
      assert.matches(word, out, 1, true)
    end
  end)

  -- the host's metrics, as a scraper reads them: { ["name{labels}"] = value }
  local function scrape(port, path)
    local out = tmpname()
    local _, _, code = os.execute(("curl -s -S -o %s -w '%%{http_code}' http://127.0.0.1:%d%s > %s.code")
      :format(out, port, path or "/metrics", out))
    local status = tonumber(read_file(out .. ".code"))
    local text = read_file(out) or ""
    local values = {}
    for name, value in text:gmatch("\n?([%w_]+[^ \n]*) ([%d.e+-]+)") do values[name] = tonumber(value) end
    return status, values, text
  end

  it("durable run --metrics serves Prometheus text that moves while the host drains", function()
    publish{ i = 1 }
    publish{ i = 2, bad = true }
    publish{ i = 3 }
    local h = host{ "run", "--metrics", "127.0.0.1:0", PLUGIN }
    local port = tonumber((read_file(h.err) or ""):match("serving metrics at http://127%.0%.0%.1:(%d+)/metrics"))
    assert.truthy(port, read_file(h.err))
    local L = ('{family="%s"}'):format(FAMILY)
    -- one scrape is one moment: its counters are never behind its gauges
    -- (every item the lag says is acknowledged was counted, handled or
    -- dead-lettered, by this process, the only one consuming)
    local published = 3
    local function scrape_checked()
      local status, v, text = scrape(port)
      local lag = v["durable_stream_lag" .. L]
      if lag then
        local counted = v["durable_stream_handled_total" .. L] + v["durable_stream_dead_lettered_total" .. L]
        assert(counted >= published - lag, "a scrape's counters behind its gauges:\n" .. text)
      end
      return status, v, text
    end
    -- item 2 fails once and waits its backoff (1 s): the lag is seen
    local status, m, text = scrape_checked()
    assert.equal(200, status, text)
    assert.matches("# TYPE durable_stream_lag gauge", text, 1, true)
    assert.matches("# HELP durable_stream_handled_total", text, 1, true)
    assert.matches("# TYPE durable_stream_handled_total counter", text, 1, true)
    assert.truthy(m["process_resident_memory_bytes"] > 0, text)
    assert.truthy(m["process_cpu_seconds_total"] > 0, text)
    assert.truthy(m["process_start_time_seconds"] > 1.7e9, text)
    assert.truthy(m["durable_active_hubs"] >= 1, text)
    assert.equal(0, m["durable_publish_waiting"], text)
    assert.matches("# TYPE durable_publish_refused_total counter", text, 1, true)
    local waited = wait_for(function()
      local _, v = scrape_checked()
      return v["durable_stream_lag" .. L] and v["durable_stream_lag" .. L] >= 1
        and v["durable_stream_failing" .. L] == 1
        and v["durable_stream_oldest_unacknowledged_age_seconds" .. L] > 0 and v
    end, 10)
    assert.truthy(waited, "never saw the lag: " .. select(3, scrape_checked()))
    assert.equal(1, waited["durable_stream_handled_total" .. L])
    assert.equal(1, waited["durable_stream_failed_total" .. L])
    -- then it is dead-lettered and the stream drains (the dead letter's
    -- append follows its acknowledgement, beside item 3: wait for both)
    local drained = wait_for(function()
      local _, v = scrape_checked()
      return v["durable_stream_lag" .. L] == 0 and v["durable_stream_handled_total" .. L] == 2
        and v["durable_stream_dead_letters" .. L] == 1 and v
    end, 15)
    assert.truthy(drained, "never drained: " .. select(3, scrape_checked()) .. read_file(h.err))
    assert.equal(0, drained["durable_stream_oldest_unacknowledged_age_seconds" .. L])
    assert.equal(2, drained["durable_stream_failed_total" .. L])
    assert.equal(1, drained["durable_stream_redelivered_total" .. L])
    assert.equal(1, drained["durable_stream_dead_lettered_total" .. L])
    assert.equal(1, drained["durable_stream_dead_letters" .. L])
    assert.equal(1, drained["durable_streams" .. L])
    -- a new item moves the counters again
    publish{ i = 4 }
    published = 4
    assert.truthy(wait_for(function()
      local _, v = scrape_checked()
      return v["durable_stream_handled_total" .. L] == 3
    end, 10), select(3, scrape_checked()))
    -- other paths and methods
    assert.equal(404, (scrape(port, "/")))
    assert.equal(404, (scrape(port, "/metrics/x")))
    local out = tmpname()
    os.execute(("curl -s -o /dev/null -w '%%{http_code}' -X POST http://127.0.0.1:%d/metrics > %s"):format(port, out))
    assert.equal("405", read_file(out))
    stop(h)
    -- the port is let go with the host
    assert.is_false(os.execute(("curl -s -o /dev/null http://127.0.0.1:%d/metrics"):format(port)) == true)
  end)

  it("durable run refuses a bad --metrics address, and a port in use, before it starts", function()
    for _, bad in ipairs { "nope", "127.0.0.1", "127.0.0.1:70000", "example.com:9464", ":9464", "1.2.3:80" } do
      local code, _, err = run{ "run", "--metrics", bad, PLUGIN }
      assert.equal(2, code, bad .. ": " .. err)
      assert.matches("metrics address '" .. bad:gsub("%p", "%%%0") .. "'", err)
      assert.is_nil(err:find("hosting", 1, true), err)
    end
    local code, _, err = run{ "run", "--metrics", "", PLUGIN }
    assert.equal(2, code, err)
    local a = host{ "run", "--metrics", "127.0.0.1:0", PLUGIN }
    local port = (read_file(a.err) or ""):match("serving metrics at http://127%.0%.0%.1:(%d+)/metrics")
    assert.truthy(port)
    code, _, err = run{ "run", "--metrics", "127.0.0.1:" .. port, PLUGIN }
    assert.equal(1, code, err)
    assert.matches("cannot serve metrics on 127%.0%.0%.1:" .. port .. ": Address already in use", err)
    assert.is_nil(err:find("hosting", 1, true), err)
    stop(a)
  end)
end)

describe("mesh:stats().streams (" .. helper.KIND .. ")", function()
  helper.each()

  it("counts appended, handled, failed, redelivered, dead-lettered and trimmed per stream", function()
    local family = "SeeStats" .. helper.RUN
    local file = plugin(family)
    local mesh = helper.open { plugins = { file }, streams = { backoff_min_ms = 20, backoff_max_ms = 40 } }
    local key = helper.ns() .. "/seen"
    helper.ok(mesh:put_node { path = key, node_type = "Seen", content = {} })
    local client = mesh:hub("client/" .. key)
    local stream = { namespace = family, key = key }
    helper.ok(client:publish_durable(stream, { i = 1 }))
    helper.ok(client:publish_durable(stream, { i = 2, bad = true }))
    helper.ok(client:publish_durable(stream, { i = 3 }))
    local name = family .. "@" .. key
    helper.run_until(mesh, function()
      local s = mesh:stats().streams[name]
      return s and s.handled == 2 and s.dead_lettered == 1
    end, 10000)
    local s = mesh:stats().streams[name]
    assert.same({ appended = 3, handled = 2, failed = 2, redelivered = 1, dead_lettered = 1, trimmed = 0,
      batches = 0 }, s) -- a one-item handler: no batches
    -- the dead letter is appended by this process too, once acknowledged
    helper.run_until(mesh, function()
      local d = mesh:stats().streams[family .. ".dead@" .. key]
      return d and d.appended == 1
    end, 10000)
    helper.ok(mesh:trim_durable(stream, 3))
    assert.equal(3, mesh:stats().streams[name].trimmed)
    -- and the C counters of the mesh are still there
    assert.is_number(mesh:stats().activations)
  end)

  it("durable.open{ metrics = } refuses a malformed address with nil, message, code", function()
    local mesh, message, code = durable.open { store = helper.store(), metrics = "nowhere" }
    assert.is_nil(mesh)
    assert.equal("EINVAL", code)
    assert.matches("metrics address 'nowhere' is not HOST:PORT", message)
    assert.has_error(function() durable.open { store = helper.store(), metrics = 9464 } end)
    local m = helper.open {}
    assert.is_true(m:serve_metrics("127.0.0.1:0"))
    local ok, why, again = m:serve_metrics("127.0.0.1:0")
    assert.is_nil(ok)
    assert.equal("EEXIST", again)
    assert.matches("serves its metrics already", why)
    m:close()
  end)
end)
