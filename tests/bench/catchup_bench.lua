-- catchup_bench.lua: a consumer catching up a 100,000-item backlog, from
-- Lua, with the process's memory sampled along the way (see README.md).
--
--   build/durable lua tests/bench/catchup_bench.lua [--items N] [--store URL]
--                                                   [--in-flight N] [--reader]
--
-- 1. publish: N items to one stream, `--in-flight` publishes in flight at
--    every moment (a completion issues the next one), so the stream hub's
--    group commit writes many items per transaction.  Items/s counted when
--    the last sequence has come back, i.e. every item is saved.
-- 2. catch-up: a client hub consumes the stream from sequence 0.  The
--    handler counts and returns nil; each item is a turn of the hub, then an
--    acknowledgement (one store write each) before the next item, as the
--    spec wants.  Items/s from the first claim to the checkpoint reaching N.
-- 3. with --reader, also a plain read_durable of the whole stream (no lease,
--    no acknowledgement): the reader's own rate.
--
-- VmRSS (from /proc/self/status) is printed before the catch-up, every
-- tenth of the way, and after: the backlog is read by range in pages, so it
-- should stay flat however long the stream.  Not a test: it asserts nothing
-- about time; it exits 1 when something fails or stalls.
local durable = require "durable"

local opts = { items = 100000, in_flight = 1000, store = nil, reader = false }
local i = 1
while arg[i] do
  local a = arg[i]
  if a == "--items" then opts.items = assert(tonumber(arg[i + 1]), "--items N"); i = i + 1
  elseif a == "--store" then opts.store = arg[i + 1]; i = i + 1
  elseif a == "--in-flight" then opts.in_flight = assert(tonumber(arg[i + 1]), "--in-flight N"); i = i + 1
  elseif a == "--reader" then opts.reader = true
  else error("usage: catchup_bench.lua [--items N] [--store URL] [--in-flight N] [--reader]", 0) end
  i = i + 1
end

local tmp
if not opts.store then
  tmp = os.tmpname()
  os.remove(tmp)
  tmp = tmp .. ".db"
  opts.store = "sqlite:" .. tmp
end

local function rss_kb()
  local f = io.open("/proc/self/status", "r")
  if not f then return -1 end
  for line in f:lines() do
    local kb = line:match("^VmRSS:%s+(%d+)")
    if kb then
      f:close()
      return tonumber(kb)
    end
  end
  f:close()
  return -1
end

local function mb(kb) return ("%.1f MB"):format(kb / 1024) end

local mesh = assert(durable.open { store = opts.store })
local function now() return durable.core.primitives.mesh.now(mesh) end
local run = ("bench%d%04d"):format(os.time() % 100000000, math.random(0, 9999))
local owner = "catchup/" .. run
local stream = { namespace = "Bench", key = owner }
-- the owner is a node of a type with no consumer: the wake finds it and
-- stops there (a consumer on a client hub needs no wake)
assert(mesh:put_node { path = owner, node_type = "BenchOwner", content = {} }:wait())
local client = assert(mesh:hub("client/" .. run))
local N = opts.items

print(("catchup_bench: %d items, store %s, %d publishes in flight"):format(N, mesh:store_name(),
  opts.in_flight))
print(("rss at start: %s"):format(mb(rss_kb())))

-- ---- 1. publish ------------------------------------------------------------------
local issued, done, failed = 0, 0, nil
local function issue()
  issued = issued + 1
  local n = issued
  client:publish_durable(stream, { ["$type"] = "BenchItem", n = n, text = "some text of an item" })
    :next(function(seq)
      if seq ~= n and not failed then failed = ("item %d got sequence %d"):format(n, seq) end
      done = done + 1
      if issued < N then issue() end
    end, function(message)
      failed = failed or message
    end)
end
local t0 = now()
for _ = 1, math.min(opts.in_flight, N) do issue() end
local ok, why = mesh:run_until(function() return done == N or failed ~= nil end, 600000)
if not ok or failed then
  io.stderr:write("catchup_bench: publish failed: ", tostring(failed or why), "\n")
  os.exit(1)
end
local t_publish = (now() - t0) / 1000
print(("publish:  %d items in %.2f s = %.0f items/s"):format(N, t_publish, N / t_publish))

-- ---- 2. catch-up by a consumer ------------------------------------------------------
collectgarbage()
local before = rss_kb()
print(("rss before the catch-up: %s"):format(mb(before)))
local handled, next_sample, samples, max_rss = 0, N // 10, {}, before
local order_ok = true
local consumer = assert(mesh:hub("client/" .. run .. "/consumer"))
t0 = now()
assert(consumer:consume {
  namespace = "Bench", key = function() return owner end,
  handler = function(_, item)
    handled = handled + 1
    if item.sequence ~= handled or item.payload.n ~= handled then order_ok = false end
  end,
})
local last_progress, last_handled = now(), 0
ok, why = mesh:run_until(function()
  if handled >= next_sample then
    local kb = rss_kb()
    if kb > max_rss then max_rss = kb end
    samples[#samples + 1] = ("%d%%: %s"):format(math.floor(100 * handled / N + 0.5), mb(kb))
    next_sample = next_sample + N // 10
  end
  if handled ~= last_handled then last_progress, last_handled = now(), handled end
  if now() - last_progress > 120000 then return true end
  return handled >= N
end)
if handled < N then
  io.stderr:write(("catchup_bench: the consumer stalled at %d of %d (%s)\n"):format(handled, N,
    tostring(why)))
  os.exit(1)
end
local t_catchup = (now() - t0) / 1000
local path = durable.stream_path(stream)
mesh:run_until(function() return mesh:get_node(path):wait().content.Checkpoint == N end, 60000)
local after = rss_kb()
print(("catch-up: %d items in %.2f s = %.0f items/s (handled in order: %s)"):format(N, t_catchup,
  N / t_catchup, order_ok and "yes" or "NO"))
print("rss during the catch-up: " .. table.concat(samples, ", "))
print(("rss after the catch-up: %s (before %s, highest sample %s, growth %s)"):format(mb(after),
  mb(before), mb(max_rss), mb(max_rss - before)))

-- ---- 3. a plain reader --------------------------------------------------------------------
if opts.reader then
  local got = 0
  local rbefore = rss_kb()
  t0 = now()
  local sub = client:read_durable(stream, 0, function(item)
    got = got + 1
    if item.sequence ~= got then order_ok = false end
  end)
  local rmax = rbefore
  mesh:run_until(function()
    if got % 10000 == 0 then
      local kb = rss_kb()
      if kb > rmax then rmax = kb end
    end
    return got >= N
  end, 600000)
  local t_read = (now() - t0) / 1000
  sub:close()
  print(("reader:   %d items in %.2f s = %.0f items/s; rss %s -> highest %s"):format(got, t_read,
    got / t_read, mb(rbefore), mb(rmax)))
end

mesh:close()
if tmp then
  for _, suffix in ipairs { "", "-wal", "-shm", "-live" } do os.remove(tmp .. suffix) end
end
os.exit(order_ok and 0 or 1)
