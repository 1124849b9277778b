--- command.lua: driving the built `durable` command from a spec, as a user
--- would: one store per test (a temp SQLite file, or the shared PostgreSQL
--- at DURABLE_TEST_PG), foreground runs and background jobs, files removed
--- and jobs killed after the test.
---
---   local cmd = require "command"
---   before_each(function() cmd.begin("clispec") end)   -- cmd.store, cmd.ns
---   after_each(cmd.finish)
---   local code, out, err = cmd.run{ "get", "@" .. cmd.ns .. "/doc" }
---   local job = cmd.spawn{ "read", "Log", key, "--follow" }
local M = {}

M.BIN = os.getenv("DURABLE_BIN")
  or (os.getenv("DURABLE_BUILD_DIR") or "./build") .. "/durable"
M.KIND = os.getenv("DURABLE_TEST_STORE") or "sqlite"
M.PG = os.getenv("DURABLE_TEST_PG")
M.RUN = string.format("r%d%05d", os.time(), math.random(0, 99999))

local cleanup = {} -- files to remove after this test
local jobs = {}    -- background jobs of this test
local counter = 0

function M.quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

--- The whole file, or nil when it cannot be read.
function M.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

function M.spit(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

--- Remove `path` after the test.
function M.track(path)
  cleanup[#cleanup + 1] = path
  return path
end

--- A temp file name, removed after the test.
function M.tmpname()
  return M.track(os.tmpname())
end

function M.sleep(seconds)
  os.execute("sleep " .. seconds)
end

--- Poll `check` every 50 ms until it returns a true value, for `seconds`.
function M.wait_for(check, seconds)
  local deadline = os.time() + (seconds or 10)
  repeat
    local value = check()
    if value then return value end
    M.sleep(0.05)
  until os.time() > deadline
  return nil
end

--- A fresh store and namespace for one test: sets M.store and M.ns.
function M.begin(label)
  counter = counter + 1
  M.ns = ("%s/%sn%d"):format(label, M.RUN, counter)
  if M.KIND == "postgres" then
    assert(M.PG and M.PG ~= "", "DURABLE_TEST_STORE=postgres needs DURABLE_TEST_PG")
    M.store = M.PG
  else
    local db = M.tmpname()
    os.remove(db)
    for _, suffix in ipairs { "-wal", "-shm", "-journal", "-live" } do
      cleanup[#cleanup + 1] = db .. suffix
    end
    M.store = "sqlite:" .. db
  end
  return M.store, M.ns
end

--- The command line of run{…} and spawn{…}, without redirections.
function M.command_line(opts)
  local parts = {}
  -- netns = NAME: run it in that network namespace (the partition spec)
  if opts.netns then parts[1] = "ip netns exec " .. M.quote(opts.netns) .. " env" end
  for k, v in pairs(opts.env or {}) do parts[#parts + 1] = k .. "=" .. M.quote(v) end
  -- program = PATH: run that instead of durable, with no --store
  parts[#parts + 1] = M.quote(opts.program or M.BIN)
  if opts.store ~= false and not opts.program then
    parts[#parts + 1] = "--store " .. M.quote(opts.store or M.store)
  end
  for _, a in ipairs(opts) do parts[#parts + 1] = M.quote(a) end
  return table.concat(parts, " ")
end

--- run{ args…, stdin = TEXT, store = URL | false, env = { K = V } }
--- -> exit code, stdout, stderr (a signal is 128 + n, as in the shell)
function M.run(opts)
  local out, err, inp = M.tmpname(), M.tmpname(), "/dev/null"
  if opts.stdin then
    inp = M.tmpname()
    M.spit(inp, opts.stdin)
  end
  local _, how, code = os.execute(M.command_line(opts) .. " <" .. inp .. " >" .. out
                                  .. " 2>" .. err)
  if how == "signal" then code = 128 + code end
  return code, M.read_file(out) or "", M.read_file(err) or ""
end

--- spawn{ args…, store =, env =, stdin_file = PATH } starts the command in
--- the background (its standard input the file, else /dev/null):
--- { pid =, out =, err =, rc = } (rc is written when it exits).
--- DURABLE_LOG is cleared unless given, so log lines are the defaults'.
function M.spawn(opts)
  local job = { out = M.tmpname(), err = M.tmpname(), rc = M.tmpname() }
  local pidfile = M.tmpname()
  os.remove(job.rc)
  local cmd = M.command_line(opts)
  if not (opts.env and opts.env.DURABLE_LOG) then cmd = "env -u DURABLE_LOG " .. cmd end
  os.execute("(" .. cmd .. " <" .. M.quote(opts.stdin_file or "/dev/null") .. " >" .. job.out
             .. " 2>" .. job.err
             .. " & echo $! >" .. pidfile .. "; wait $!; echo $? >" .. job.rc .. ".tmp; mv "
             .. job.rc .. ".tmp " .. job.rc .. ") >/dev/null 2>&1 &")
  job.pid = assert(M.wait_for(function()
    return (M.read_file(pidfile) or ""):match("%d+")
  end, 5))
  jobs[#jobs + 1] = job
  return job
end

--- The job's exit status, waiting up to `seconds`; nil if still running.
function M.exit_code(job, seconds)
  local rc = M.wait_for(function() return (M.read_file(job.rc) or ""):match("%d+") end, seconds)
  return rc and tonumber(rc)
end

function M.running(job)
  return M.read_file(job.rc) == nil
end

--- signal(job, NAME): kill -NAME the job's process, which must be there.
function M.signal(job, name)
  assert(os.execute("kill -" .. name .. " " .. job.pid .. " 2>/dev/null") == true,
    "kill -" .. name .. " " .. job.pid)
end

--- host(plugin, env): `durable run PLUGIN` on this test's store, up (its
--- "hosting" line printed); job.pid is the durable process (spawn execs it
--- through env).
function M.host(plugin, env)
  local job = M.spawn { "run", plugin, env = env }
  local up = M.wait_for(function()
    return (M.read_file(job.err) or ""):find("durable run: hosting", 1, true)
      or not M.running(job)
  end, 15)
  assert(up and M.running(job), "the host did not start: " .. (M.read_file(job.err) or ""))
  job.pid = tonumber(job.pid)
  return job
end

--- kill(job): SIGKILL, and wait until it is gone (137).
function M.kill(job)
  M.signal(job, "KILL")
  local rc = M.exit_code(job, 10)
  assert(rc == 137, "the host did not die of SIGKILL (exit status " .. tostring(rc) .. ")")
end

--- After each test: kill what still runs, remove the files.
function M.finish()
  for _, job in ipairs(jobs) do
    if M.running(job) then
      os.execute("kill -KILL " .. job.pid .. " 2>/dev/null")
      M.exit_code(job, 5)
    end
  end
  jobs = {}
  for _, f in ipairs(cleanup) do os.remove(f) end
  cleanup = {}
end

return M
