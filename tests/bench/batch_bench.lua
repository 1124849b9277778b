-- batch_bench.lua: a Lua batch handler draining a backlog (see README.md,
-- "batch_bench").  batch_bench (C) runs it for its figure [4], between two
-- halves of a plain one-row loop, and reads the one number it prints on
-- stdout (items/s); anything else goes to stderr.  Run alone, it prints
-- that rate and nothing to compare it with.
--
--   build/durable lua tests/bench/batch_bench.lua [--store URL] [--key KEY]
--       [--items N] [--mode ack|tx] [--batch N] [--in-flight N] [--filled]
--
-- 1. fill (untimed): a mesh without the consumers puts the owner KEY (of
--    the NodeType of the mode) and publishes N items to the stream
--    Bench@KEY, `--in-flight` publishes in flight, and closes.  With
--    `--filled` the backlog and its owner are there already (batch_bench
--    wrote them) and this step is skipped.
-- 2. drain: a second mesh, a host with batch_bench_plugin.lua, activates
--    the owner KEY, whose NodeType's consumer takes up to `--batch` items a
--    call: `ack` (BatchAck) returns nil, `tx` (BatchTx) writes one node per
--    batch with tx:update_node.  Timed from the open's return until the
--    stream node's Checkpoint is N.
--
-- Defaults: a fresh SQLite file (removed at the end), a fresh key, 50,000
-- items, ack, batches of 256, 1,000 in flight.  It exits 1 when something
-- fails, makes no progress for 120 s, or an item arrives out of order.
local durable = require "durable"

local opts = { items = 50000, mode = "ack", batch = 256, in_flight = 1000 }
local USAGE = "usage: batch_bench.lua [--store URL] [--key KEY] [--items N] [--mode ack|tx] "
  .. "[--batch N] [--in-flight N] [--filled]"
local i = 1
while arg[i] do
  local a, v = arg[i], arg[i + 1]
  local step = 2
  if a == "--filled" then opts.filled, step = true, 1
  elseif a == "--store" and v then opts.store = v
  elseif a == "--key" and v then opts.key = v
  elseif a == "--items" then opts.items = assert(math.tointeger(tonumber(v)), USAGE)
  elseif a == "--mode" and (v == "ack" or v == "tx") then opts.mode = v
  elseif a == "--batch" then opts.batch = assert(math.tointeger(tonumber(v)), USAGE)
  elseif a == "--in-flight" then opts.in_flight = assert(math.tointeger(tonumber(v)), USAGE)
  else error(USAGE, 0) end
  i = i + step
end

local tmp
if not opts.store then
  tmp = os.tmpname()
  os.remove(tmp)
  tmp = tmp .. ".db"
  opts.store = "sqlite:" .. tmp
end
local N = opts.items
local key = opts.key or ("batchbench/%d%04d"):format(os.time() % 100000000, math.random(0, 9999))
local stream = { namespace = "Bench", key = key }
local node_type = opts.mode == "ack" and "BatchAck" or "BatchTx"
local plugin = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "batch_bench_plugin.lua"
local STALL_MS = 120000

local function fail(message)
  io.stderr:write("batch_bench.lua: ", message, "\n")
  os.exit(1)
end

-- what the plugin's handlers count
local state = { batch = opts.batch, handled = 0, calls = 0, order_ok = true }
package.loaded["batch_bench.state"] = state

-- mesh:run_until(done), giving up after STALL_MS without `progress()`
-- changing
local function run(mesh, done, progress, what)
  local now = durable.core.primitives.mesh.now
  local last, seen = now(mesh), nil
  mesh:run_until(function()
    local p = progress()
    if p ~= seen then last, seen = now(mesh), p end
    return done() or now(mesh) - last > STALL_MS
  end)
  if not done() then fail(("no progress for 120 s while %s (at %s)"):format(what, tostring(seen))) end
end

-- ---- 1. fill ------------------------------------------------------------------------
local function fill()
  local filler = assert(durable.open { store = opts.store })
  assert(filler:put_node { path = key, node_type = node_type, content = {} }:wait())
  local client = assert(filler:hub(("client/batch-bench-%d"):format(math.random(1, 1 << 30))))
  local issued, saved, failed = 0, 0, nil
  local function issue()
    issued = issued + 1
    client:publish_durable(stream, { i = issued }):next(function()
      saved = saved + 1
      if issued < N then issue() end
    end, function(message) failed = failed or tostring(message) end)
  end
  for _ = 1, math.min(opts.in_flight, N) do issue() end
  run(filler, function() return saved >= N or failed ~= nil end, function() return saved end,
    "filling the backlog")
  if failed then fail("publish failed: " .. failed) end
  filler:close()
end
if not opts.filled then fill() end

-- ---- 2. drain -----------------------------------------------------------------------
local mesh = assert(durable.open { store = opts.store, plugins = { plugin }, host = true })
local now = durable.core.primitives.mesh.now
local t0 = now(mesh)
run(mesh, function() return state.handled >= N end, function() return state.handled end,
  "draining")
local path = durable.stream_path(stream)
run(mesh, function() return assert(mesh:get_node(path):wait()).content.Checkpoint >= N end,
  function() return 0 end, "waiting for the checkpoint")
local seconds = (now(mesh) - t0) / 1000
if not state.order_ok or state.handled ~= N then
  fail(("handled %d items of %d, in order: %s"):format(state.handled, N,
    state.order_ok and "yes" or "NO"))
end
if opts.mode == "tx" then
  local applied = assert(mesh:get_node(key):wait()).content.applied
  if applied ~= N then fail(("the owner says applied %s, not %d"):format(tostring(applied), N)) end
end
print(("%.1f"):format(N / seconds))
io.stderr:write(("batch_bench.lua: %s, %d items in %.2f s, %d handler calls (%.0f items a call), "
  .. "store %s\n"):format(opts.mode, N, seconds, state.calls, N / state.calls, mesh:store_name()))
mesh:close()
if tmp then
  for _, suffix in ipairs { "", "-wal", "-shm", "-live" } do os.remove(tmp .. suffix) end
end
os.exit(0)
