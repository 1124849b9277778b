--- probe.lua: the processed log of the consumer tests (which items each
-- handler saw, in which order, how many at once), for the stream specs
-- (required by them and by fixtures/streams.lua, so both see one log per
-- spec file).
--
-- probe.handle(key, hub, item) is a consumer handler: it counts the items
-- in flight (max_concurrent), checks payload.value == item.sequence (the
-- publisher always sends the expected sequence), appends the sequence to
-- the key's list, and completes a few ms later -- through a request to a
-- StreamDelay hub sent from the mesh's read-issuing hub, which a recycle of
-- the consuming hub does not refuse -- so that recycles land mid-item.
local M = {}

-- What the stream specs share: the fixture plugin (fixtures/streams.lua),
-- its stream family, and stream timings shrunk so retries and takeovers
-- happen within a test's patience.
M.FIXTURE = "tests/spec/fixtures/streams.lua"
M.FAMILY = "ProbeStream"
M.STREAMS = { holder_probe_ms = 300, reclaim_ms = 400, backoff_min_ms = 50, backoff_max_ms = 400 }

---Start a fresh log; `delay_path` is a StreamDelay node, `delay_ms` the
---handler's duration.
function M.reset(delay_path, delay_ms)
  M.lists = {}
  M.active, M.max_concurrent = 0, 0
  M.violations = {}
  M.delay_path, M.delay_ms = delay_path, delay_ms or 3
end
M.reset()

---The sequences handled under `key`, in order (a live list).
function M.of(key)
  local list = M.lists[key]
  if not list then
    list = {}
    M.lists[key] = list
  end
  return list
end

---A copy of the list.
function M.snapshot(key)
  return { table.unpack(M.of(key)) }
end

function M.handle(key, hub, item)
  M.active = M.active + 1
  if M.active > M.max_concurrent then M.max_concurrent = M.active end
  local value = type(item.payload) == "table" and item.payload.value
  if value ~= item.sequence then
    M.active = M.active - 1
    M.violations[#M.violations + 1] = ("%s: item %d carries value %s"):format(key, item.sequence,
      tostring(value))
    error(M.violations[#M.violations])
  end
  local list = M.of(key)
  list[#list + 1] = item.sequence
  local function done() M.active = M.active - 1 end
  return hub.mesh:reads_hub():request(M.delay_path, "delay", { ms = M.delay_ms })
    :next(done, function(message)
      done()
      error(message, 0)
    end)
end

---The sequences of the items `stream` keeps, in order (what trims and
---retention left), as the store lists them.
function M.kept(mesh, stream)
  local helper = require "helper"
  local durable = require "durable"
  local _, items_ns = durable.stream_path(stream)
  local seqs = {}
  for _, node in ipairs(helper.ok(mesh:query("namespace:" .. items_ns))) do
    seqs[#seqs + 1] = tonumber(node.id)
  end
  return seqs
end

---1..n (or a..b) as a list.
function M.range(a, b)
  if b == nil then a, b = 1, a end
  local out = {}
  for i = a, b do out[#out + 1] = i end
  return out
end

return M
