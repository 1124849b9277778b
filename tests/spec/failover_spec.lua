-- failover_spec.lua: a PostgreSQL primary with a streaming standby, both
-- private to each case (tests/support/pg.sh: durable_pg_start and
-- durable_pg_standby), a mesh on a URL that lists both, producers and
-- consumers busy on a few streams -- and then the primary goes and the
-- standby is promoted (pg_ctl stop -m immediate, pg_ctl promote).
--
-- What must hold: every publish that was told a sequence is there, under
-- that sequence, once (producers retry with their publish ids); no
-- consumer is handed an item again once a later one was handed (which
-- means it was acknowledged); every stream moves again soon after the
-- promotion; and the process says which server it is on now.  Every wait is
-- on a condition; the one time measured (the streams moving again after
-- the promotion) is bounded generously.
local helper = require "helper"

local FAMILY = "FailoverStream"
-- A consumer whose store fails backs off for 2 s, then 4, 8...: it tries
-- at about 0, 2 and 6 s into the outage, and next at 14.  The store's
-- reconnect ends that wait, so the streams move again within 5 s of a
-- promotion that came 7 s into the outage.
local STREAMS = { holder_probe_ms = 300, reclaim_ms = 400, backoff_min_ms = 2000,
  backoff_max_ms = 60000 }
local OUTAGE_MS = 7000
local OWNERS = 4
local BIN = os.getenv("DURABLE_BIN") or helper.BUILD .. "/durable"

-- `durable streams --json` on `store`: the line of each stream, by key
local function streams(store)
  local code, out, err = helper.sh(helper.quote(BIN) .. " streams --json --store " .. helper.quote(store))
  assert(code == 0, "durable streams: " .. err)
  local by_key = {}
  for line in out:gmatch("[^\n]+") do
    local row = require("durable").decode(line)
    by_key[row.key] = row
  end
  return by_key
end
local PACE_MS = 10

-- A primary and a standby of its own (mode "sync" or "async"); returns
-- { dir, ctl, standby_ctl, ha, primary, standby } and stops both after the
-- case.
local function cluster(mode)
  -- the folder first, so that a standby that fails still has it stopped
  local script = ". tests/support/pg.sh && unset DURABLE_TEST_PG_DIR && durable_pg_start >&2 && "
    .. "echo \"$DURABLE_TEST_PG_DIR\" && durable_pg_standby s1 " .. mode .. " >&2 && "
    .. "printf '%s\\n' \"$DURABLE_TEST_PG_CTL\" \"$DURABLE_TEST_PG_STANDBY_CTL\" "
    .. "\"$DURABLE_TEST_PG_HA\" \"$DURABLE_TEST_PG\" \"$DURABLE_TEST_PG_STANDBY\""
  local code, out, err = helper.sh("bash -c " .. helper.quote(script))
  local c = {}
  c.dir = out:match("^([^\n]+)\n")
  c.ctl, c.standby_ctl, c.ha, c.primary, c.standby =
    out:match("^[^\n]+\n([^\n]+)\n([^\n]+)\n([^\n]+)\n([^\n]+)\n([^\n]+)\n")
  finally(function()
    if c.dir then
      helper.sh("bash -c " .. helper.quote(". tests/support/pg.sh && DURABLE_TEST_PG_DIR="
        .. helper.quote(c.dir) .. " durable_pg_stop"))
    end
  end)
  assert(code == 0 and c.ha, "could not start a primary and a standby: " .. err)
  return c
end

local function run(cmd)
  local code, _, err = helper.sh(cmd)
  assert(code == 0, cmd .. ": " .. err)
end

-- Producers and consumers on OWNERS streams of `mesh`.  Each producer
-- publishes one item every PACE_MS, with the publish id "n<N>" and payload
-- { n = N }, and after a failure sends the same again (after 50 ms); `told[owner]`
-- lists the sequences it was told.  `handled[owner]` lists the sequences
-- handed to the consumer, in order.
local function busy(mesh, ns)
  local w = { ns = ns, told = {}, handled = {}, owners = {}, producing = true, errors = {},
    strict = true, refused = {} }
  local client = mesh:hub("client/" .. ns)
  local producers = {}
  for i = 1, OWNERS do
    local owner = ("%s/o%d"):format(ns, i)
    w.owners[i] = owner
    w.handled[owner] = {}
    -- the stream exists before its consumer starts (nothing wakes a
    -- consumer in a client hub when its stream is made)
    assert.equal(1, helper.ok(client:publish_durable({ namespace = FAMILY, key = owner }, { n = 1 },
      { id = "n1" })))
    w.told[owner] = { 1 }
    local hub = assert(mesh:hub(("client/%s/consumer%d"):format(ns, i)))
    assert.is_true(hub:consume { namespace = FAMILY, key = function() return owner end,
      handler = function(_, item)
        local list = w.handled[owner]
        list[#list + 1] = item.sequence
        if w.strict and (type(item.payload) ~= "table" or item.payload.n ~= item.sequence) then
          w.errors[#w.errors + 1] = ("%s: item %d carries %s"):format(owner, item.sequence,
            require("durable").encode(item.payload))
        end
      end })
    producers[owner] = { n = 2, busy = false, retry_at = 0 }
  end
  local function send(owner, p)
    p.busy = true
    client:publish_durable({ namespace = FAMILY, key = owner }, { n = p.n }, { id = "n" .. p.n })
      :next(function(seq)
        local told = w.told[owner]
        told[#told + 1] = seq
        p.n, p.busy, p.retry_at = p.n + 1, false, helper.now(mesh) + PACE_MS
      end, function(_, code)
        w.refused[code] = (w.refused[code] or 0) + 1
        p.busy, p.retry_at = false, helper.now(mesh) + 50
      end)
  end
  -- one step of every producer (run from run_until's predicate)
  function w.step()
    local now = helper.now(mesh)
    for owner, p in pairs(producers) do
      if w.producing and not p.busy and now >= p.retry_at then send(owner, p) end
    end
  end
  function w.idle()
    for _, p in pairs(producers) do if p.busy then return false end end
    return true
  end
  -- every publish answered, and every item told handed over
  function w.caught_up()
    if not w.idle() then return false end
    for _, owner in ipairs(w.owners) do
      local told, handled = w.told[owner], w.handled[owner]
      if #handled == 0 or handled[#handled] < told[#told] then return false end
    end
    return true
  end
  function w.run_until(pred, ms)
    helper.run_until(mesh, function() w.step() return pred() end, ms)
  end
  -- every stream handled at least `n` more items than `base` (a copy of
  -- the counts)
  function w.counts()
    local out = {}
    for _, owner in ipairs(w.owners) do out[owner] = #w.handled[owner] end
    return out
  end
  function w.moved(base, n)
    for _, owner in ipairs(w.owners) do
      if #w.handled[owner] < base[owner] + n then return false end
    end
    return true
  end
  return w
end

-- Nothing lost, nothing told twice, nothing acknowledged handed again.
local function assert_exactly(w)
  assert.same({}, w.errors)
  for _, owner in ipairs(w.owners) do
    local told, handled = w.told[owner], w.handled[owner]
    for i, seq in ipairs(told) do
      assert.equal(i, seq, owner .. ": publish " .. i .. " was told sequence " .. seq)
    end
    local seen = {}
    for i, seq in ipairs(handled) do
      if i > 1 then
        assert.is_true(seq >= handled[i - 1], ("%s: item %d handed after item %d (acknowledged)")
          :format(owner, seq, handled[i - 1]))
      end
      seen[seq] = true
    end
    for seq = 1, #told do assert.is_true(seen[seq], owner .. ": item " .. seq .. " never handled") end
  end
end

describe("a PostgreSQL failover #postgres", function()
  helper.each()

  if helper.KIND ~= "postgres" then
    it("needs PostgreSQL", function() pending("PostgreSQL only: a standby promoted") end)
    return
  end

  -- Plain readers of every stream of `w`, on `mesh`'s read store: the
  -- sequences each was handed, in order.
  local function readers(mesh, w)
    local hub, read = mesh:hub("client/" .. w.ns .. "/reader"), {}
    for _, owner in ipairs(w.owners) do
      local got = {}
      read[owner] = got
      hub:read_durable({ namespace = FAMILY, key = owner }, 0, function(item) got[#got + 1] = item.sequence end,
        nil, function(message) w.errors[#w.errors + 1] = "reader: " .. message end)
    end
    return read
  end

  it("with synchronous replication loses nothing, hands nothing acknowledged again, and every "
    .. "stream moves within 5 s of the promotion, whatever its backoff; a reader on the standby "
    .. "reads on across it", function()
    local c = cluster("sync")
    local mesh = helper.open { store = c.ha, read_store = c.standby, streams = STREAMS }
    local w = busy(mesh, helper.ns())
    local read = readers(mesh, w)
    local start = w.counts()
    w.run_until(function() return w.moved(start, 20) end, 20000)

    -- quiet during the outage: no append wakes a consumer in its backoff,
    -- only the store's reconnect can end it
    w.producing = false
    w.run_until(w.idle, 10000)
    run(helper.quote(c.ctl) .. " stop -m immediate")
    local stopped = helper.now(mesh)
    -- a publish from the command line during the outage: with --id it
    -- waits for the store and is appended once
    local cli = helper.tmpname(".cli")
    os.execute(("(%s publish --no-owner --store %s --id cli-1 %s %s '{\"n\":1}' >%s.out 2>%s.err; "
      .. "echo $? >%s.rc) &"):format(helper.quote(BIN), helper.quote(c.ha), FAMILY,
      helper.quote(w.ns .. "/cli"), cli, cli, cli))
    w.run_until(function() return helper.now(mesh) - stopped >= OUTAGE_MS end, OUTAGE_MS + 5000)
    run(helper.quote(c.standby_ctl) .. " promote")
    -- (each consumer claims its lease again, which it already held: a
    -- regrant, logged at debug only; the streams moving is what shows it)
    local promoted = helper.now(mesh)
    w.producing = true
    local base = w.counts()
    w.run_until(function() return w.moved(base, 5) end, 20000)
    local took = helper.now(mesh) - promoted
    assert.is_true(took < 5000, ("the streams moved again %d ms after the promotion"):format(took))
    assert.equal(1, #helper.log_lines("[Store] the server changed: now on " .. c.dir .. "/s1:"),
      "the change of server is said once: " .. table.concat(helper.logs, "\n"))

    w.producing = false
    w.run_until(w.caught_up, 20000)
    assert_exactly(w)
    -- the readers on the standby (now the primary): every item, in order, once
    w.run_until(function()
      for _, owner in ipairs(w.owners) do
        if #read[owner] < #w.told[owner] then return false end
      end
      return true
    end, 20000)
    for _, owner in ipairs(w.owners) do
      for i, seq in ipairs(read[owner]) do assert.equal(i, seq, owner .. ": the reader's item " .. i) end
      assert.equal(#w.told[owner], #read[owner], owner .. ": the reader has every item")
    end
    local function slurp(name)
      local f = io.open(cli .. name)
      local text = f and f:read("a")
      if f then f:close() end
      os.remove(cli .. name)
      return text
    end
    w.run_until(function()
      local f = io.open(cli .. ".rc")
      if f then f:close() end
      return f ~= nil
    end, 20000)
    local rc, out, err = slurp(".rc"), slurp(".out"), slurp(".err")
    assert.equal("0\n", rc, "durable publish --id failed: " .. err)
    assert.equal("1\n", out)
    assert.truthy(err:find("trying again", 1, true), "it said it waited: " .. err)
  end)

  it("hands a reader on a standby what the standby replays late, in order, when it has it",
    function()
    local c = cluster("async")
    local mesh = helper.open { store = c.primary, read_store = c.standby, streams = STREAMS }
    local ns = helper.ns()
    local id = { namespace = FAMILY, key = ns .. "/late" }
    local client = mesh:hub("client/" .. ns)
    assert.equal(1, helper.ok(client:publish_durable(id, { n = 1 })))
    local got = {}
    local sub = client:read_durable(id, 0, function(item) got[#got + 1] = item.sequence end)
    helper.run_until(mesh, function() return #got == 1 end, 10000)
    -- the standby stops replaying: what is published now is heard of (on
    -- the primary) before the standby has it.  Once replay goes on, and
    -- nothing is published any more, the reader finds the items by itself:
    -- those appended by this mesh (heard with their sequence), then those
    -- appended by another (heard as "changed elsewhere": the reader asks
    -- the primary how far)
    local psql = "psql -q -h " .. helper.quote(c.dir .. "/s1") .. " -U durable -d durable -c "
    local other = helper.open { store = c.primary }:hub("client/" .. ns)
    local function paused(producer, from, to, ms)
      run(psql .. helper.quote("SELECT pg_wal_replay_pause()"))
      for n = from, to do assert.equal(n, helper.ok(producer:publish_durable(id, { n = n }))) end
      mesh:run_until(function() return false end, ms)
      assert.equal(from - 1, #got, "nothing before the standby has it")
      run(psql .. helper.quote("SELECT pg_wal_replay_resume()"))
      helper.run_until(mesh, function() return #got == to end, 10000)
    end
    paused(client, 2, 20, 300)
    paused(other, 21, 40, 300)
    -- a standby that lags for long is said, and read on more slowly
    local since = #helper.logs
    paused(other, 41, 45, 10500)
    assert.equal(1, #helper.log_lines("on the read store has had nothing new for 10 s", since))
    -- a standby that is down a while: the reads that fail meanwhile are
    -- made again
    run(helper.quote(c.standby_ctl) .. " stop -m fast")
    for n = 46, 50 do assert.equal(n, helper.ok(client:publish_durable(id, { n = n }))) end
    mesh:run_until(function() return false end, 500)
    run(helper.quote(c.standby_ctl) .. " start")
    helper.run_until(mesh, function() return #got == 50 end, 10000)
    for i = 1, 50 do assert.equal(i, got[i]) end
    assert.equal("open", sub:status())
    sub:close()
    -- a reader whose first read found nothing, when what the standby then
    -- replays leaves a gap at its cursor: told of the trim, not left waiting
    local failed
    local late = client:read_durable(id, 50, function() end, nil, function(message) failed = message end)
    mesh:run_until(function() return false end, 300)
    run(psql .. helper.quote("SELECT pg_wal_replay_pause()"))
    for n = 51, 53 do assert.equal(n, helper.ok(other:publish_durable(id, { n = n }))) end
    assert.equal(52, helper.ok(mesh:trim_durable(id, 52, { force = true })))
    run(psql .. helper.quote("SELECT pg_wal_replay_resume()"))
    helper.run_until(mesh, function() return failed ~= nil end, 10000)
    assert.matches("items up to 52 were trimmed", failed, 1, true)
    late:close()
  end)

  it("with asynchronous replication behind, stops each stream that went back, re-issues no "
    .. "sequence, hands nothing acknowledged again, and goes on after a seek", function()
    local c = cluster("async")
    local mesh = helper.open { store = c.ha, streams = STREAMS }
    local w = busy(mesh, helper.ns())
    w.strict = false -- the lost items are published again, at later sequences
    local start = w.counts()
    w.run_until(function() return w.moved(start, 10) end, 20000)
    -- the standby stops receiving: everything from now on is the primary's alone
    run(("psql -q -h %s -U durable -d durable -c %s -c %s"):format(helper.quote(c.dir .. "/s1"),
      helper.quote("ALTER SYSTEM SET primary_conninfo = ''"), helper.quote("SELECT pg_reload_conf()")))
    start = w.counts()
    w.run_until(function() return w.moved(start, 30) end, 20000)
    w.producing = false
    w.run_until(w.caught_up, 20000)
    local told_before, handled_before = {}, {}
    for _, owner in ipairs(w.owners) do
      told_before[owner] = #w.told[owner]
      handled_before[owner] = #w.handled[owner]
    end
    run(helper.quote(c.ctl) .. " stop -m immediate")
    run(helper.quote(c.standby_ctl) .. " promote")
    w.producing = true
    local since = #helper.logs
    w.run_until(function()
      return #helper.log_lines("is stopped: the store is behind what a process saw", since) >= OWNERS
    end, 20000)
    -- stopped: nothing appended, nothing handed over
    local refused = w.refused.EIO or 0
    w.run_until(function() return (w.refused.EIO or 0) >= refused + 20 end, 10000)
    local listed = streams(c.ha)
    for _, owner in ipairs(w.owners) do
      assert.equal(told_before[owner], #w.told[owner], owner .. ": appended while stopped")
      assert.equal(handled_before[owner], #w.handled[owner], owner .. ": handed over while stopped")
      local row = assert(listed[owner], "durable streams lists " .. owner)
      assert.equal(w.told[owner][#w.told[owner]], row.stopped.seen_last)
      assert.equal(w.handled[owner][#w.handled[owner]], row.stopped.seen_checkpoint)
      assert.truthy(row.last_error:find("durable seek " .. FAMILY .. " " .. owner .. " --to", 1, true),
        "durable streams names the seek: " .. row.last_error)
    end
    -- the operator goes on after the last item acknowledged: half from
    -- this process, half with the command the message names, from another
    for i, owner in ipairs(w.owners) do
      local acked = w.handled[owner][#w.handled[owner]]
      if i % 2 == 0 then
        helper.ok(mesh:seek_durable({ namespace = FAMILY, key = owner }, acked), 10000)
      else
        local seek = ("%s seek --store %s %s %s --to %d"):format(helper.quote(BIN), helper.quote(c.ha),
          FAMILY, helper.quote(owner), acked)
        assert.truthy(listed[owner].last_error:find(("seek %s %s --to %d"):format(FAMILY, owner, acked),
          1, true), "the message names this seek: " .. listed[owner].last_error)
        run(seek)
      end
    end
    start = w.counts()
    w.run_until(function() return w.moved(start, 10) end, 20000)
    w.producing = false
    w.run_until(w.caught_up, 20000)
    listed = streams(c.ha)
    for _, owner in ipairs(w.owners) do
      local row = listed[owner]
      assert.equal(0, row.lag, owner .. ": the lost sequences are no lag")
      assert.equal(require("durable").null, row.stopped, owner .. " goes on")
      assert.is_true(row.lost.to == w.told[owner][told_before[owner]] and row.lost.from <= row.lost.to,
        owner .. ": the loss is recorded up to the last sequence told")
      local told, handled = w.told[owner], w.handled[owner]
      for i = 2, #told do
        assert.is_true(told[i] > told[i - 1], ("%s: sequence %d told again"):format(owner, told[i]))
      end
      assert.is_true(told[told_before[owner] + 1] > told[told_before[owner]],
        owner .. ": a sequence told before the failover was given again")
      for i = 2, #handled do
        assert.is_true(handled[i] > handled[i - 1] or (i > handled_before[owner] and
          handled[i] == handled[i - 1]), ("%s: item %d handed after item %d"):format(owner,
          handled[i], handled[i - 1]))
      end
    end
  end)

  it("writes to neither of two servers that both take writes, and goes on once one is gone",
    function()
      local c = cluster("async")
      local mesh = helper.open { store = c.ha, streams = STREAMS }
      local key = helper.ns() .. "/split"
      local stream = { namespace = FAMILY, key = key }
      local client = mesh:hub("client/" .. key)
      assert.equal(1, helper.ok(client:publish_durable(stream, { n = 1 })))
      -- the standby is promoted while the primary runs on: two primaries
      run(helper.quote(c.standby_ctl) .. " promote")
      helper.run_until(mesh, function()
        return #helper.log_lines("[Store] more than one server takes writes") > 0
      end, 20000)
      local message = helper.fails(client:publish_durable(stream, { n = 2 }), "EUNAVAIL", 20000)
      assert.truthy(message:find("more than one server takes writes", 1, true), message)
      assert.truthy(message:find(c.dir .. ":", 1, true) and message:find(c.dir .. "/s1:", 1, true),
        "both servers named: " .. message)
      local standby = ("postgresql:///durable?host=%s/s1&user=durable"):format(c.dir)
      assert.equal(1, streams(c.primary)[key].last, "nothing written to the primary")
      assert.equal(1, streams(standby)[key].last, "nothing written to the promoted standby")

      -- the old primary goes: writing goes on, on the one left
      run(helper.quote(c.ctl) .. " stop -m immediate")
      helper.run_until(mesh, function()
        return #helper.log_lines("[Store] only one server takes writes again") > 0
      end, 20000)
      assert.equal(2, helper.ok(client:publish_durable(stream, { n = 2 }), 20000))
      assert.equal(2, streams(standby)[key].last)
    end)

  it("says why a commit waits for a synchronous standby that is not there", function()
    local c = cluster("sync")
    local mesh = helper.open { store = c.ha, streams = STREAMS }
    local stream = { namespace = FAMILY, key = helper.ns() .. "/sync" }
    local client = mesh:hub("client/" .. stream.key)
    assert.equal(1, helper.ok(client:publish_durable(stream, { n = 1 })))
    run(helper.quote(c.standby_ctl) .. " stop -m fast")
    local got
    client:publish_durable(stream, { n = 2 }):next(function(seq) got = seq end)
    helper.run_until(mesh, function()
      return #helper.log_lines("a commit has waited") > 0
    end, 20000)
    local line = helper.log_lines("a commit has waited")[1]
    assert.truthy(line:find("for synchronous replication", 1, true), line)
    assert.truthy(line:find("synchronous_standby_names = 'ANY 1 (s1)'", 1, true), line)
    assert.is_nil(got, "the commit waited")
    run(helper.quote(c.standby_ctl) .. " start")
    helper.run_until(mesh, function() return got ~= nil end, 20000)
    assert.equal(2, got)
    assert.equal(1, #helper.log_lines("the commit that waited has been answered"))
  end)

  it("comes back by itself after a plain restart of the primary, with a URL that lists the "
    .. "standby first", function()
    local c = cluster("sync")
    local standby_first = ("postgresql:///durable?host=%s/s1,%s&user=durable"):format(c.dir, c.dir)
    local mesh = helper.open { store = standby_first, streams = STREAMS }
    local w = busy(mesh, helper.ns())
    local start = w.counts()
    w.run_until(function() return w.moved(start, 10) end, 20000)
    run(helper.quote(c.ctl) .. " restart -m fast")
    start = w.counts()
    w.run_until(function() return w.moved(start, 10) end, 20000)
    assert.equal(0, #helper.log_lines("[Store] the server changed"), "still the same server")
    w.producing = false
    w.run_until(w.caught_up, 20000)
    assert_exactly(w)
  end)
end)
