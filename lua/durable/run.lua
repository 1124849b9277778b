-- durable.run: the host behind `durable run PLUGIN… [--store URL]`.
--
-- Opens a mesh with the plugins (and, with --metrics, its Prometheus
-- endpoint) (a broken plugin is refused here, naming
-- the file, the line and the reason, before anything starts), makes this
-- process a host of their NodeTypes' consumers (owners whose streams have
-- waiting items are activated now and whenever another process appends),
-- and runs until SIGINT or SIGTERM.  Then it leaves gracefully: no new item
-- starts, the item in flight finishes and is acknowledged, every lease is
-- released (the streams show OrphanedAt), and it returns 0.  A second signal
-- exits at once (see bindings/lua/run.c).
local durable = require "durable"
local core = require "durable.core"

local function fail(message)
  io.stderr:write("durable: run: ", tostring(message), "\n")
  return 1
end

---@param store string the store URL
---@param metrics string HOST:PORT to serve /metrics at, or "" for none
---@param ... string plugin files
---@return integer exit status
return function(store, metrics, ...)
  local plugins = { ... }
  if #plugins == 0 then return fail("no plugin given (durable run PLUGIN… [--store URL])") end
  -- host = true: durable.host(mesh) before anything runs; the metrics
  -- endpoint before that, so that a bad or busy address starts nothing
  local ok, mesh, message, code = pcall(durable.open, {
    store = store, plugins = plugins, host = true,
    metrics = metrics ~= "" and metrics or nil,
  })
  if not ok then return fail((tostring(mesh):gsub("^durable%.open: ", ""))) end
  if not mesh then
    fail(message)
    return code == "EINVAL" and metrics ~= "" and message:find("metrics address", 1, true) and 2 or 1
  end
  core.trap_signals(mesh)
  mesh:log("info", ("durable run: hosting %s on %s; stop with Ctrl-C"):format(
    table.concat(plugins, ", "), mesh:store_name()))
  mesh:run_until(function() return core.signalled() ~= nil end)
  mesh:log("info", ("durable run: %s: leaving; the item in flight finishes, leases are released")
    :format(core.signalled()))
  mesh:close()
  return 0
end
