-- processes_spec.lua: many `durable run` hosts and producer processes on one
-- database -- PostgreSQL, or one SQLite file shared by them all.
--
-- Real processes throughout: hosts are `durable run` of the fixture plugin
-- tests/spec/fixtures/processes.lua (NodeType MpProbe consuming the family
-- Probe, keyed by its own address), producers are `durable publish` or
-- `durable lua tests/spec/fixtures/mp_producer.lua` (many publishes, one
-- line "ok OWNER SEQ I" per sequence it was told).  Every item a handler
-- gets is appended, before the item completes, as "KEY SEQ VALUE PID" to
-- this test's log file ($DURABLE_MP_LOG), which survives a SIGKILL; the
-- checks read that file:
--
--   a. one host, a separate producer: every item once, in order, across a
--      recycle of the consumer mid-stream (streams_spec's first case, with
--      real processes);
--   b. two hosts, 20 owners x 50 items: once each, in order, one pid per
--      owner; SIGTERM releases every lease and exits 0;
--   c. two hosts SIGKILLed and restarted again and again while a producer
--      publishes: nothing heard is lost, a redelivery repeats only the
--      item in flight, at most once per kill;
--   d. PostgreSQL restarted under hosts and a producer: the same, the
--      restart counting as one event (#postgres);
--   e. a live holder whose handler takes 10 s keeps its lease against a
--      claim from another process (here: this spec process itself);
--   g. a host stopped with SIGTERM hands its streams over: the other host
--      goes on with no takeover and nothing handled twice;
--   f. examples/multi-process/run.sh passes on the test PostgreSQL
--      (#postgres).
--
-- The fixture also consumes the family in the consumer group "g" (logged
-- as "OWNER#g"): in b, c, d and g the group must see every item once, in
-- order, as the stream's own consumer does -- its lease taken over and
-- handed on on its own.
--
-- Store-parametrised like run_spec.lua: DURABLE_TEST_STORE=sqlite (a temp
-- file per test, shared by the test's processes) or postgres
-- (DURABLE_TEST_PG; DURABLE_TEST_PG_CTL for d).  Waits poll with deadlines;
-- no fixed sleep is an assertion.  Every process is killed after its test
-- (command.lua's finish).
local json = require "dkjson"
local helper = require "helper"
local cmd = require "command"

local read_file, spit, wait_for = cmd.read_file, cmd.spit, cmd.wait_for
local run, spawn, exit_code, running = cmd.run, cmd.spawn, cmd.exit_code, cmd.running

local FIXTURE = "tests/spec/fixtures/processes.lua"
local PRODUCER = "tests/spec/fixtures/mp_producer.lua"
local FAMILY = "Probe"
local NODE_TYPE = "MpProbe"

local NS, LOG -- this test's namespace and handled-items log file

-- ---- processes ---------------------------------------------------------------

local signal = cmd.signal

-- A host of the fixture on this test's store, up.
local function host() return cmd.host(FIXTURE, { DURABLE_MP_LOG = LOG }) end

-- SIGTERM: the host must leave and exit 0 within 15 s.
local function stop(job)
  signal(job, "TERM")
  local rc = exit_code(job, 15)
  assert.equal(0, rc, "the host's exit status after SIGTERM:\n" .. (read_file(job.err) or ""))
end

local kill = cmd.kill

-- A producer process (mp_producer.lua): mode "count" (limit = N) or
-- "until" (limit = a stop file), pause before each publish, owners.
local function producer(mode, limit, pause_ms, owners, item_ms)
  local args = { "lua", PRODUCER, mode, tostring(limit), tostring(pause_ms),
                 env = item_ms and { MP_ITEM_MS = tostring(item_ms) } or nil }
  for _, owner in ipairs(owners) do args[#args + 1] = owner end
  return spawn(args)
end

-- What a producer heard: per owner the sequences it was told (a set and
-- the highest), the ok lines' i per sequence, and its failures.
local function heard(job)
  local per, failed = {}, {}
  for line in (read_file(job.out) or ""):gmatch("[^\n]+") do
    local owner, seq, i = line:match("^ok (%S+) (%d+) (%d+)$")
    if owner then
      local h = per[owner] or { seqs = {}, max = 0, value = {} }
      per[owner] = h
      seq = tonumber(seq)
      h.seqs[#h.seqs + 1] = seq
      h.value[seq] = tonumber(i)
      if seq > h.max then h.max = seq end
    elseif line:match("^failed ") then
      failed[#failed + 1] = line
      local owner_failed = line:match("^failed (%S+) ")
      per[owner_failed] = per[owner_failed] or { seqs = {}, max = 0, value = {} }
      per[owner_failed].failures = (per[owner_failed].failures or 0) + 1
    else
      assert.equal("done", line, "an unexpected producer line")
    end
  end
  return per, failed
end

-- `durable publish FAMILY OWNER PAYLOAD` from a process of its own: the
-- sequence it printed.
local function publish(owner, payload)
  local code, out, err = run { "publish", FAMILY, owner, json.encode(payload) }
  assert.equal(0, code, err)
  return assert(tonumber(out), out)
end

-- Owner nodes of the fixture's NodeType: NS/o1 .. NS/on.
local function owners(n)
  local list = {}
  for i = 1, n do
    list[i] = ("%s/o%d"):format(NS, i)
    local code, _, err = run { "put", list[i], NODE_TYPE, "{}" }
    assert.equal(0, code, err)
  end
  return list
end

local function get(path)
  local code, out, err = run { "get", "@" .. path }
  if code ~= 0 then return nil, err end
  return assert(json.decode(out, 1, json.null), out)
end

local function stream_path(owner) return owner .. "/_DurableStream/" .. FAMILY end

local function state(owner)
  local node = get(stream_path(owner))
  return node and node.content
end

-- ---- the handled log ---------------------------------------------------------

-- Every line of the log about this test's owners: { key, seq, value (nil
-- for "-"), pid }, in file order.  A host consumes every MpProbe stream of
-- the store, so on a database shared with other specs (neighbours_spec
-- leaves a backlog behind) it handles theirs too; those lines are not this
-- test's to count.
local function entries()
  local list, mine = {}, NS .. "/"
  for line in (read_file(LOG) or ""):gmatch("[^\n]+") do
    local key, seq, value, pid = line:match("^(%S+) (%d+) (%S+) (%d+)$")
    assert(key, "a malformed log line: " .. line)
    if key:sub(1, #mine) == mine then
      list[#list + 1] = { key = key, seq = tonumber(seq), value = tonumber(value), pid = tonumber(pid) }
    end
  end
  return list
end

-- Per key: the handled sequences in log order, their values and pids.
local function by_key(list)
  local per = {}
  for _, e in ipairs(list or entries()) do
    local k = per[e.key] or { seqs = {}, values = {}, pids = {} }
    per[e.key] = k
    k.seqs[#k.seqs + 1] = e.seq
    k.values[#k.values + 1] = e.value
    k.pids[#k.pids + 1] = e.pid
  end
  return per
end

local function highest(seqs)
  local m = 0
  for _, s in ipairs(seqs or {}) do if s > m then m = s end end
  return m
end

local function range(a, b)
  local out = {}
  for i = a, b do out[#out + 1] = i end
  return out
end

-- A list as text; a long one as its first and last 40 (what a failure
-- message needs, without pages of numbers).
local function show(list)
  local out = {}
  for j, v in ipairs(list) do
    if #list <= 100 or j <= 40 or j > #list - 40 then
      out[#out + 1] = tostring(v)
    elseif j == 41 then
      out[#out + 1] = ("... (%d more) ..."):format(#list - 80)
    end
  end
  return table.concat(out, " ")
end

-- The log lines of sequences handled more than once, as text.
local function duplicates(list)
  local seen, out = {}, {}
  for _, e in ipairs(list) do
    local id = e.key .. " " .. e.seq
    if seen[id] then
      out[#out + 1] = ("%s %d (value %s) by pid %d, first by pid %d"):format(e.key, e.seq,
        tostring(e.value), e.pid, seen[id].pid)
    else
      seen[id] = e
    end
  end
  return table.concat(out, "\n")
end

-- Wait until every owner handled sequence `want[owner]` (in order, so all
-- before it too); the per-key log.
local function wait_handled(want, seconds, why)
  local per
  local ok = wait_for(function()
    per = by_key()
    for owner, n in pairs(want) do
      if highest(per[owner] and per[owner].seqs) < n then return false end
    end
    return true
  end, seconds)
  if not ok then
    local lag = {}
    for owner, n in pairs(want) do
      lag[#lag + 1] = ("%s: handled up to %d of %d"):format(owner,
        highest(per[owner] and per[owner].seqs), n)
    end
    table.sort(lag)
    error((why or "not everything was handled in time") .. ":\n" .. table.concat(lag, "\n"), 2)
  end
  return per
end

-- The end state after `events` kills or restarts, against what the
-- producer heard: every heard sequence handled; per stream, handled
-- sequences in log order start at 1 and go up by one, except a redelivery,
-- which repeats the stream's last handled sequence (the item in flight);
-- at most `events` redeliveries per stream.  Where the producer never had
-- to retry, every item's value is its sequence.  Returns the redeliveries
-- per owner.
local function assert_end_state(per_heard, events)
  local per = by_key()
  local both = {} -- the stream's own consumer and its group "g" alike
  for owner, h in pairs(per_heard) do
    both[owner], both[owner .. "#g"] = h, h
  end
  per_heard = both
  local redelivered = {}
  for owner, h in pairs(per_heard) do
    local k = per[owner] or { seqs = {}, values = {}, pids = {} }
    local seqs = k.seqs
    assert.is_true(#seqs > 0, owner .. ": nothing handled")
    assert.equal(1, seqs[1], owner .. ": the first item handled is not sequence 1: " .. show(seqs))
    local again = 0
    for j = 2, #seqs do
      if seqs[j] == seqs[j - 1] then
        again = again + 1
      elseif seqs[j] ~= seqs[j - 1] + 1 then
        error(("%s: sequence %d handled after %d (position %d); a redelivery may only repeat "
          .. "the last handled sequence.  Handled: %s\nby pids: %s"):format(owner, seqs[j],
          seqs[j - 1], j, show(seqs), show(k.pids)), 2)
      end
    end
    redelivered[owner] = again
    assert.is_true(again <= events, ("%s: %d redeliveries after %d event(s): %s\nby pids: %s")
      :format(owner, again, events, show(seqs), show(k.pids)))
    local top = seqs[#seqs]
    for _, s in ipairs(h.seqs) do
      assert.is_true(s <= top, ("%s: sequence %d was published (the producer was told so) but "
        .. "never handled; handled up to %d"):format(owner, s, top))
    end
    if not h.failures then
      for j, s in ipairs(seqs) do
        assert.equal(s, k.values[j], owner .. ": item " .. s .. " carries another value")
      end
    end
  end
  return redelivered
end

-- The lines of a host's stderr that contain `text`.
local function lines_with(job, text)
  local out = {}
  for line in (read_file(job.err) or ""):gmatch("[^\n]+") do
    if line:find(text, 1, true) then out[#out + 1] = line end
  end
  return out
end

local function all_lines_with(jobs, text)
  local out = {}
  for _, job in ipairs(jobs) do
    for _, line in ipairs(lines_with(job, text)) do out[#out + 1] = line end
  end
  return out
end

local function own_pid()
  local f = assert(io.open("/proc/self/stat", "r"))
  local pid = tonumber(f:read("l"):match("^(%d+)"))
  f:close()
  return pid
end

-- ---- two hosts and a busy producer ----------------------------------------

-- Two hosts and a producer publishing to four owners until told to stop
-- (a pause of `pause_ms` before each publish; each item takes 5 ms);
-- returns once `warm` items were handled.
local function busy_pair(pause_ms, warm)
  local run = { owners = owners(4), stopfile = cmd.tmpname() }
  os.remove(run.stopfile)
  run.hosts = { host(), host() }
  run.everyone = { run.hosts[1], run.hosts[2] } -- the replaced ones too
  run.prod = producer("until", run.stopfile, pause_ms, run.owners, 5)
  assert.truthy(wait_for(function() return #entries() >= warm end, 20),
    "nothing was handled at first")
  return run
end

-- The host of the pair that handled the latest item (it holds a lease,
-- likely with an item in flight), else either.
local function latest_host(run)
  local all = entries()
  local last = all[#all]
  for j, job in ipairs(run.hosts) do
    if last and job.pid == last.pid then return j end
  end
  return math.random(2)
end

local function replace_host(run, j)
  run.hosts[j] = host()
  run.everyone[#run.everyone + 1] = run.hosts[j]
end

-- Stop the producer and wait until the hosts handled all it was told;
-- what it heard (see heard).
local function drain_pair(run)
  spit(run.stopfile, "stop\n")
  assert.equal(0, exit_code(run.prod, 40), "the producer did not stop in 40 s: "
    .. read_file(run.prod.err) .. "\nits last lines:\n" .. read_file(run.prod.out):sub(-600))
  local per_heard = heard(run.prod)
  local want = {}
  for _, owner in ipairs(run.owners) do
    assert.truthy(per_heard[owner] and per_heard[owner].max > 0, owner .. ": nothing published")
    want[owner] = per_heard[owner].max
    want[owner .. "#g"] = per_heard[owner].max
  end
  wait_handled(want, 40, "after the producer stopped, the hosts did not catch up")
  return per_heard
end

local INSTANCE = "^.+:(%d+):" .. ("%x"):rep(16) .. "$" -- HOST:PID:16hex, the pid captured

describe("many processes on one store (" .. cmd.KIND .. ")", function()
  helper.each() -- the in-process mesh of test e: closed, references checked

  before_each(function()
    local _
    _, NS = cmd.begin("procspec")
    LOG = cmd.tmpname()
    os.remove(LOG)
  end)

  after_each(function()
    cmd.finish()
    rawset(_G, "DURABLE_MP_LOG", nil)
  end)

  -- a.
  it("hands every item to the host's consumer once, in order, across a recycle mid-stream "
    .. "(one host, a separate producer)", function()
    local owner = owners(1)[1]
    local h = host()
    -- 1..40, each from its own `durable publish`; nobody opens the owner:
    -- the first append wakes the host's consumer.  Each item takes 10 ms;
    -- item 12 makes the host recycle the owner once it is done.
    for i = 1, 40 do
      local payload = { i = i, ms = 10 }
      if i == 12 then payload.recycle = true end
      assert.equal(i, publish(owner, payload))
    end
    local per = wait_handled({ [owner] = 12 }, 20)
    -- the recycle: the lease released at an item boundary, then granted
    -- again to a fresh activation
    assert.truthy(wait_for(function() return #lines_with(h, "ORPHANED") >= 1 end, 10),
      "the owner was never recycled: " .. read_file(h.err))
    local orphaned = lines_with(h, FAMILY .. "@" .. owner .. " ORPHANED: " .. owner
      .. " released the lease at checkpoint ")
    assert.equal(1, #orphaned, read_file(h.err))
    local at = tonumber(orphaned[1]:match("at checkpoint (%d+) of"))
    assert.is_true(at >= 12 and at < 60, "the recycle lands mid-stream: " .. orphaned[1])
    for i = 41, 60 do assert.equal(i, publish(owner, { i = i, ms = 10 })) end
    per = wait_handled({ [owner] = 60 }, 30)
    assert.same(range(1, 60), per[owner].seqs)
    assert.same(range(1, 60), per[owner].values)
    for _, pid in ipairs(per[owner].pids) do assert.equal(h.pid, pid) end
    assert.truthy(wait_for(function() return state(owner).Checkpoint == 60 end, 10))
    assert.is_true(#lines_with(h, FAMILY .. "@" .. owner .. ": lease granted to " .. owner) >= 2,
      "a fresh activation claimed again after the recycle: " .. read_file(h.err))
    stop(h)
    -- nothing more was handled after the check (a duplicate would show)
    assert.same(range(1, 60), by_key()[owner].seqs)
  end)

  -- b.
  it("with two hosts, hands each of 20 owners' 50 items to exactly one process, once, in order",
    function()
      local list = owners(20)
      local a, b = host(), host()
      local prod = producer("count", 50, 0, list)
      assert.equal(0, exit_code(prod, 60), read_file(prod.err))
      local per_heard, failed = heard(prod)
      assert.equal(0, #failed, "publishes failed:\n" .. table.concat(failed, "\n"))
      local want = {}
      for _, owner in ipairs(list) do
        assert.same(range(1, 50), per_heard[owner].seqs, owner .. ": the producer's sequences")
        want[owner] = 50
        want[owner .. "#g"] = 50
      end
      local per = wait_handled(want, 40)
      for _, owner in ipairs(list) do
        assert.same(range(1, 50), per[owner .. "#g"].seqs, owner .. "#g: handled "
          .. show(per[owner .. "#g"].seqs))
      end
      local served = { [a.pid] = 0, [b.pid] = 0 }
      for _, owner in ipairs(list) do
        local k = per[owner]
        assert.same(range(1, 50), k.seqs, owner .. ": handled " .. show(k.seqs) .. "\nby pids "
          .. show(k.pids) .. " (hosts " .. a.pid .. ", " .. b.pid .. ")")
        assert.same(range(1, 50), k.values, owner .. ": values")
        local pid = k.pids[1]
        assert.truthy(served[pid], owner .. ": handled by pid " .. pid .. ", not a host's")
        for _, p in ipairs(k.pids) do
          assert.equal(pid, p, owner .. ": handled by more than one process: " .. show(k.pids))
        end
        served[pid] = served[pid] + 1
        local s = state(owner)
        assert.equal(50, s.LastSequence)
        assert.equal(owner, s.Subscriber)
        local instance_pid = type(s.SubscriberInstance) == "string"
          and s.SubscriberInstance:match(INSTANCE)
        assert.equal(tostring(pid), instance_pid,
          owner .. ": SubscriberInstance names the process that handles it: "
          .. tostring(s.SubscriberInstance))
      end
      -- both hosts leave gracefully: every lease released, nothing redone
      stop(a)
      stop(b)
      for _, owner in ipairs(list) do
        local s = state(owner)
        assert.equal(json.null, s.Subscriber, owner)
        assert.equal(50, s.Checkpoint, owner)
        assert.is_true(s.SubscriberInstance == nil or s.SubscriberInstance == json.null,
          owner .. ": a released lease names no instance: " .. tostring(s.SubscriberInstance))
      end
      local all = entries()
      assert.equal(2000, #all, "handled exactly 1000 items, and in the group 1000; handled "
        .. "again:\n" .. duplicates(all))
    end)

  -- c.
  it("loses nothing and redoes only the item in flight while hosts are SIGKILLed and restarted",
    function()
      local run = busy_pair(40, 20)
      local kills = 0
      for _ = 1, 20 do
        cmd.sleep(("%.2f"):format(0.2 + math.random() * 1.3))
        local victim = latest_host(run)
        kill(run.hosts[victim])
        kills = kills + 1
        replace_host(run, victim)
      end
      assert_end_state(drain_pair(run), kills)
      -- the survivors took over from the dead: said in some host's log
      assert.is_true(#all_lines_with(run.everyone, "TOOK OVER") >= 1, "no host logged a takeover")
      for _, job in ipairs(run.hosts) do assert.is_true(running(job), "a live host died") end
    end)

  -- g.
  it("hands the streams of a host stopped with SIGTERM to the other host: no takeover, "
    .. "nothing handled twice", function()
    local run = busy_pair(40, 20)
    local stops = 0
    for _ = 1, 4 do
      cmd.sleep("0.5")
      local victim = latest_host(run)
      stop(run.hosts[victim]) -- the item in flight finishes, leases are released
      stops = stops + 1
      replace_host(run, victim)
    end
    local redelivered = assert_end_state(drain_pair(run), stops)
    for owner, n in pairs(redelivered) do
      assert.equal(0, n, owner .. ": an item was handled again after a graceful stop:\n"
        .. duplicates(entries()))
    end
    assert.same({}, all_lines_with(run.everyone, "TOOK OVER"), "a graceful stop needs no takeover")
  end)

  -- d.
  it("loses nothing and redoes only the item in flight when PostgreSQL restarts under hosts and "
    .. "a producer #postgres", function()
    if cmd.KIND ~= "postgres" then
      return pending("PostgreSQL only: a restart of the database server (SQLite has none)")
    end
    local ctl = os.getenv("DURABLE_TEST_PG_CTL")
    if not ctl or ctl == "" then
      return pending("needs DURABLE_TEST_PG_CTL (source tests/support/pg.sh; durable_pg_start)")
    end
    local run = busy_pair(30, 40)
    local pidfile = (os.getenv("DURABLE_TEST_PG_DIR") or "") .. "/data/postmaster.pid"
    local postmaster = (read_file(pidfile) or ""):match("^%d+")
    local ok = os.execute(cmd.quote(ctl) .. " restart -m fast >/dev/null 2>&1")
    assert.is_true(ok == true, "pg_ctl restart -m fast failed")
    if postmaster then
      assert.are_not.equal(postmaster, (read_file(pidfile) or ""):match("^%d+"),
        "the server restarted (a new postmaster)")
    end
    local after_restart = #entries()
    -- everyone goes on: items keep being handled after the restart
    assert.truthy(wait_for(function() return #entries() >= after_restart + 60 end, 40),
      "handling did not resume after the restart")
    assert_end_state(drain_pair(run), 1)
    for _, job in ipairs(run.hosts) do
      assert.is_true(running(job), "a host died of the restart: " .. (read_file(job.err) or ""))
      -- each noticed that its liveness lock went with its session, so its
      -- consumers claimed again before handing out another item
      assert.truthy((read_file(job.err) or ""):find("lost its liveness session", 1, true),
        "a host did not notice the loss of its liveness session")
    end
  end)

  -- e.
  it("lets a live holder whose handler takes 10 s keep its lease against another process's claim",
    function()
      local owner = owners(1)[1]
      local a = host()
      assert.equal(1, publish(owner, { i = 1 }))
      assert.equal(2, publish(owner, { i = 2, ms = 10000 }))
      local per = wait_handled({ [owner] = 2 }, 15)
      assert.same({ a.pid, a.pid }, per[owner].pids)
      local held = state(owner)
      assert.equal(owner, held.Subscriber)
      assert.equal(1, held.Checkpoint, "item 2 is in flight")
      assert.equal(tostring(a.pid), type(held.SubscriberInstance) == "string"
        and held.SubscriberInstance:match(INSTANCE),
        "SubscriberInstance names host A: " .. tostring(held.SubscriberInstance))

      -- this process becomes a second consumer of the same owner: a mesh
      -- read activates it, and it claims at once (and again every second)
      rawset(_G, "DURABLE_MP_LOG", LOG)
      local mesh = helper.open {
        store = cmd.store, plugins = { FIXTURE },
        streams = { holder_probe_ms = 300, reclaim_ms = 1000, backoff_min_ms = 100,
                    backoff_max_ms = 1000 },
      }
      local started = helper.now(mesh)
      assert.is_not_nil(helper.ok(mesh:read(owner), 10000))
      local refused, checkpoint = false, nil
      repeat
        mesh:run_until(function() return false end, 250)
        if not refused then
          refused = #helper.log_lines("is held by") > 0
        end
        local s = helper.ok(mesh:get_node(stream_path(owner)), 10000).content
        assert.equal(held.Subscriber, s.Subscriber, "the Subscriber changed")
        assert.equal(held.SubscriberInstance, s.SubscriberInstance, "the SubscriberInstance changed")
        assert.equal(held.LeaseEpoch, s.LeaseEpoch, "the LeaseEpoch changed")
        checkpoint = s.Checkpoint
      until checkpoint >= 2 or helper.now(mesh) - started > 20000
      assert.equal(2, checkpoint, "host A never completed item 2")
      assert.is_true(refused, "the claim from this process was not refused: "
        .. table.concat(helper.logs, "\n"))
      -- refused about every second, but said once per holder: a waiting
      -- host must not flood its log
      local said = 0
      for _, line in ipairs(helper.log_lines("is held by")) do
        if line:match("^info ") and not line:find(" group g ", 1, true) then said = said + 1 end
      end
      assert.equal(1, said, "the refusal was said more than once at info: "
        .. table.concat(helper.log_lines("is held by"), "\n"))
      assert.is_true(helper.now(mesh) - started >= 7000,
        "the lease was watched for most of the 10 s handler")
      assert.same({}, helper.log_lines("TOOK OVER"))

      -- A goes on with the next item; this process handled nothing
      assert.equal(3, publish(owner, { i = 3 }))
      -- (the loop runs meanwhile: this process's consumer stays up)
      local deadline = helper.now(mesh) + 15000
      repeat mesh:run_until(function() return false end, 100)
      until highest(by_key()[owner].seqs) >= 3 or helper.now(mesh) > deadline
      per = wait_handled({ [owner] = 3 }, 5)
      assert.same({ 1, 2, 3 }, per[owner].seqs)
      assert.same({ a.pid, a.pid, a.pid }, per[owner].pids,
        "this process (pid " .. own_pid() .. ") handled an item")
      local s = helper.ok(mesh:get_node(stream_path(owner)), 10000).content
      assert.equal(held.LeaseEpoch, s.LeaseEpoch)
      assert.equal(held.SubscriberInstance, s.SubscriberInstance)
    end)

  -- h.
  it("appends from three processes to one stream at once: every publish lands, once, "
    .. "with no gap", function()
    local owner = owners(1)[1]
    local stopfile = cmd.tmpname()
    os.remove(stopfile)
    -- two producers publishing as fast as they can, and short-lived ones
    local jobs = {}
    for j = 1, 3 do jobs[j] = producer("until", stopfile, 0, { owner }) end
    assert.truthy(wait_for(function()
      for _, job in ipairs(jobs) do
        if not (read_file(job.out) or ""):find("ok ") then return false end
      end
      return true
    end, 10), "the producers published nothing")
    local own = {}
    for i = 1, 40 do own[#own + 1] = publish(owner, { i = -i }) end
    spit(stopfile, "")
    for _, job in ipairs(jobs) do assert.equal(0, exit_code(job, 30)) end
    local told = #own
    for _, job in ipairs(jobs) do
      local per, failed = heard(job)
      assert.same({}, failed, "a producer's publish failed")
      told = told + #per[owner].seqs
    end
    -- a gap would make the read below wait for the missing item: the tail
    -- first (one sequence per publish told, and no more)
    assert.equal(told, state(owner).LastSequence, "sequences taken against publishes told")
    local code, out, err = run { "read", FAMILY, owner }
    assert.equal(0, code, err)
    local n = 0
    for line in out:gmatch("[^\n]+") do
      n = n + 1
      assert.equal(n, json.decode(line).sequence, "a gap in the stream")
    end
    assert.equal(told, n, "items against publishes told their sequence")
  end)

  -- f.
  it("runs examples/multi-process/run.sh on the test PostgreSQL #postgres", function()
    if cmd.KIND ~= "postgres" then
      return pending("PostgreSQL only: the example runs two hosts on one PostgreSQL")
    end
    local out = cmd.tmpname()
    local _, how, code = os.execute(("DURABLE_STORE=%s bash examples/multi-process/run.sh >%s 2>&1")
      :format(cmd.quote(cmd.PG), out))
    if how == "signal" then code = 128 + code end
    assert.equal(0, code, "examples/multi-process/run.sh:\n" .. (read_file(out) or ""))
  end)
end)
