--- helper.lua: the one helper of the busted specs (.busted loads it first).
--
-- It gives every spec a mesh on the store under test and the loop-running
-- verbs, and it checks after every spec that the Lua module let go of every
-- registry reference it took (core.refs() back to its baseline) and that no
-- mesh was left open.
--
--   local helper = require "helper"
--   helper.each()                 -- in a spec file: the before/after_each
--   local mesh = helper.open{ plugins = { helper.fixture "hubs.lua" } }
--   local ns = helper.ns()        -- a namespace no other spec uses
--   local v = helper.ok(completion)           -- wait; assert it succeeded
--   local msg = helper.fails(completion, "ENOTFOUND")
--   helper.run_until(mesh, function() return done end)
--
-- The store comes from DURABLE_TEST_STORE: "sqlite" (default; a fresh temp
-- file per mesh, or sqlite::memory: with DURABLE_TEST_SQLITE=memory) or
-- "postgres" (the database at DURABLE_TEST_PG, shared by every spec: hence
-- helper.ns(), which is unique per run and per call).  A spec that cannot
-- run on this machine says pending(), never passes silently.
local M = {}

-- Line by line, so that busted's summary reaches a log even when the process
-- dies on its way out (a sanitizer's leak check runs before the C library
-- writes out what it buffered).
io.stdout:setvbuf("line")

M.KIND = os.getenv("DURABLE_TEST_STORE") or "sqlite"
M.PG = os.getenv("DURABLE_TEST_PG")
M.BUILD = os.getenv("DURABLE_BUILD_DIR") or "build"
math.randomseed(os.time() + math.floor(os.clock() * 1e6))
M.RUN = ("r%d%04d"):format(os.time() % 100000000, math.random(0, 9999))

local counter = 0
local opened = {}  -- meshes opened during the current spec
local temps = {}   -- files to remove after the current spec
local baseline     -- core.refs() before the current spec

---Lines the meshes opened by helper.open logged during the current spec,
---as "level line".
M.logs = {}

local function core() return require "durable.core" end

---The loop's clock of `mesh` in ms, and its active hub at `address` (or
---nil): the runtime's primitives, which user objects do not carry.
function M.now(mesh) return core().primitives.mesh.now(mesh) end
function M.find(mesh, address) return core().primitives.mesh.find(mesh, address) end

---The path of a fixture file.
---@param name string
function M.fixture(name)
  return "tests/spec/fixtures/" .. name
end

---A temp file name that does not exist yet (removed after the test, with
---SQLite's -wal and -shm companions and the store's -live).
function M.tmpname(suffix)
  local name = os.tmpname()
  os.remove(name)
  name = name .. (suffix or "")
  temps[#temps + 1] = name
  temps[#temps + 1] = name .. "-wal"
  temps[#temps + 1] = name .. "-shm"
  temps[#temps + 1] = name .. "-live"
  return name
end

---A store URL for one mesh of the store under test.
function M.store()
  if M.KIND == "postgres" then
    if not M.PG or M.PG == "" then
      error("DURABLE_TEST_STORE=postgres needs DURABLE_TEST_PG (tests/support/pg.sh)")
    end
    return M.PG
  elseif M.KIND == "sqlite" then
    if os.getenv("DURABLE_TEST_SQLITE") == "memory" then return "sqlite::memory:" end
    return "sqlite:" .. M.tmpname(".db")
  end
  error("DURABLE_TEST_STORE must be sqlite or postgres, not " .. M.KIND)
end

---A namespace (two segments) no other spec, and no other run, uses.
---@param label? string
function M.ns(label)
  counter = counter + 1
  return ("luaspec/%sn%d%s"):format(M.RUN, counter, label or "")
end

---Open a mesh on the store under test (closed after the test if the test
---did not).  Its log lines are kept in helper.logs; DURABLE_TEST_VERBOSE=1
---also prints them.
---@param opts? table durable.open options; store defaults to helper.store()
---@return durable.Mesh
function M.open(opts)
  local durable = require "durable"
  opts = opts or {}
  opts.store = opts.store or M.store()
  if opts.log == nil then
    opts.log = function(level, line)
      M.logs[#M.logs + 1] = level .. " " .. line
      if os.getenv("DURABLE_TEST_VERBOSE") then io.stderr:write(level, " ", line, "\n") end
    end
  end
  local mesh, message, code = durable.open(opts)
  assert(mesh, ("durable.open on %s failed: %s %s"):format(opts.store, code, message))
  opened[#opened + 1] = mesh
  return mesh
end

---Log lines (of this spec) that contain `text` (plain).
---@param since? integer only lines after the first `since` (a #helper.logs taken earlier)
function M.log_lines(text, since)
  local out = {}
  for i = (since or 0) + 1, #M.logs do
    if M.logs[i]:find(text, 1, true) then out[#out + 1] = M.logs[i] end
  end
  return out
end

---Wait for a completion that must succeed; returns its value.
---@param c durable.Completion
---@param timeout_ms? number default 5000
function M.ok(c, timeout_ms)
  local value, message, code = c:wait(timeout_ms or 5000)
  if message ~= nil then
    error(("expected success, got %s: %s"):format(code, message), 2)
  end
  return value
end

---Wait for a completion that must fail with `code`; returns its message.
---@param c durable.Completion
---@param code string "ENOTFOUND", "ESHUTDOWN", ...
---@param timeout_ms? number default 5000
function M.fails(c, code, timeout_ms)
  local value, message, got = c:wait(timeout_ms or 5000)
  if message == nil then
    error(("expected %s, got success: %s"):format(code, require("durable").encode(value)), 2)
  end
  if got ~= code then
    error(("expected %s, got %s: %s"):format(code, got, message), 2)
  end
  return message
end

---Run the mesh's loop until pred() is true; fails the test after
---timeout_ms (default 5000).
function M.run_until(mesh, pred, timeout_ms)
  local ok, message = mesh:run_until(pred, timeout_ms or 5000)
  if not ok then error("run_until: " .. message, 2) end
  return true
end

---Run a shell command; returns exit code, stdout, stderr.
---@param cmd string already quoted
function M.sh(cmd)
  local out, err = M.tmpname(".out"), M.tmpname(".err")
  local _, how, code = os.execute(("%s >%s 2>%s </dev/null"):format(cmd, out, err))
  if how == "signal" then code = 128 + code end
  local function slurp(p)
    local f = io.open(p, "rb")
    if not f then return "" end
    local s = f:read("a")
    f:close()
    return s
  end
  return code, slurp(out), slurp(err)
end

---Quote for the shell.
function M.quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function before()
  baseline = core().refs()
  M.logs = {}
end

local function after()
  local meshes = opened
  opened = {}
  for i = #meshes, 1, -1 do meshes[i]:close() end
  local refs, open = core().refs(), core().meshes()
  for _, name in ipairs(temps) do os.remove(name) end
  temps = {}
  assert(open == 0, ("%d mesh(es) left open after the test"):format(open))
  assert(refs == baseline, ("registry references: %d before the test, %d after it (leaked %d)")
    :format(baseline, refs, refs - baseline))
end

---Install the helper's before_each/after_each in the calling spec file (or
---describe block): refs baseline, meshes closed, temp files removed.
function M.each()
  -- busted gives spec files their own environment: install the hooks there
  local env = require("busted.compatibility").getfenv(2)
  env.before_each(before)
  env.after_each(after)
end

package.loaded.helper = M -- one instance, whether loaded by .busted or require
return M
