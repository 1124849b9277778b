-- durable.run: the host behind `durable run PLUGIN… [--store URL]`.
--
-- Opens a mesh with the plugins (a broken plugin is refused here, naming
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
---@param ... string plugin files
---@return integer exit status
return function(store, ...)
  local plugins = { ... }
  if #plugins == 0 then return fail("no plugin given (durable run PLUGIN… [--store URL])") end
  -- host = true: durable.host(mesh) before anything runs
  local ok, mesh, message = pcall(durable.open, { store = store, plugins = plugins, host = true })
  if not ok then return fail((tostring(mesh):gsub("^durable%.open: ", ""))) end
  if not mesh then return fail(message) end
  core.trap_signals(mesh)
  mesh:log("info", ("durable run: hosting %s on %s; stop with Ctrl-C"):format(
    table.concat(plugins, ", "), mesh:store_name()))
  mesh:run_until(function() return core.signalled() ~= nil end)
  mesh:log("info", ("durable run: %s: leaving; the item in flight finishes, leases are released")
    :format(core.signalled()))
  mesh:close()
  return 0
end
