-- neighbours_spec.lua: short commands are clean neighbours of a busy
-- PostgreSQL: they leave no errors in the server's log.  PostgreSQL only:
-- it reads the private server's
-- log ($DURABLE_TEST_PG_DIR/postgres.log, tests/support/pg.sh).
--
-- A command's LISTEN connection hears every commit's NOTIFY; closed while
-- NOTIFYs still come, it leaves "could not send data to client: Broken
-- pipe" / "connection to client lost" in the server's log.  With a producer
-- committing all along, 20 short commands must leave none.
local cmd = require "command"

local read_file, spawn, run = cmd.read_file, cmd.spawn, cmd.run

local PRODUCER = "tests/spec/fixtures/mp_producer.lua"

local function count_lost(log)
  local n = 0
  for line in (read_file(log) or ""):gmatch("[^\n]+") do
    if line:find("could not send data to client", 1, true)
      or line:find("connection to client lost", 1, true) then
      n = n + 1
    end
  end
  return n
end

describe("short commands against a busy PostgreSQL #postgres", function()
  before_each(function() cmd.begin("Neighbours") end)
  after_each(function() cmd.finish() end)

  it("close every connection cleanly", function()
    local dir = os.getenv("DURABLE_TEST_PG_DIR")
    if cmd.KIND ~= "postgres" or not dir then
      return pending("the private PostgreSQL of tests/support/pg.sh only: it reads its log")
    end
    local log = dir .. "/postgres.log"
    -- the producer's stream, and another for the command's own publishes
    local owner, other = cmd.ns .. "/o1", cmd.ns .. "/o2"
    local code, _, err = run { "put", owner, "MpProbe", "{}" }
    assert.equal(0, code, err)
    local stop = cmd.tmpname()
    os.remove(stop)
    local prod = spawn { "lua", PRODUCER, "until", stop, "0", owner }
    assert.truthy(cmd.wait_for(function() return (read_file(prod.out) or ""):find("ok ") end, 10),
      "the producer published nothing")
    local before = count_lost(log)
    for _ = 1, 5 do
      for _, args in ipairs { { "streams" }, { "get", "@" .. owner },
                              { "read", "Probe", owner, "--after", "0" },
                              { "publish", "Probe", other, '{"i":0}', "--no-owner" } } do
        code, _, err = run(args)
        assert.equal(0, code, err)
      end
    end
    cmd.spit(stop, "")
    assert.equal(0, cmd.exit_code(prod, 20))
    assert.equal(before, count_lost(log), "the server logged connections lost mid-send")
  end)
end)
