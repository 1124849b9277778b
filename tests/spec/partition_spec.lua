-- partition_spec.lua: hosts on machines of their own, cut off from
-- PostgreSQL: such a host stops before another takes its streams over.
-- PostgreSQL only, root only.
--
-- Each host runs in a network namespace (tests/support/netns.sh) whose one
-- veth link reaches a private PostgreSQL over TCP: a server this spec
-- starts itself (tests/support/pg.sh with DURABLE_PG_LISTEN), listening on
-- the addresses of those links alone.  A cut drops every packet both ways
-- (blackhole routes): no reset, no error, only silence, as a partition.
-- Host A (namespace 201) starts first and holds every lease; host B (202)
-- waits.  A producer on this machine (the server's unix socket) publishes
-- to four owners all along.  Every item a handler gets is logged before it
-- completes (tests/spec/fixtures/processes.lua: "KEY SEQ VALUE PID"), and
-- the checks read that log:
--
--   a. a cut longer than the detection bound (10 s): B takes A's streams
--      over within the bound plus the liveness poll plus the takeover's
--      hold; A, cut off, hands nothing more over; after the heal A finds
--      the leases gone; per stream the log goes up by one, except the one
--      item A had in flight, handled again once;
--   b. a cut shorter than the bound: nobody takes over, nothing is handled
--      twice, the streams go on after the heal;
--   c. A's liveness connection killed on the server again and again
--      (pg_terminate_backend): nothing lost, nothing acknowledged handed
--      over again;
--   d. A on a slow link (50 ms round trips: tests/support/pg_link.lua,
--      since this kernel has no netem qdisc): its streams keep moving,
--      nothing is lost or handled twice, and neither host reports a
--      failure or takes a stream over.
local cmd = require "command"

local read_file, wait_for, spawn, running = cmd.read_file, cmd.wait_for, cmd.spawn, cmd.running

local FIXTURE = "tests/spec/fixtures/processes.lua"
local PRODUCER = "tests/spec/fixtures/mp_producer.lua"
local NET_A, NET_B = 201, 202
local BOUND_S = 10 -- the detection bound: postgres_conn.c's LIVENESS_BOUND_MS
local POLL_S = 1   -- a host's liveness poll (liveness_ms)
local HOLD_S = 2   -- a takeover's hold: postgres.h's DURABLE__PG_FENCE_MS
local SLOW_PORT, SLOW_MS = 15432, 25 -- the slow link: its port, its delay each way

local function sh(line)
  local ok = os.execute(line .. " >/dev/null 2>&1")
  return ok == true
end

local function netns(fn, n)
  return sh("bash tests/support/netns.sh " .. fn .. " " .. n)
end

-- Why this machine cannot run the test, or nil.
local function cannot()
  if cmd.KIND ~= "postgres" then return "PostgreSQL only: hosts reach the server over TCP" end
  local p = io.popen("id -u")
  local uid = p:read("l")
  p:close()
  if uid ~= "0" then return "needs root to make network namespaces" end
  if not sh("ip netns list") then return "no `ip netns` (iproute2) here" end
  return nil
end

local WHY_NOT = cannot()
local PG_DIR, LOCAL, URL_A, URL_B

local function start_server()
  netns("durable_netns_down", NET_A)
  netns("durable_netns_down", NET_B)
  assert(netns("durable_netns_up", NET_A) and netns("durable_netns_up", NET_B),
    "could not make the network namespaces")
  local p = io.popen("bash -c '. tests/support/pg.sh; unset DURABLE_TEST_PG_DIR;"
    .. " DURABLE_PG_LISTEN=10.77." .. NET_A .. ".1,10.77." .. NET_B .. ".1"
    .. " DURABLE_PG_CLIENTS=10.77.0.0/16 durable_pg_start >&2 && echo $DURABLE_TEST_PG_DIR'")
  PG_DIR = p:read("l")
  p:close()
  assert(PG_DIR and PG_DIR ~= "", "the test's own PostgreSQL did not start")
  LOCAL = "postgresql:///durable?host=" .. PG_DIR .. "&user=durable"
  URL_A = ("postgresql://durable@10.77.%d.1/durable"):format(NET_A)
  URL_B = ("postgresql://durable@10.77.%d.1/durable"):format(NET_B)
end

local function stop_server()
  if PG_DIR then
    sh("bash -c '. tests/support/pg.sh; DURABLE_TEST_PG_DIR=" .. PG_DIR .. " durable_pg_stop'")
  end
  netns("durable_netns_down", NET_A)
  netns("durable_netns_down", NET_B)
end

-- ---- one run: two hosts and a producer ------------------------------------

local LOG, NS

local function host(net, url)
  local job = spawn { "run", FIXTURE, store = url, netns = "durable-" .. net,
                      env = { DURABLE_MP_LOG = LOG } }
  assert.truthy(wait_for(function()
    return (read_file(job.err) or ""):find("durable run: hosting", 1, true) or not running(job)
  end, 15) and running(job), "a host did not start: " .. (read_file(job.err) or ""))
  job.pid = tonumber(job.pid)
  return job
end

local function entries()
  local list = {}
  for line in (read_file(LOG) or ""):gmatch("[^\n]+") do
    local key, seq, pid = line:match("^(%S+) (%d+) %S+ (%d+)$")
    assert(key, "a malformed log line: " .. line)
    list[#list + 1] = { key = key, seq = tonumber(seq), pid = tonumber(pid), at = #list + 1 }
  end
  return list
end

local function by_key(list)
  local per = {}
  for _, e in ipairs(list) do
    per[e.key] = per[e.key] or {}
    table.insert(per[e.key], e)
  end
  return per
end

-- Host A holding the leases of four owners, host B waiting, a producer
-- publishing (`pause_ms`, default 20, apart per owner, each item taking
-- 5 ms), warm.  Host A reaches the server at `url_a` (default URL_A).
local function start_run(url_a, pause_ms)
  LOG = cmd.tmpname()
  NS = ("Part/%s%d"):format(cmd.RUN, math.random(1e6))
  local run = { owners = {}, stopfile = cmd.tmpname() }
  os.remove(run.stopfile)
  for i = 1, 4 do
    run.owners[i] = ("%s/o%d"):format(NS, i)
    local code, _, err = cmd.run { "put", run.owners[i], "MpProbe", "{}", store = LOCAL }
    assert.equal(0, code, err)
  end
  run.a = host(NET_A, url_a or URL_A)
  local args = { "lua", PRODUCER, "until", run.stopfile, tostring(pause_ms or 20), store = LOCAL,
                 env = { MP_ITEM_MS = "5" } }
  for _, o in ipairs(run.owners) do args[#args + 1] = o end
  run.prod = spawn(args)
  assert.truthy(wait_for(function()
    local per = by_key(entries())
    for _, o in ipairs(run.owners) do if not per[o] then return false end end
    return true
  end, 20), "host A did not take every stream")
  run.b = host(NET_B, URL_B)
  return run
end

-- Stop the producer, wait until every sequence it was told is handled;
-- per owner the handled entries in log order, and what it heard.
local function finish_run(run, drain_s)
  cmd.spit(run.stopfile, "")
  assert.equal(0, cmd.exit_code(run.prod, 30), "the producer: " .. (read_file(run.prod.err) or ""))
  local heard = {}
  for line in (read_file(run.prod.out) or ""):gmatch("[^\n]+") do
    local owner, seq = line:match("^ok (%S+) (%d+) %d+$")
    if owner then heard[owner] = math.max(heard[owner] or 0, tonumber(seq)) end
  end
  local per
  assert.truthy(wait_for(function()
    per = by_key(entries())
    for owner, top in pairs(heard) do
      local l = per[owner] or {}
      if #l == 0 or l[#l].seq < top then return false end
    end
    return true
  end, drain_s or 40), "not every published item was handled")
  return per, heard
end

-- Per owner: handled sequences in log order start at 1 and go up by one,
-- except a repeat of the last one (the item in flight at a loss), at most
-- `events` times.  A sequence handled again after a higher one -- an
-- acknowledged item handed over again -- fails.
local function assert_order(per, heard, events)
  for owner, top in pairs(heard) do
    local l = per[owner]
    assert.equal(1, l[1].seq, owner .. ": the first handled item")
    local again = 0
    for j = 2, #l do
      if l[j].seq == l[j - 1].seq then
        again = again + 1
      else
        assert.equal(l[j - 1].seq + 1, l[j].seq, ("%s: sequence %d (pid %d) handled after %d "
          .. "(pid %d)"):format(owner, l[j].seq, l[j].pid, l[j - 1].seq, l[j - 1].pid))
      end
    end
    assert.is_true(again <= events, ("%s: %d items handled twice after %d event(s)")
      :format(owner, again, events))
    assert.is_true(l[#l].seq >= top, owner .. ": published but never handled")
  end
end

local function lines_with(job, text)
  local n = 0
  for line in (read_file(job.err) or ""):gmatch("[^\n]+") do
    if line:find(text, 1, true) then n = n + 1 end
  end
  return n
end

describe("hosts cut off from PostgreSQL #postgres", function()
  lazy_setup(function()
    if not WHY_NOT then start_server() end
  end)
  lazy_teardown(function()
    if not WHY_NOT then stop_server() end
  end)
  after_each(function() cmd.finish() end)

  it("a. takes a cut-off host's streams over within the bound, and the cut-off host hands "
    .. "nothing more over", function()
    if WHY_NOT then return pending(WHY_NOT) end
    local run = start_run()
    local cut_at = os.time()
    local cut_entry = #entries()
    assert.is_true(netns("durable_netns_cut", NET_A))
    -- B takes over and goes on
    local taken = wait_for(function()
      for _, e in ipairs(entries()) do
        if e.at > cut_entry and e.pid == run.b.pid then return os.time() end
      end
    end, BOUND_S + POLL_S + HOLD_S + 8)
    assert.truthy(taken, "host B never took over: " .. (read_file(run.b.err) or ""))
    assert.is_true(taken - cut_at <= BOUND_S + POLL_S + HOLD_S + 3,
      ("the takeover took %d s"):format(taken - cut_at))
    assert.is_true(lines_with(run.b, "TOOK OVER") >= 1)
    cmd.sleep(3) -- the cut goes on past B's start
    assert.is_true(netns("durable_netns_heal", NET_A))
    -- A learns that the leases went, and takes none back while B lives
    assert.truthy(wait_for(function() return lines_with(run.a, "is held by") > 0 end, 20),
      "host A never saw its leases taken: " .. (read_file(run.a.err) or ""))
    local per, heard = finish_run(run)
    assert_order(per, heard, 1)
    -- nothing by A after B's first item of the same stream
    for owner, l in pairs(per) do
      local b_started
      for _, e in ipairs(l) do
        if e.pid == run.b.pid then b_started = true
        elseif b_started then
          error(("%s: host A handled item %d after host B had begun"):format(owner, e.seq))
        end
      end
    end
  end)

  it("b. leaves the leases where they are through a cut shorter than the bound", function()
    if WHY_NOT then return pending(WHY_NOT) end
    local run = start_run()
    assert.is_true(netns("durable_netns_cut", NET_A))
    cmd.sleep(3)
    assert.is_true(netns("durable_netns_heal", NET_A))
    local n = #entries()
    assert.truthy(wait_for(function() return #entries() > n + 20 end, 20),
      "the streams did not go on after the heal")
    local per, heard = finish_run(run)
    assert_order(per, heard, 0)
    assert.equal(0, lines_with(run.b, "TOOK OVER"))
    for _, l in pairs(per) do
      for _, e in ipairs(l) do assert.equal(run.a.pid, e.pid, "host B handled an item") end
    end
  end)

  it("c. hands nothing acknowledged over again when the liveness connection is killed "
    .. "again and again", function()
    if WHY_NOT then return pending(WHY_NOT) end
    local run = start_run()
    local kills = 4
    for _ = 1, kills do
      local ok = sh(("psql -Atq %s -c \"SELECT pg_terminate_backend(l.pid) FROM pg_locks l "
        .. "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND "
        .. "l.granted AND a.client_addr = '10.77.%d.2'\""):format(cmd.quote(LOCAL), NET_A))
      assert.is_true(ok, "psql could not end the liveness session")
      cmd.sleep(2)
    end
    local per, heard = finish_run(run)
    assert_order(per, heard, kills)
    assert.is_true(lines_with(run.a, "lost its liveness session") >= 1,
      "host A never noticed the loss of its liveness session")
  end)

  it("d. keeps a host on a slow link consuming, with no failures and no takeovers", function()
    if WHY_NOT then return pending(WHY_NOT) end
    local proxy = spawn { "tests/support/pg_link.lua", ("10.77.%d.1:%d"):format(NET_A, SLOW_PORT),
                          PG_DIR .. "/.s.PGSQL.5432", "delay=" .. SLOW_MS, program = "lua5.4" }
    assert.truthy(wait_for(function() return (read_file(proxy.out) or ""):find("listening") end, 10),
      "the slow link did not start: " .. (read_file(proxy.err) or ""))
    -- 4 owners, one item each 100 ms: ~37 a second, more than host A can
    -- acknowledge at 2 round trips per group commit (~15 a second); it
    -- must keep moving all the same (a reader spent on re-reading
    -- namespaces once let it fall to 1 a second)
    local run = start_run(("postgresql://durable@10.77.%d.1:%d/durable"):format(NET_A, SLOW_PORT),
      100)
    local n = #entries()
    cmd.sleep(10)
    assert.is_true(#entries() >= n + 60, ("host A handled %d items in 10 s on the slow link")
      :format(#entries() - n))
    local per, heard = finish_run(run, 90)
    assert_order(per, heard, 0)
    for _, job in ipairs { run.a, run.b } do
      assert.equal(0, lines_with(job, "TOOK OVER"))
      assert.equal(0, lines_with(job, "NOT acknowledged"))
      assert.equal(0, lines_with(job, "no answer within"))
      assert.equal(0, lines_with(job, "ERROR"))
    end
    for _, l in pairs(per) do
      for _, e in ipairs(l) do assert.equal(run.a.pid, e.pid, "host B handled an item") end
    end
  end)
end)
