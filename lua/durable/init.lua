--- durable: the Lua face of the durable runtime.
--
--   local durable = require "durable"
--   local mesh = assert(durable.open{ store = "sqlite::memory:",
--                                     plugins = { "plugins/document_log.lua" } })
--   mesh:put_node{ path = "Space/doc", node_type = "Document", content = {} }:wait()
--   local client = mesh:hub("client/app")
--   print(client:request("Space/doc", "hello", { name = "x" }):wait())
--   mesh:close()
--
-- Two layers, Tarantool-style: durable.core (bindings/lua/, C) is the small
-- primitive -- the mesh and hub userdata, callbacks called once -- and this
-- file is the friendly API over it: completions instead of callbacks,
-- node tables, plugins.  The methods below are added to the very method
-- tables of the C userdata (core.Mesh, core.Hub), so a mesh or a hub is one
-- object whichever layer a method comes from.  The C primitives themselves
-- (step, write, publish, ...) are not on those tables: they are in
-- core.primitives.mesh / .hub, for lua/durable/ only, so user code cannot
-- go around the checks and completions here.
--
-- Each mesh owns its libuv loop.  Nothing runs until Lua lets the loop run:
-- completion:wait(), mesh:run_until() and mesh:close() do; a handler never
-- does (it returns a completion).  Errors: misuse raises with a message
-- naming what was wrong; an operational failure is nil, message, code (a
-- failed completion, or a direct return), code being the runtime's error
-- name ("ENOTFOUND", "ESHUTDOWN", "EFAILED", "ETIMEDOUT", ...).
local core = require "durable.core"
local prim = core.primitives -- the C primitives (mesh._write is nil)
local completion = require "durable.completion"
local plugin = require "durable.plugin"
local streams = require "durable.streams"

local durable = {}

durable.version = core.version
---The JSON null (a table cannot hold nil).
durable.null = core.null
---durable.json(text): a value written as `text` itself (raw JSON content).
durable.json = core.json
---durable.array(t): t, written as a JSON array even when empty.
durable.array = core.array
durable.encode = core.encode
durable.decode = core.decode
durable.core = core
durable.plugin = plugin

---A pending completion and the functions that settle it.
---@see durable.completion.new
durable.completion = completion.new
durable.done = completion.done
durable.failed = completion.failed
durable.all = completion.all
durable.cold = completion.cold
durable.is_completion = completion.is
durable.fail = completion.fail -- raise a failure with a code: durable.fail("ECONFLICT", "...")
-- in a batch handler, raise a failure naming the item it stopped at:
-- durable.fail_at(item, "bad amount" [, code])
durable.fail_at = completion.fail_at

---Durable streams (lua/durable/streams.lua): hub:publish_durable,
---hub:read_durable, hub:consume, config:with_durable_stream_consumer, and:
durable.source = streams.source
durable.document_parts = streams.document_parts
durable.is_source = streams.is_source
durable.stream_path = streams.stream_path

---@class durable.Mesh
local Mesh = core.Mesh
---@class durable.Hub
---@field address string
---@field node_type string   "" for a client hub
---@field run_level "Starting"|"Started"|"Quiescing"|"ShutDown"|"Dead"
---@field incarnation integer differs for each activation of an address
---@field mesh durable.Mesh
local Hub = core.Hub

---@class durable.Node
---@field path string
---@field namespace string
---@field id string
---@field node_type string
---@field main_node string
---@field version integer
---@field created_at integer ms since the epoch
---@field updated_at integer
---@field content any decoded JSON
---@field raw string the content text as stored

---@class durable.Message
---@field type string
---@field payload any decoded JSON (nil when none, i.e. null)
---@field sender string the sending hub's address
---@field awaited boolean a request (someone awaits the reply), not a post

local OPEN_KEYS = {
  store = true, plugins = true, quiesce_budget_ms = true, request_timeout_ms = true,
  instruction_budget = true, log = true, streams = true, host = true, principal = true,
  metrics = true, read_store = true, publish_window = true, read_window = true,
}

-- the windows' options, each with its largest value
local WINDOWS = {
  publish_window = { keys = "items =, bytes =, waiting_bytes =, max_block_ms =",
    items = 0xffffffff, bytes = math.maxinteger, waiting_bytes = math.maxinteger,
    max_block_ms = 0xffffffff },
  read_window = { keys = "items =, bytes =", items = 0xffffffff, bytes = math.maxinteger },
}

local function check_window(name, w)
  if w == nil then return end
  local known = WINDOWS[name]
  if type(w) ~= "table" then
    error(("durable.open: '%s' must be a table { %s }"):format(name, known.keys), 3)
  end
  for k, v in pairs(w) do
    local max = k ~= "keys" and known[k]
    if not max then
      error(("durable.open: unknown %s option '%s'"):format(name, tostring(k)), 3)
    end
    if math.type(v) ~= "integer" or v <= 0 or v > max then
      error(("durable.open: %s.%s must be an integer > 0"):format(name, k), 3)
    end
  end
end

-- The principal a mesh acts as: opts.principal (false: the platform, even
-- with DURABLE_PRINCIPAL set), else $DURABLE_PRINCIPAL (what `durable run
-- --as` and `durable lua --as` hand over), else nil: the platform.  An empty
-- one is refused, never taken for "none": no string becomes the platform.
local function principal_of(opts)
  local p = opts.principal
  if p == false then return nil end
  if p == nil then
    p = os.getenv("DURABLE_PRINCIPAL")
    if p == nil then return nil end
    if p == "" then
      error("durable.open: DURABLE_PRINCIPAL is empty (unset it to act as the platform)", 3)
    end
    return p
  end
  if type(p) ~= "string" then
    error(("durable.open: 'principal' must be a string (or false for the platform), not %s")
      :format(type(p)), 3)
  end
  return p
end

local function check_ms(name, v)
  if v ~= nil and (math.type(v) ~= "integer" or v < 0) then
    error(("durable.open: '%s' must be an integer >= 0"):format(name), 3)
  end
end

---Open a mesh over a store, with the NodeTypes of the plugin files.
---A plugin that fails to load raises (file, line, reason) before anything
---is opened; a store that cannot be opened returns nil, message, code.
---`streams` sets the durable stream timings (durable_mesh_options_t.streams),
---in milliseconds: holder_probe_ms, reclaim_ms, backoff_min_ms (at most
---backoff_max_ms), backoff_max_ms, liveness_ms; one left out keeps its
---default (src/include/durable_stream_timings.h names each default and what
---it times); tests shrink them.
---`host = true` makes the process a host of its consumers (durable.host).
---`metrics = "HOST:PORT"` serves the Prometheus text format at
---http://HOST:PORT/metrics on the mesh's loop until it closes (see
---mesh:serve_metrics); an address that is malformed or cannot be bound
---returns nil, message, code and nothing is left open.
---`principal = "alice"` makes the mesh act as that principal: every read,
---query, write, mesh read, publish, stream read and consumer of the mesh
---is checked against alice's grants (mesh:grant), a denial failing with
---EACCES and a message naming principal and path, nothing written.  nil
---takes $DURABLE_PRINCIPAL, else the platform (which may do everything);
---false is the platform whatever the environment says.  "platform" is
---refused as a name: the platform is no principal.
---`publish_window = { items = 1024, bytes = 16 MiB, waiting_bytes = 64 MiB,
---max_block_ms = 60000 }` bounds the publishes in flight (each one left out
---keeps its default): past `items` or `bytes` a started publish waits, in
---order, and goes once one in flight is answered (in a handler, :await()
---on it simply suspends the handler); one that would take the waiting
---publishes past `waiting_bytes`, or that waited `max_block_ms`, fails with
---EAGAIN, nothing appended.
---`read_window = { items = 65536, bytes = 64 MiB }` bounds what the stream
---readers of the mesh (consumers, read_durable) hold at once, read ahead
---and not handed over yet; a reader past it waits for room.
---`read_store = URL` (a PostgreSQL standby) serves hub:read_durable: its
---reads go there, its live tail is still heard from `store`, and an item
---is handed over once the standby has replayed it -- in order, no gap, no
---duplicate.  Consumers and node reads stay on `store`.  The URL is opened
---for reading only (nothing is written there, not even a schema: open
---`store` first); one that cannot be read returns nil, message, code.
---A mesh owns its libuv loop; there is no `loop` option: a program with its
---own loop (luv) drives the mesh through mesh:fd() and mesh:step().
---@param opts { principal?: string|false, host?: boolean, metrics?: string, store?: string, read_store?: string, publish_window?: { items?: integer, bytes?: integer, waiting_bytes?: integer, max_block_ms?: integer }, read_window?: { items?: integer, bytes?: integer }, plugins?: string[], quiesce_budget_ms?: integer, request_timeout_ms?: integer, instruction_budget?: integer, log?: fun(level: string, line: string), streams?: { holder_probe_ms?: integer, reclaim_ms?: integer, backoff_min_ms?: integer, backoff_max_ms?: integer, liveness_ms?: integer } }
---@return durable.Mesh|nil mesh
---@return string? message
---@return string? code
function durable.open(opts)
  if type(opts) ~= "table" then
    error("durable.open{ store = URL, plugins = { FILE, ... }, ... }: expects a table", 2)
  end
  if opts.loop ~= nil then
    error("durable.open: there is no 'loop' option: a mesh runs on a libuv loop of its own; "
      .. "drive it from luv (or any loop) with mesh:fd() and mesh:step() (see lua/README.md)", 2)
  end
  for k in pairs(opts) do
    if not OPEN_KEYS[k] then error(("durable.open: unknown option '%s'"):format(tostring(k)), 2) end
  end
  local store = opts.store or os.getenv("DURABLE_STORE") or "sqlite:durable.db"
  if type(store) ~= "string" or store == "" then
    error("durable.open: 'store' must be a store URL string", 2)
  end
  check_ms("quiesce_budget_ms", opts.quiesce_budget_ms)
  check_ms("request_timeout_ms", opts.request_timeout_ms)
  check_ms("instruction_budget", opts.instruction_budget)
  if opts.log ~= nil and type(opts.log) ~= "function" then
    error("durable.open: 'log' must be a function(level, line)", 2)
  end
  streams.check_options(opts.streams)
  check_window("publish_window", opts.publish_window)
  check_window("read_window", opts.read_window)
  if opts.host ~= nil and type(opts.host) ~= "boolean" then
    error("durable.open: 'host' must be a boolean", 2)
  end
  if opts.read_store ~= nil and (type(opts.read_store) ~= "string" or opts.read_store == "") then
    error("durable.open: 'read_store' must be a store URL string", 2)
  end
  if opts.metrics ~= nil and type(opts.metrics) ~= "string" then
    error("durable.open: 'metrics' must be a \"HOST:PORT\" string", 2)
  end
  local principal = principal_of(opts)
  -- every plugin first: a broken one refuses the open before anything starts
  local records = plugin.load_all(opts.plugins or {})
  local mesh, message, code = core.open {
    store = store,
    read_store = opts.read_store,
    quiesce_budget_ms = opts.quiesce_budget_ms,
    request_timeout_ms = opts.request_timeout_ms,
    instruction_budget = opts.instruction_budget,
    log = opts.log,
    streams = opts.streams,
    publish_window = opts.publish_window,
    read_window = opts.read_window,
    principal = principal,
  }
  if not mesh then return nil, message, code end
  local ok, err = pcall(plugin.install, mesh, records)
  if not ok then
    mesh:close()
    error(err, 0)
  end
  if opts.metrics then
    local served, why, why_code = core.serve_metrics(mesh, opts.metrics)
    if not served then
      mesh:close()
      return nil, why, why_code
    end
  end
  if opts.host then
    local hosted, why, why_code = core.host(mesh)
    if not hosted then
      mesh:close()
      return nil, why, why_code
    end
  end
  return mesh
end

---Make this process a host of the mesh's NodeTypes' stream consumers, as
---`durable run` is: the owner of every stream with waiting items and no
---live holder, whose NodeType consumes that family here, is activated (so
---its consumer claims and handles them) now, and again whenever another
---process (or another mesh on the same store) appends.  Without it a
---stream wakes its owner only for appends made through this mesh.  The
---activations happen as the loop runs (completion:wait(), mesh:run_until(),
---mesh:step()).  The same as durable.open{ ..., host = true }.
---@param mesh durable.Mesh
---@return true|nil ok
---@return string? message
---@return string? code
function durable.host(mesh)
  if type(mesh) ~= "userdata" then
    error("durable.host(mesh): expects a mesh from durable.open", 2)
  end
  return core.host(mesh)
end

---Drive `mesh` from luv's loop (`uv` is require "luv"): luv polls the
---mesh's fd and steps it when it is readable, when the mesh's next timer
---is due, or -- while the mesh has work ready (a timeout of 0) -- once per
---turn of luv's loop, and looks again before each of its waits (a luv
---callback that used the mesh may have made a step due).  Everything the
---mesh does -- handlers, completions settling -- then happens inside
---uv.run(); use :next() there, not :wait().  Returns stop(), which closes
---the luv handles (call it before mesh:close(): the fd goes with the mesh).
---@param mesh durable.Mesh
---@param uv table the luv module
---@return fun() stop
function durable.drive_with_luv(mesh, uv)
  if type(mesh) ~= "userdata" then
    error("durable.drive_with_luv(mesh, uv): expects a mesh from durable.open", 2)
  end
  if type(uv) ~= "table" or type(uv.new_poll) ~= "function" then
    error("durable.drive_with_luv(mesh, uv): uv must be the luv module (require \"luv\")", 2)
  end
  local poll = assert(uv.new_poll(mesh:fd()))
  local timer = uv.new_timer()
  local idle = uv.new_idle()
  local prepare = uv.new_prepare()
  local step, idling
  -- 0: step on every turn of luv's loop (an idle handle, so luv still polls
  -- its own I/O in between; a 0 ms timer restarted from its own callback
  -- would spin inside libuv's timer phase); > 0: a timer; -1: the fd alone
  local function arm(ms)
    timer:stop()
    if ms == 0 then
      if not idling then
        idle:start(step)
        idling = true
      end
      return
    end
    if idling then
      idle:stop()
      idling = false
    end
    if ms > 0 then timer:start(ms, 0, step) end
  end
  step = function() arm(mesh:step()) end
  poll:start("r", step)
  prepare:start(function() arm(mesh:timeout()) end)
  local stopped = false
  return function()
    if stopped then return end
    stopped = true
    poll:close()
    timer:close()
    idle:close()
    prepare:close()
  end
end

-- ---- nodes --------------------------------------------------------------------

local function check_path(what, path, level)
  if type(path) ~= "string" then
    error(("%s: path must be a string, not %s"):format(what, type(path)), level + 1)
  end
end

local function get_node(mesh, path)
  check_path("get_node", path, 3)
  return completion.from(mesh, function(cb)
    return prim.mesh.get(mesh, path, function(ok, a, b)
      if not ok and b == "ENOTFOUND" then return cb(true, nil) end
      cb(ok, a, b)
    end)
  end)
end

local function node_write(mesh, write)
  return completion.from(mesh, function(cb)
    return prim.mesh.write(mesh, { write }, cb)
  end)
end

local function put_node(mesh, t)
  if type(t) ~= "table" then error("put_node{ path=, node_type=, content= }: expects a table", 3) end
  check_path("put_node", t.path, 3)
  if t.node_type ~= nil and type(t.node_type) ~= "string" then
    error("put_node: node_type must be a string", 3)
  end
  local content = t.content
  if content == nil then content = {} end
  return node_write(mesh, { kind = "put", path = t.path, node_type = t.node_type, content = content })
end

local function delete_node(mesh, path)
  check_path("delete_node", path, 3)
  return completion.from(mesh, function(cb)
    return prim.mesh.write(mesh, { { kind = "delete", path = path } }, function(ok, a, b)
      if ok then return cb(true, true) end
      cb(ok, a, b)
    end)
  end)
end

local PAGE = 1000

local function query(mesh, q)
  if type(q) ~= "string" then error("query(\"namespace:NS\" | \"path:P\"): expects a string", 3) end
  local c, resolve, fail = completion.new(mesh)
  local all = {}
  local on_page
  local function page(after)
    return prim.mesh.query(mesh, q, after, PAGE, on_page)
  end
  on_page = function(ok, nodes, more)
    if not ok then return fail(nodes, more) end
    for i = 1, #nodes do all[#all + 1] = nodes[i] end
    if not (more and #nodes > 0) then return resolve(all) end
    local ran, queued, message, code = pcall(page, nodes[#nodes].id)
    if not ran then return fail(queued, "EINVAL") end
    if not queued then fail(message, code) end
  end
  local queued, message, code = page(nil) -- misuse raises here, where it was made
  if not queued then fail(message, code) end
  return c
end

local UPDATE_ATTEMPTS = 16

-- Read-modify-write: fn(node) returns the node to write, or nil for no
-- write.  The write replaces only the version that was read (or creates the
-- node when there was none), so a concurrent writer makes it read again and
-- fn run again on the newer node; fn must therefore depend on the node only.
local function update_node(mesh, path, fn)
  check_path("update_node", path, 3)
  if type(fn) ~= "function" then error("update_node(path, fn): fn must be a function", 3) end
  local c, resolve, fail = completion.new(mesh)
  local attempts = 0
  local attempt
  local function on_read(ok, node, code)
    local current
    if ok then
      current = node
    elseif code ~= "ENOTFOUND" then
      return fail(node, code)
    end
    local draft = current or { path = path, node_type = "", content = {} }
    local ran, new = pcall(fn, draft)
    if not ran then return fail(new, "EFAILED") end
    if new == nil then return resolve(current) end
    if type(new) ~= "table" then
      return fail(("update_node: fn must return a node table or nil, not %s"):format(type(new)),
        "EINVAL")
    end
    local content = new.content
    if content == nil then content = {} end
    local write = {
      kind = current and "replace" or "create",
      path = path,
      node_type = new.node_type or (current and current.node_type) or "",
      content = content,
      expected_version = current and current.version or nil,
    }
    local submitted, queued, message, code2 = pcall(prim.mesh.write, mesh, { write },
      function(written, value, why)
        if written then return resolve(value) end
        -- someone wrote (or created, or deleted) meanwhile: read again
        if (why == "ECONFLICT" or why == "EEXIST" or why == "ENOTFOUND")
            and attempts < UPDATE_ATTEMPTS then
          return attempt()
        end
        fail(value, why)
      end)
    if not submitted then return fail(queued, "EINVAL") end
    if not queued then return fail(message, code2) end
  end
  attempt = function()
    attempts = attempts + 1
    local queued, message, code = prim.mesh.get(mesh, path, on_read)
    if not queued then fail(message, code) end
  end
  attempt()
  return c
end

local function mesh_read(mesh, path)
  check_path("read", path, 3)
  return completion.from(mesh, function(cb) return prim.mesh.read(mesh, path, cb) end)
end

---Write the node at t.path (create or replace).  content is a table (or any
---JSON value), or durable.json(text) for raw text; nil means {}.
---@param t { path: string, node_type?: string, content?: any }
---@return durable.Completion # of the written node
function Mesh:put_node(t) return put_node(self, t) end

---The node at `path`.
---@param path string
---@return durable.Completion # of the node, or of nil when there is none
function Mesh:get_node(path) return get_node(self, path) end

---Every node of a query, all pages: "namespace:NS" (the children of NS, in
---id order) or "path:P" (the node at P, if any).
---@param q string
---@return durable.Completion # of an array of nodes
function Mesh:query(q) return query(self, q) end

---Delete the node at `path`.
---@param path string
---@return durable.Completion # of true; fails "ENOTFOUND" when there is none
function Mesh:delete_node(path) return delete_node(self, path) end

---Read-modify-write the node at `path`: fn(node) returns the node to write
---(its content and node_type), or nil to write nothing.  When there is no
---node, fn gets a fresh one ({ path, node_type = "", content = {} }, no
---version) and the write creates it.  A concurrent write makes it read and
---call fn again (up to 16 times).
---@param path string
---@param fn fun(node: durable.Node): durable.Node|nil
---@return durable.Completion # of the written node (or the node read, when fn wrote nothing)
function Mesh:update_node(path, fn) return update_node(self, path, fn) end

---A mesh read: activates the node's hub (so its NodeType starts), then reads
---the node.  A hub that is recycling is never taken for an absent node: the
---read asks the fresh activation once more.
---@param path string
---@return durable.Completion # of the node, or nil when absent; fails "EUNAVAIL"
function Mesh:read(path) return mesh_read(self, path) end

---The hub at `address`: the active hub if there is one, else the node's
---hub (activated now; this runs the loop, so not inside a handler), else --
---no node there, or (a principal's mesh) one it may not read, told apart by
---nothing -- a client hub.  nil, message, code when the store fails.
---@param address string
---@return durable.Hub|nil
---@return string? message
---@return string? code
function Mesh:hub(address)
  if type(address) ~= "string" or address == "" then
    error("mesh:hub(address): address must be a non-empty string", 2)
  end
  local hub = prim.mesh.find(self, address)
  if hub then return hub end
  if core.path_check(address) then -- a path may have a node: activate it
    if core.in_callback() then
      error(("mesh:hub('%s') inside a handler: the hub is not active and activating "
        .. "it would run the loop here; send it a request instead"):format(address), 2)
    end
    local c = completion.from(self, function(cb) return prim.mesh.activate(self, address, cb) end)
    local _, message, code = c:wait()
    if message == nil then -- activated
      hub = prim.mesh.find(self, address)
      if hub then return hub end
    elseif code ~= "ENOTFOUND" and code ~= "EACCES" then
      return nil, message, code
    end
  end
  return prim.mesh.client(self, address)
end

-- ---- grants -------------------------------------------------------------------

local function check_modes(what, mode, optional, level)
  if mode == nil and optional then return 0 end
  local modes = type(mode) == "string" and core.grant_modes(mode)
  if not modes then
    error(("%s: mode must be \"read\", \"write\" or \"read,write\", not %s")
      :format(what, mode == nil and "nil" or ("'" .. tostring(mode) .. "'")), level + 1)
  end
  return modes
end

local function check_grant_args(what, principal, prefix, level)
  if type(principal) ~= "string" then
    error(("%s: principal must be a string, not %s"):format(what, type(principal)), level + 1)
  end
  if type(prefix) ~= "string" then
    error(("%s: prefix must be a path string, not %s"):format(what, type(prefix)), level + 1)
  end
end

---Serve the Prometheus text format (0.0.4) at http://ADDRESS/metrics on
---the mesh's loop until the mesh closes: per stream family this process
---consumes, the lag and the age of the oldest unacknowledged item (read
---from the store at each scrape), this process's counters per family
---(mesh:stats().streams summed), and process figures.  `address` is
---"IPV4:PORT", "[IPV6]:PORT" or "localhost:PORT" (port 0: the system
---picks one; the log's info line says which).  Only that address is bound.
---@param address string
---@return true|nil ok
---@return string? message  a malformed address (EINVAL), one in use (EIO), a second server (EEXIST)
---@return string? code
function Mesh:serve_metrics(address)
  if type(address) ~= "string" then
    error("mesh:serve_metrics(address): expects a \"HOST:PORT\" string", 2)
  end
  return core.serve_metrics(self, address)
end

---Let `principal` read and/or write (`mode`: "read", "write" or
---"read,write") every node whose owner is `prefix` or lies under it,
---segment-wise ("Space" covers "Space/doc", not "Spaces"), satellites
---(streams, items) with their owner; adds to what it had there.  Consuming
---a stream needs both.  The platform's alone: a mesh opened with a
---principal gets a failed completion (EACCES).
---@param principal string
---@param prefix string
---@param mode "read"|"write"|"read,write"
---@return durable.Completion # of true
function Mesh:grant(principal, prefix, mode)
  check_grant_args("mesh:grant", principal, prefix, 2)
  local modes = check_modes("mesh:grant", mode, false, 2)
  return completion.from(self, function(cb)
    return prim.mesh.grant(self, principal, prefix, modes, true, cb)
  end)
end

---Take back what `principal` may do on `prefix`: `mode`, or everything
---when nil.  The platform's alone, as mesh:grant.
---@param principal string
---@param prefix string
---@param mode? "read"|"write"|"read,write"
---@return durable.Completion # of true
function Mesh:revoke(principal, prefix, mode)
  check_grant_args("mesh:revoke", principal, prefix, 2)
  local modes = check_modes("mesh:revoke", mode, true, 2)
  return completion.from(self, function(cb)
    return prim.mesh.grant(self, principal, prefix, modes, false, cb)
  end)
end

---The grants of `principal` (nil: of everyone), by principal then prefix,
---each { principal =, prefix =, mode = "read"|"write"|"read,write" }.  A
---mesh opened with a principal lists its own only (another's: EACCES).
---@param principal? string
---@return durable.Completion # of an array of grants
function Mesh:grants(principal)
  if principal ~= nil and type(principal) ~= "string" then
    error(("mesh:grants(principal): principal must be a string or nil, not %s")
      :format(type(principal)), 2)
  end
  return completion.from(self, function(cb) return prim.mesh.grants(self, principal, cb) end)
end

---Recycle the hub at `address`: it refuses new requests (ShuttingDown),
---waits for its pending work up to the quiesce budget, runs its dispose
---actions and leaves; the next message activates a fresh hub.
---@param address string
---@return durable.Completion # of true once it is dead
function Mesh:recycle(address)
  if type(address) ~= "string" then error("mesh:recycle(address): address must be a string", 2) end
  return completion.from(self, function(cb) return prim.mesh.recycle(self, address, cb) end)
end

---Run the loop until predicate() is true (checked before each turn of the
---loop), at most timeout_ms (nil: no limit).  Outside handlers only.
---@param predicate fun(): boolean
---@param timeout_ms? number
---@return true|nil ok
---@return string? message "timed out after N ms"
function Mesh:run_until(predicate, timeout_ms)
  if type(predicate) ~= "function" then
    error("mesh:run_until(predicate, timeout_ms): predicate must be a function", 2)
  end
  if timeout_ms ~= nil and (type(timeout_ms) ~= "number" or timeout_ms < 0) then
    error("mesh:run_until(predicate, timeout_ms): timeout_ms must be a number >= 0", 2)
  end
  if core.in_callback() then
    error("mesh:run_until() cannot be called inside a handler or a callback", 2)
  end
  return completion.run(self, predicate, timeout_ms)
end

-- ---- hubs ---------------------------------------------------------------------

---Send a request to the hub at `to` (activated if need be).
---@param to string
---@param msg_type string
---@param payload? any JSON-able (nil: null)
---@param timeout_ms? integer default: the mesh's request_timeout_ms
---@return durable.Completion # of the decoded reply (nil for null); fails ENOTFOUND (no node), ESHUTDOWN (recycling: ask again, or this hub is leaving), EFAILED (the handler failed), ETIMEDOUT
function Hub:request(to, msg_type, payload, timeout_ms)
  return completion.from(self.mesh, function(cb)
    return prim.hub.request(self, to, msg_type, payload, timeout_ms, cb)
  end)
end

---@param path string
---@return durable.Completion # of the node or nil
function Hub:get_node(path) return get_node(self.mesh, path) end

---@param t { path: string, node_type?: string, content?: any }
---@return durable.Completion # of the written node
function Hub:put_node(t) return put_node(self.mesh, t) end

---@param path string
---@return durable.Completion # of true
function Hub:delete_node(path) return delete_node(self.mesh, path) end

---@param q string
---@return durable.Completion # of an array of nodes
function Hub:query(q) return query(self.mesh, q) end

---Read-modify-write; see Mesh:update_node.
---@param path string
---@param fn fun(node: durable.Node): durable.Node|nil
---@return durable.Completion
function Hub:update_node(path, fn) return update_node(self.mesh, path, fn) end

---A mesh read; see Mesh:read.
---@param path string
---@return durable.Completion # of the node, or nil when absent; fails "EUNAVAIL"
function Hub:read(path) return mesh_read(self.mesh, path) end

return durable
