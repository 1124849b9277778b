-- lua_figures.lua: the two Lua figures of stream_bench (see README.md).
-- stream_bench runs it as a subprocess, between its plain loops, and reads
-- the one number it prints on stdout (items/s); anything else goes to
-- stderr.  It exits 1 when something fails or makes no progress for 120 s.
--
--   durable lua tests/bench/lua_figures.lua read STORE NAMESPACE KEY N
--     a client hub's read_durable of the stream from sequence 0 until item
--     N has been delivered (the backlog: pages by range, no lease, no ack)
--   durable lua tests/bench/lua_figures.lua produce STORE NAMESPACE KEY N
--     one producer, N publish_durable calls to the stream, each issued when
--     the previous sequence has come back (every item saved)
--
-- The clock starts after the mesh is open, so the process's start is not
-- counted.
local durable = require "durable"

local mode, store, ns, key, n = arg[1], arg[2], arg[3], arg[4], tonumber(arg[5])
if (mode ~= "read" and mode ~= "produce") or not store or not ns or not key or not n then
  io.stderr:write("usage: lua_figures.lua read|produce STORE NAMESPACE KEY N\n")
  os.exit(2)
end

local STALL_MS = 120000
local mesh = assert(durable.open { store = store })
local stream = { namespace = ns, key = key }
local client = assert(mesh:hub(("client/lua-figures-%s-%d"):format(mode, math.random(1, 1 << 30))))
local function now() return durable.core.primitives.mesh.now(mesh) end

local count, failed = 0, nil
-- run until done() or failed, giving up after STALL_MS without progress
local function run(done)
  local last, last_count = now(), -1
  mesh:run_until(function()
    if count ~= last_count then last, last_count = now(), count end
    return done() or failed ~= nil or now() - last > STALL_MS
  end)
  if failed or not done() then
    io.stderr:write(("lua_figures %s: %s at %d of %d\n"):format(mode,
      failed or "no progress for 120 s", count, n))
    os.exit(1)
  end
end

local t0
if mode == "read" then
  t0 = now()
  local sub = client:read_durable(stream, 0, function(item)
    count = count + 1
    if item.sequence ~= count and not failed then
      failed = ("item %d arrived as the %dth"):format(item.sequence, count)
    end
  end)
  run(function() return count >= n end)
  sub:close()
else
  local function issue()
    client:publish_durable(stream, { i = count + 1 }):next(function()
      count = count + 1
      if count < n then issue() end
    end, function(message) failed = failed or tostring(message) end)
  end
  t0 = now()
  issue()
  run(function() return count >= n end)
end
local seconds = (now() - t0) / 1000
print(("%.1f"):format(n / seconds))
mesh:close()
os.exit(0)
