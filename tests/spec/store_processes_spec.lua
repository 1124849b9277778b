-- store_processes_spec.lua: the store with other processes writing at the
-- same time (bad input gets a clear error, and nothing is lost):
-- two processes writing one SQLite file at once both succeed and lose
-- nothing; a PostgreSQL connection killed while writes are in flight loses
-- no write that was reported done (each is reported failed, or present).
local helper = require "helper"
local durable = require "durable"

local q = helper.quote
local BIN = os.getenv("DURABLE_BIN") or helper.BUILD .. "/durable"
local WRITER = helper.fixture "writer.lua"

-- Start a writer process in the background; returns its output file and a
-- function that waits for it and returns its exit code.
local function writer(store, ns, n, in_flight)
  local out, done = helper.tmpname(".out"), helper.tmpname(".done")
  os.execute(("(%s --store %s lua %s %s %d %d >%s 2>&1; echo $? >%s) &"):format(
    q(BIN), q(store), q(WRITER), q(ns), n, in_flight or 32, q(out), q(done)))
  local function finished()
    local f = io.open(done, "r")
    if not f then return nil end
    local code = tonumber(f:read("l"))
    f:close()
    return code
  end
  return out, function()
    for _ = 1, 600 do
      local code = finished()
      if code then return code end
      os.execute("sleep 0.1")
    end
    error("the writer did not finish in 60 s")
  end, finished
end

local function lines(path)
  local ok, failed, other = {}, {}, {}
  for line in io.lines(path) do
    local p = line:match("^ok (%S+)")
    if p then ok[#ok + 1] = p
    elseif line:match("^failed ") then failed[#failed + 1] = line
    else other[#other + 1] = line end
  end
  return ok, failed, other
end

local function count(mesh, ns)
  local nodes = helper.ok(mesh:query("namespace:" .. ns))
  local present = {}
  for _, node in ipairs(nodes) do present[node.path] = true end
  return #nodes, present
end

describe("the store under other processes", function()
  helper.each()

  it("lets two processes write one SQLite file at once: both succeed, nothing is lost #sqlite", function()
    if helper.KIND ~= "sqlite" then return pending("a SQLite file only") end
    local file = helper.tmpname(".db")
    local store = "sqlite:" .. file
    local ns = helper.ns()
    local out_a, wait_a = writer(store, ns .. "/a", 300)
    local out_b, wait_b = writer(store, ns .. "/b", 300)
    assert.equal(0, wait_a())
    assert.equal(0, wait_b())
    local ok_a, failed_a = lines(out_a)
    local ok_b, failed_b = lines(out_b)
    assert.same({}, failed_a)
    assert.same({}, failed_b)
    assert.equal(300, #ok_a)
    assert.equal(300, #ok_b)
    local mesh = helper.open{ store = store }
    assert.equal(300, (count(mesh, ns .. "/a")))
    assert.equal(300, (count(mesh, ns .. "/b")))
  end)

  it("loses no reported write when its PostgreSQL connection is killed mid-run #postgres", function()
    if helper.KIND ~= "postgres" then return pending("PostgreSQL only") end
    local ns = helper.ns()
    local n = 3000
    -- few writes in flight: a long run, so that the kills land inside it
    local out, wait, finished = writer(helper.PG, ns, n, 4)
    -- kill every durable connection but our own, again and again, while the
    -- writer runs (its writer, reader and LISTEN connections)
    local kill = ("psql %s -qtAc %s 2>/dev/null"):format(q(helper.PG), q(
      "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity " ..
      "WHERE application_name = 'durable' AND pid <> pg_backend_pid()"))
    local killed = 0
    while not finished() do
      os.execute("sleep 0.05")
      local p = io.popen(kill)
      killed = killed + (tonumber(p:read("a"):match("%d+")) or 0)
      p:close()
    end
    local code = wait()
    local ok, failed, other = lines(out)
    assert.equal(0, code, table.concat(other, "\n"))
    assert.is_true(killed > 0, "no connection was killed while the writer ran")
    assert.equal(n, #ok + #failed)
    assert.is_true(#ok > 0)
    local mesh = helper.open{}
    local _, present = count(mesh, ns)
    for _, path in ipairs(ok) do
      assert.is_true(present[path] == true, path .. " was reported written but is missing")
    end
    -- a failed write names the store's reason; it may or may not be present
    for _, line in ipairs(failed) do assert.matches("^failed %S+ .+", line) end
  end)
end)
