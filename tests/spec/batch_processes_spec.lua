-- batch_processes_spec.lua: batch handlers in real `durable run` hosts, as
-- a plugin author sees them: exactly once under SIGKILLs, and nothing
-- written by a holder that lost its lease mid-batch.
--
-- The hosts run tests/spec/fixtures/batch_processes.lua (NodeType
-- BatchProbe: batches of up to 32 items of the family Probe, whose effect
-- -- a count, a sum, the last sequence and the batches that did not start
-- right after it -- goes into the owner's own node through `tx`); the
-- producer is processes_spec's (tests/spec/fixtures/mp_producer.lua: "ok
-- OWNER SEQ I" per sequence it was told).  The owner's node is the whole
-- truth: its effects commit with each batch's acknowledgement, so after
-- any number of kills it must count every item once, in order.
--
-- Store-parametrised like processes_spec.lua (DURABLE_TEST_STORE).  Waits
-- poll with deadlines; no fixed sleep is an assertion.
local json = require "dkjson"
local cmd = require "command"

local read_file, spit, wait_for = cmd.read_file, cmd.spit, cmd.wait_for
local run, spawn, exit_code, running = cmd.run, cmd.spawn, cmd.exit_code, cmd.running

local FIXTURE = "tests/spec/fixtures/batch_processes.lua"
local PRODUCER = "tests/spec/fixtures/mp_producer.lua"

local function host(env) return cmd.host(FIXTURE, env) end
local kill = cmd.kill

local function owners(n)
  local list = {}
  for i = 1, n do
    list[i] = ("%s/o%d"):format(cmd.ns, i)
    local code, _, err = run { "put", list[i], "BatchProbe", "{}" }
    assert.equal(0, code, err)
  end
  return list
end

-- The owner's node content (its effect), or {}.
local function effect(owner)
  local code, out = run { "get", "@" .. owner }
  if code ~= 0 then return {} end
  return assert(json.decode(out, 1, json.null), out).content or {}
end

-- The host of `hosts` that holds the most of the owners' streams (a kill
-- of it lands mid-batch more often), else either.
local function holder(hosts, list)
  local _, out = run { "streams", "--json" }
  local held = {}
  for line in (out or ""):gmatch("[^\n]+") do
    local s = json.decode(line, 1, json.null)
    local pid = s and type(s.subscriber_instance) == "string"
      and tonumber(s.subscriber_instance:match(":(%d+):"))
    if pid then held[pid] = (held[pid] or 0) + 1 end
  end
  local best, most = math.random(#hosts), 0
  for j, job in ipairs(hosts) do
    if (held[job.pid] or 0) > most then best, most = j, held[job.pid] end
  end
  return best
end

-- What the producer was told, per owner: the highest sequence, the values
-- by sequence, and whether it had to retry (then values may repeat).
local function heard(job)
  local per = {}
  for line in (read_file(job.out) or ""):gmatch("[^\n]+") do
    local owner, seq, i = line:match("^ok (%S+) (%d+) (%d+)$")
    local failed = line:match("^failed (%S+) ")
    local key = owner or failed
    if key then
      per[key] = per[key] or { max = 0, value = {} }
      if owner then
        seq = tonumber(seq)
        per[key].value[seq] = tonumber(i)
        if seq > per[key].max then per[key].max = seq end
      else
        per[key].retried = true
      end
    end
  end
  return per
end

describe("batch handlers in processes (" .. cmd.KIND .. ")", function()
  before_each(function() cmd.begin("batchproc") end)
  after_each(cmd.finish)

  it("applies every item's effect once, in order, while hosts are SIGKILLed and restarted",
    function()
      local list = owners(4)
      local stopfile = cmd.tmpname()
      os.remove(stopfile)
      local hosts = { host(), host() }
      local prod = spawn { "lua", PRODUCER, "until", stopfile, "2", table.unpack(list) }
      assert.truthy(wait_for(function() return (effect(list[1]).count or 0) >= 20 end, 30),
        "nothing was applied at first")
      local kills = 0
      for _ = 1, 16 do
        cmd.sleep(("%.2f"):format(0.2 + math.random() * 1.0))
        local victim = holder(hosts, list)
        kill(hosts[victim])
        kills = kills + 1
        hosts[victim] = host()
      end
      spit(stopfile, "stop\n")
      assert.equal(0, exit_code(prod, 40), "the producer did not stop: " .. (read_file(prod.err) or ""))
      local per = heard(prod)
      for _, owner in ipairs(list) do
        local h = assert(per[owner], owner .. ": nothing published")
        local e
        assert.truthy(wait_for(function()
          e = effect(owner)
          return (e.last or 0) >= h.max
        end, 60), owner .. ": applied up to " .. tostring(e and e.last) .. " of " .. h.max)
        assert.equal(h.max, e.last, owner .. ": the last sequence applied")
        assert.equal(e.last, e.count, owner .. ": items applied (a repeat or a loss)")
        assert.is_nil(e.gaps, owner .. ": batches that did not start after the last one")
        if not h.retried then
          local sum = 0
          for seq = 1, h.max do sum = sum + assert(h.value[seq], owner .. " " .. seq) end
          assert.equal(sum, e.sum, owner .. ": the sum of the payloads applied")
        end
      end
      for _, job in ipairs(hosts) do assert.is_true(running(job), "a live host died") end
    end)

  it("writes nothing of a batch whose lease was taken mid-batch by another process's seek",
    function()
      local owner = owners(1)[1]
      local hold = cmd.tmpname()
      os.remove(hold)
      cmd.track(hold .. ".started")
      local h = host { BATCH_HOLD_FILE = hold, BATCH_WAIT_MS = "0" }
      for i = 1, 10 do
        local payload = { i = i, hold = (i == 10) or nil }
        local code, _, err = run { "publish", "Probe", owner, json.encode(payload) }
        assert.equal(0, code, err)
      end
      -- the batch holding item 10 is in flight, held
      local started
      assert.truthy(wait_for(function()
        started = read_file(hold .. ".started")
        return started
      end, 20), "the batch with the held item never started")
      local first = tonumber(started:match("^held (%d+) "))
      local before = effect(owner)
      assert.equal(first - 1, before.last or 0)
      -- another process moves the checkpoint where it is: a new epoch, the
      -- lease let go behind the holder
      local code, _, err = run { "seek", "Probe", owner, "--to", tostring(first - 1) }
      assert.equal(0, code, err)
      spit(hold, "go\n")
      local e
      assert.truthy(wait_for(function()
        e = effect(owner)
        return (e.last or 0) >= 10
      end, 30), "the items were not applied after the seek")
      -- the held batch's commit was refused; its items were applied once,
      -- by the batch handed over again under the new lease
      assert.is_nil(e.waited, "the batch that waited wrote its effect")
      assert.equal(10, e.count)
      assert.equal(55, e.sum)
      assert.is_nil(e.gaps)
      assert.is_true(running(h))
    end)
end)
