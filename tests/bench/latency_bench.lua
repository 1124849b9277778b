-- latency_bench.lua: publish -> handler entry in one process, a Lua
-- producer and a Lua consumer plugin, paced (see README.md).
--
--   build/durable lua tests/bench/latency_bench.lua [--store sqlite|postgres|URL]
--       [--rate N] [--seconds N] [--reps N] [--batch N] [--quick] [--dump FILE]
--
-- Each repetition opens a mesh (SQLite: on a fresh file, removed after;
-- PostgreSQL: DURABLE_TEST_PG, under a fresh owner `latency/bench…`, nothing
-- deleted) with the plugin latency_bench_plugin.lua, whose LatencyProbe
-- NodeType consumes LatencyLog@{its path} (config:
-- with_durable_stream_consumer).  After a warm-up (the owner activated, the
-- stream held), the producer publishes RATE items a second for SECONDS,
-- item i due at t0 + i/RATE, each stamped with the monotonic clock (µs) as
-- it is published; the handler notes now - stamp on entry.  Prints p50,
-- p90, p99 and max of each repetition, the largest backlog (items
-- published and not yet handled, sampled as the producer runs) and whether
-- the consumer fell behind -- more than a tenth of a second of items (or
-- two batches) still waiting when the last one was published -- the CPU
-- the process used meanwhile, and the medians over the repetitions.
-- --dump FILE writes a line per item: repetition, publish time in ms from
-- the start, latency in µs (to see when the tail happens).
--
-- With --batch N the consumer is declared with `batch = N` and its handler
-- is handler(hub, items, tx), items an array.
--
-- Not a test: it asserts nothing about time.  It exits 1 when a publish
-- fails or the consumer stalls (nothing handled for 60 s).
local durable = require "durable"
local system = require "system" -- luasystem (busted's): monotime() in s

local USAGE = "usage: latency_bench.lua [--store sqlite|postgres|URL] [--rate N] "
  .. "[--seconds N] [--reps N] [--batch N] [--quick] [--dump FILE]"
local opts = { store = "sqlite", rate = 1000, seconds = 10, reps = nil, batch = nil,
               quick = false, dump = nil }
do
  local i = 1
  local function number(name)
    local v = tonumber(arg[i + 1])
    if not v or v <= 0 then error(USAGE .. "\n" .. name .. " takes a positive number", 0) end
    i = i + 1
    return v
  end
  while arg[i] do
    local a = arg[i]
    if a == "--store" then opts.store = assert(arg[i + 1], USAGE); i = i + 1
    elseif a == "--rate" then opts.rate = number(a)
    elseif a == "--seconds" then opts.seconds = number(a)
    elseif a == "--reps" then opts.reps = math.floor(number(a))
    elseif a == "--batch" then opts.batch = math.floor(number(a))
    elseif a == "--dump" then opts.dump = assert(arg[i + 1], USAGE); i = i + 1
    elseif a == "--quick" then opts.quick = true
    else error(USAGE, 0) end
    i = i + 1
  end
end
if opts.quick then opts.seconds = math.min(opts.seconds, 3) end
opts.reps = opts.reps or (opts.quick and 1 or 3)

local kind = opts.store
local function store_url(rep_tmp)
  if kind == "sqlite" then return "sqlite:" .. rep_tmp end
  if kind == "postgres" then
    local pg = os.getenv("DURABLE_TEST_PG")
    if not pg or pg == "" then
      io.stderr:write("latency_bench: --store postgres needs DURABLE_TEST_PG "
        .. "(. tests/support/pg.sh && durable_pg_start)\n")
      os.exit(1)
    end
    return pg
  end
  return kind -- a URL
end

local function now_us() return math.floor(system.monotime() * 1e6) end

-- The plugin (in this Lua state) reports here.
local sink = { batch = opts.batch }
package.loaded.latency_bench_sink = sink
local plugin_file = (arg[0]:match("^(.*/)") or "./") .. "latency_bench_plugin.lua"

local run = ("bench%d%04d"):format(os.time() % 100000000, math.random(0, 9999))
local WARM = 100
local STALL_US = 60 * 1000000

-- CPU time of this process so far (all its threads), in clock ticks; nil
-- where /proc is not there.
local function cpu_ticks()
  local f = io.open("/proc/self/stat", "r")
  if not f then return nil end
  local line = f:read("l")
  f:close()
  -- the fields after the command name, which is in parentheses
  local rest = line:match("%) (.*)$")
  local fields = {}
  for x in rest:gmatch("%S+") do fields[#fields + 1] = x end
  return tonumber(fields[12]) + tonumber(fields[13]) -- utime, stime
end
local TICKS = tonumber((io.popen("getconf CLK_TCK 2>/dev/null"):read("l"))) or 100

local function percentile(sorted, q)
  if #sorted == 0 then return 0 end
  local k = math.max(1, math.min(#sorted, math.floor(#sorted * q + 0.5)))
  return sorted[k]
end

local function fail(message)
  io.stderr:write("latency_bench: ", message, "\n")
  os.exit(1)
end

-- Wait (running the loop) until cond(), failing after STALL_US without
-- progress of sink.handled.
local function drain(mesh, cond, what)
  local last, last_handled = now_us(), sink.handled
  mesh:run_until(function()
    if sink.handled ~= last_handled then last, last_handled = now_us(), sink.handled end
    return cond() or now_us() - last > STALL_US
  end)
  if not cond() then fail(("%s: nothing handled for 60 s (%d handled)"):format(what, sink.handled)) end
end

-- One repetition: its figures.
local function one_rep(rep)
  local tmp
  if kind == "sqlite" then
    tmp = os.tmpname()
    os.remove(tmp)
    tmp = tmp .. ".db"
  end
  sink.count, sink.handled, sink.latency = 0, 0, {}
  local mesh, why = durable.open { store = store_url(tmp), plugins = { plugin_file },
    log = function(level, line)
      if level ~= "info" and level ~= "debug" then io.stderr:write(line, "\n") end
    end }
  if not mesh then fail("cannot open the store: " .. tostring(why)) end
  local owner = ("latency/%s/r%d"):format(run, rep)
  assert(mesh:put_node { path = owner, node_type = "LatencyProbe", content = {} }:wait())
  local client = assert(mesh:hub("client/latency-" .. run))
  local stream = { namespace = "LatencyLog", key = owner }
  local failed
  local function on_fail(message) failed = failed or tostring(message) end

  -- warm-up: the owner activated, the stream held, the statements prepared
  for _ = 1, WARM do
    client:publish_durable(stream, { warm = true }):next(function() end, on_fail)
  end
  drain(mesh, function() return sink.handled >= WARM or failed ~= nil end, "warm-up")
  if failed then fail("a publish failed: " .. failed) end

  local total = math.floor(opts.rate * opts.seconds + 0.5)
  local period = 1e6 / opts.rate
  local stamps = {}
  local heap_before = collectgarbage("count")
  local i, max_backlog = 0, 0
  local cpu0 = cpu_ticks()
  local t0 = now_us()
  while i < total and not failed do
    local now = now_us()
    while i < total and t0 + i * period <= now do
      local t = now_us()
      i = i + 1
      stamps[i] = t - t0
      client:publish_durable(stream, { t = t }):next(function() end, on_fail)
    end
    local backlog = i - sink.count
    if backlog > max_backlog then max_backlog = backlog end
    if i < total then
      local due = t0 + i * period
      mesh:run_until(function() return now_us() >= due or failed ~= nil end,
        math.max(1, math.ceil((due - now_us()) / 1000)))
    end
  end
  local t_last = now_us()
  local cpu1 = cpu_ticks()
  local backlog_at_end = i - sink.count
  drain(mesh, function() return sink.count >= total or failed ~= nil end, "run")
  if failed then fail("a publish failed: " .. failed) end
  local drained_ms = (now_us() - t_last) / 1000
  local heap_after = collectgarbage("count")

  local lat = {}
  for k = 1, sink.count do lat[k] = sink.latency[k] end
  if opts.dump then
    local f = assert(io.open(opts.dump, rep == 1 and "w" or "a"))
    for k = 1, #lat do
      f:write(("%d %.3f %d\n"):format(rep, (stamps[k] or 0) / 1000, lat[k]))
    end
    f:close()
  end
  table.sort(lat)
  local behind_limit = math.max(opts.rate / 10, 2 * (opts.batch or 0))
  local r = {
    n = #lat,
    p50 = percentile(lat, 0.50) / 1000,
    p90 = percentile(lat, 0.90) / 1000,
    p99 = percentile(lat, 0.99) / 1000,
    max = lat[#lat] / 1000,
    max_backlog = max_backlog,
    backlog_at_end = backlog_at_end,
    behind = backlog_at_end > behind_limit,
    drained_ms = drained_ms,
    heap = ("%.1f -> %.1f MB"):format(heap_before / 1024, heap_after / 1024),
    cpu = cpu0 and ("%.0f%%"):format(100 * (cpu1 - cpu0) / TICKS / ((t_last - t0) / 1e6)) or "?",
  }
  mesh:close()
  if tmp then
    for _, suffix in ipairs { "", "-wal", "-shm", "-live" } do os.remove(tmp .. suffix) end
  end
  return r
end

local function median(values)
  table.sort(values)
  local n = #values
  if n % 2 == 1 then return values[(n + 1) // 2] end
  return (values[n // 2] + values[n // 2 + 1]) / 2
end

print(("latency_bench: %s, %g items/s for %g s, %s, %d repetition%s, publish -> handler entry")
  :format(kind, opts.rate, opts.seconds,
    opts.batch and ("batch = " .. opts.batch) or "no batch", opts.reps, opts.reps == 1 and "" or "s"))
local results = {}
for rep = 1, opts.reps do
  local r = one_rep(rep)
  results[rep] = r
  print(("  rep %d: n %d  p50 %.2f  p90 %.2f  p99 %.2f  max %.2f ms  backlog max %d, "
    .. "at the end %d, drained in %.0f ms  behind: %s  (CPU %s of a core, Lua heap %s)")
    :format(rep, r.n, r.p50, r.p90, r.p99, r.max, r.max_backlog, r.backlog_at_end, r.drained_ms,
      r.behind and "YES" or "no", r.cpu, r.heap))
end
local function med(field)
  local v = {}
  for k, r in ipairs(results) do v[k] = r[field] end
  return median(v)
end
local behind = 0
for _, r in ipairs(results) do if r.behind then behind = behind + 1 end end
print(("  median: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f ms  fell behind in %d of %d")
  :format(med("p50"), med("p90"), med("p99"), med("max"), behind, #results))
os.exit(0)
