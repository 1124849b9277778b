--- durable.plugin: loading plugin files and configuring NodeTypes from them.
--
-- A plugin file returns
--
--   return {
--     node_types = {
--       Document = function(config)
--         config:on("append", function(hub, msg) ... end)
--         config:on_init(function(hub) ... end)
--         config:on_dispose(function(hub) ... end)
--       end,
--     },
--   }
--
-- Loading happens in two phases so that nothing starts half-configured:
--
--   load(file)   run the file and every NodeType function against a
--                recording config; any mistake raises "FILE:LINE: reason"
--   install()    only once every plugin loaded: register what was recorded
--                with the open mesh (durable.core)
--
-- durable.open runs all the loads before it opens the mesh, so a broken
-- plugin costs nothing: no store is opened, no hub exists.
--
-- A config is strict: reading or assigning a field it does not have is an
-- error at that line (a typo must not silently configure nothing).  Later
-- layers extend it: `plugin.methods.NAME = function(config, ...)` adds a
-- config method (the durable-streams layer adds with_durable_stream_consumer
-- here), `plugin.record(config)` gives the record it fills, and a function
-- appended to `record.installs` runs at install time as fn(mesh, record).
local completion = require "durable.completion"
local transaction = require "durable.transaction"

-- run() below settles replies: let it finish even once a budget is spent
require("durable.core").trust()
local prim = require("durable.core").primitives

local M = {}

---Config methods, by name.  The extension point for later layers.
---@type table<string, function>
M.methods = {}

---Keys a plugin table may have at its top level.
---@type table<string, boolean>
M.plugin_keys = { node_types = true }

---@class durable.NodeTypeRecord
---@field name string
---@field file string
---@field line integer
---@field handlers { msg_type: string, fn: function }[]
---@field by_msg_type table<string, function>
---@field inits function[]
---@field disposes function[]
---@field installs fun(mesh: durable.Mesh, record: durable.NodeTypeRecord)[]

local records = setmetatable({}, { __mode = "k" }) -- config -> record

---The record a config fills (for extensions of the config).
---@param config durable.Config
---@return durable.NodeTypeRecord
function M.record(config)
  return records[config] or error("not a NodeType configuration", 2)
end

---@class durable.Config
---@field name string the NodeType's name (read-only)
local config_mt = {}

config_mt.__index = function(config, key)
  if key == "name" then return records[config].name end
  local method = M.methods[key]
  if method then return method end
  error(("NodeType '%s' configuration has no field '%s'"):format(records[config].name,
    tostring(key)), 2)
end

config_mt.__newindex = function(config, key)
  error(("cannot set '%s' on the NodeType '%s' configuration: unknown field (use "
    .. "config:on, config:on_init, config:on_dispose)"):format(tostring(key),
      records[config].name), 2)
end

config_mt.__tostring = function(config)
  return ("durable.config(%s)"):format(records[config].name)
end

---Handle messages of type `msg_type`: fn(hub, msg) runs in a coroutine
---(completion:await() suspends it) and returns nil (done, the reply is
---null), a value (the reply), a completion (done when it is), or raises
---(the sender gets the failure: EFAILED with the message, or the code of a
---raised { code =, message = } / durable.fail(code, message)).
---@param msg_type string
---@param fn fun(hub: durable.Hub, msg: durable.Message): any
function M.methods.on(config, msg_type, fn)
  local rec = M.record(config)
  if type(msg_type) ~= "string" or msg_type == "" then
    error("config:on(msg_type, fn): msg_type must be a non-empty string", 2)
  end
  if type(fn) ~= "function" then
    error(("config:on('%s', fn): fn must be a function"):format(msg_type), 2)
  end
  if msg_type == "ping" then
    error("config:on('ping', ...): every hub answers ping; it cannot be handled", 2)
  end
  if msg_type:sub(1, 8) == "durable." then
    error(("config:on('%s', ...): message types beginning with 'durable.' belong to the runtime"):format(msg_type), 2)
  end
  if rec.by_msg_type[msg_type] then
    error(("NodeType '%s' already handles '%s'"):format(rec.name, msg_type), 2)
  end
  rec.by_msg_type[msg_type] = fn
  rec.handlers[#rec.handlers + 1] = { msg_type = msg_type, fn = fn }
end

---Run fn(hub) when a hub of this NodeType activates, before its first
---message; it runs in a coroutine (it may :await()), may return a
---completion (activation waits for it) or raise (the activation fails, and
---so do the messages that caused it).
---@param fn fun(hub: durable.Hub): any
function M.methods.on_init(config, fn)
  local rec = M.record(config)
  if type(fn) ~= "function" then error("config:on_init(fn): fn must be a function", 2) end
  rec.inits[#rec.inits + 1] = fn
end

---Run fn(hub) when a hub of this NodeType leaves (after it quiesced).  It
---cannot finish later (the hub is gone): a plain call, where :await()
---raises; start work with :next() if it must.
---@param fn fun(hub: durable.Hub)
function M.methods.on_dispose(config, fn)
  local rec = M.record(config)
  if type(fn) ~= "function" then error("config:on_dispose(fn): fn must be a function", 2) end
  rec.disposes[#rec.disposes + 1] = fn
end

-- ---- loading ----------------------------------------------------------------

local function escape(s)
  return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"))
end

-- "FILE:LINE: reason" for a refusal; a reason that already names a place in
-- the file keeps its own line.
local function refusal(file, line, reason)
  reason = tostring(reason)
  local at, rest = reason:match("^" .. escape(file) .. ":(%d+): (.*)$")
  if at then
    line, reason = tonumber(at), rest
  end
  return ("durable.open: plugin %s:%s: %s"):format(file, line or "?", reason)
end

-- The first line of the file where `word = ` (or ["word"] =) appears.
local function line_of(file, word, fallback)
  local f = io.open(file, "r")
  if not f then return fallback end
  local n = 0
  local w = escape(tostring(word))
  for line in f:lines() do
    n = n + 1
    if line:find("%f[%w_]" .. w .. "%f[^%w_]%s*=") or line:find("%[%s*[\"']" .. w .. "[\"']%s*%]%s*=") then
      f:close()
      return n
    end
  end
  f:close()
  return fallback
end

-- Run fn(...) in a coroutine of its own: its errors keep their stack (to
-- find the line in `file`), and a return hook notes the line the file's
-- main chunk returned from.  -> true, result, return_line | false, message,
-- line
local function run_in(file, fn, ...)
  local source = "@" .. file
  local co = coroutine.create(fn)
  local return_line
  debug.sethook(co, function()
    local info = debug.getinfo(2, "Sl")
    if info and info.source == source and info.what == "main" then
      return_line = info.currentline
    end
  end, "r")
  local ok, result = coroutine.resume(co, ...)
  if not ok then
    local line
    for level = 0, 200 do
      local info = debug.getinfo(co, level, "Sl")
      if not info then break end
      if info.source == source and info.currentline > 0 then
        line = info.currentline
        break
      end
    end
    return false, result, line
  end
  if coroutine.status(co) ~= "dead" then
    return false, "a plugin may not yield", return_line
  end
  return true, result, return_line
end

-- What a plugin's code sees as its globals: the process's, but with an
-- os.exit that is refused -- it would end the whole host, every hub and
-- every lease held, without a word.  A call raises instead, naming where
-- it was made: at load the plugin is refused, in a handler the item fails.
-- (Reads and writes of other globals go to the process's own table.)
local plugin_os = setmetatable({
  exit = function()
    local info = debug.getinfo(2, "Sl")
    local where = info and ("%s:%d"):format(info.short_src, info.currentline) or "?"
    error(("os.exit is refused in a plugin (called at %s): a plugin cannot end the host; "
      .. "raise an error to fail the item, or the load"):format(where), 0)
  end,
}, { __index = os })
local plugin_env = setmetatable({ os = plugin_os }, { __index = _G, __newindex = _G })

---Load a plugin file: run it and the NodeType functions it returns against
---recording configs.  Raises "durable.open: plugin FILE:LINE: reason" on any
---mistake (syntax, runtime error, wrong return shape, unknown field).
---@param file string
---@param seen? table<string, durable.NodeTypeRecord> NodeTypes of other files
---@return durable.NodeTypeRecord[]
function M.load(file, seen)
  if type(file) ~= "string" then
    error(("durable.open: plugins must be file names, not %s"):format(type(file)), 0)
  end
  local kind = require("durable.core").file_kind(file)
  if kind and kind ~= "file" then
    error(("durable.open: plugin %s is not a regular file (a %s)"):format(file, kind), 0)
  end
  local chunk, err = loadfile(file, "t", plugin_env)
  if not chunk then
    if err:find("^cannot open") then error("durable.open: plugin " .. err, 0) end
    error(refusal(file, nil, err), 0)
  end
  local ok, spec, line = run_in(file, chunk)
  if not ok then error(refusal(file, line, spec), 0) end
  if type(spec) ~= "table" then
    error(refusal(file, line, ("a plugin must return a table { node_types = { [name] = "
      .. "function(config) ... end } }, not %s"):format(type(spec))), 0)
  end
  for key in pairs(spec) do
    if not M.plugin_keys[key] then
      error(refusal(file, line_of(file, key, line),
        ("unknown key '%s' in the plugin table (known: node_types)"):format(tostring(key))), 0)
    end
  end
  local node_types = spec.node_types
  if type(node_types) ~= "table" then
    error(refusal(file, line_of(file, "node_types", line),
      ("node_types must be a table of NodeType functions, not %s"):format(type(node_types))), 0)
  end
  local names = {}
  for name, fn in pairs(node_types) do
    if type(name) ~= "string" then
      error(refusal(file, line, ("node_types keys must be NodeType names (strings), not %s")
        :format(type(name))), 0)
    end
    local named, why = require("durable.core").node_type_check(name)
    if not named then error(refusal(file, line_of(file, name, line), why), 0) end
    if type(fn) ~= "function" then
      error(refusal(file, line_of(file, name, line),
        ("node_types.%s must be a function(config), not %s"):format(name, type(fn))), 0)
    end
    names[#names + 1] = name
  end
  table.sort(names) -- a fixed order: registration does not depend on pairs()
  local out = {}
  seen = seen or {}
  for _, name in ipairs(names) do
    local fn = node_types[name]
    local defined = debug.getinfo(fn, "S").linedefined
    if seen[name] then
      error(refusal(file, defined, ("NodeType '%s' is already configured by %s"):format(name,
        seen[name].file)), 0)
    end
    local rec = {
      name = name, file = file, line = defined,
      handlers = {}, by_msg_type = {}, inits = {}, disposes = {}, installs = {},
    }
    local config = setmetatable({}, config_mt)
    records[config] = rec
    local ran, why, at = run_in(file, fn, config)
    if not ran then error(refusal(file, at or defined, why), 0) end
    seen[name] = rec
    out[#out + 1] = rec
  end
  return out
end

---Load every file; raises at the first broken one.
---@param files string[]
---@return durable.NodeTypeRecord[]
function M.load_all(files)
  if type(files) ~= "table" then
    error("durable.open: plugins must be a list of file names", 0)
  end
  local all, seen = {}, {}
  for i = 1, #files do
    for _, rec in ipairs(M.load(files[i], seen)) do all[#all + 1] = rec end
  end
  return all
end

-- ---- installing -------------------------------------------------------------

---The one finisher of every handler (messages, init steps, stream items):
---run fn(...) in a coroutine (completion.spawn: :await() suspends it) and
---finish `reply` with its outcome once it is known -- ok with what fn
---returned (`with_value`: as the reply's payload; else nothing), once a
---returned completion is ok; failed with the message and code of a raise
---or of a failed completion, and with the item it named (`at`: a batch
---consumer's durable.fail_at or error{ at = }).  With a transaction `tx`
---(given to fn as its last argument), what it recorded is committed with
---the finish: for stream items with their acknowledgement, for a message
---before the reply (durable/transaction.lua).  A raise is logged, with its traceback, as
---"[Lua] WHAT failed: ...", `what()` naming the handler (made only then; a
---second value "debug" logs it at debug instead of warn).
---@param reply userdata the C reply (hub.c)
---@param hub durable.Hub whose mesh logs
---@param what fun(): string
---@param with_value boolean
---@param tx durable.Transaction|nil
---@param fn function
function M.run(reply, hub, what, with_value, tx, fn, ...)
  local mesh = hub.mesh
  local args = table.pack(...)
  if tx then -- the handler's last argument
    args.n = args.n + 1
    args[args.n] = tx
  end
  local outcome = completion.spawn(function(_, _, traceback)
    local text, level = what()
    pcall(mesh.log, mesh, level or "warn", ("[Lua] %s failed: %s"):format(text, traceback))
  end, fn, table.unpack(args, 1, args.n))
  if tx then
    outcome = outcome:next(function(value)
      return transaction.finish(tx):next(function(t)
        return { value = value, writes = t.writes, publishes = t.publishes }
      end)
    end)
  end
  completion.subscribe(outcome, function(c)
    if c.state ~= "ok" then
      reply:fail(c.message, c.code, c.at)
      return
    end
    local value, writes, publishes = c.value, nil, nil
    if tx then value, writes, publishes = c.value.value, c.value.writes, c.value.publishes end
    if not with_value then value = nil end
    -- a value JSON cannot hold, or a write that is no write, raises: the
    -- reply fails, saying why
    local ok, err
    if (writes and #writes > 0) or (publishes and #publishes > 0) then
      ok, err = pcall(reply.commit, reply, writes, value, publishes)
    else
      ok, err = pcall(reply.ok, reply, value)
    end
    if not ok then reply:fail(err) end
  end)
end

---The function C calls for a message: fn(hub, msg, tx) finished through
---reply, tx's writes committed before the reply.
---@param fn fun(hub: durable.Hub, msg: durable.Message, tx: durable.Transaction): any
---@param node_type? string for the log line of a raise
---@return fun(hub: durable.Hub, msg: durable.Message, reply: userdata)
function M.handler(fn, node_type)
  return function(hub, msg, reply)
    local msg_type = msg.type -- the handler may change msg
    M.run(reply, hub, function()
      return ("handler for '%s' of NodeType '%s' at hub '%s'")
        :format(msg_type, node_type or hub.node_type, hub.address)
    end, true, transaction.new(hub), fn, hub, msg)
  end
end

---The function C calls for an init step.
---@param fn fun(hub: durable.Hub): any
---@param node_type? string for the log line of a raise
function M.step(fn, node_type)
  return function(hub, reply)
    M.run(reply, hub, function()
      return ("init step of NodeType '%s' at hub '%s'"):format(node_type or hub.node_type,
        hub.address)
    end, true, nil, fn, hub)
  end
end

---Register what was recorded with an open mesh.
---@param mesh durable.Mesh
---@param recs durable.NodeTypeRecord[]
function M.install(mesh, recs)
  for _, rec in ipairs(recs) do
    prim.mesh.node_type(mesh, rec.name)
    for _, h in ipairs(rec.handlers) do
      prim.mesh.on(mesh, rec.name, h.msg_type, M.handler(h.fn, rec.name))
    end
    for _, fn in ipairs(rec.inits) do prim.mesh.on_init(mesh, rec.name, M.step(fn, rec.name)) end
    for _, fn in ipairs(rec.disposes) do prim.mesh.on_dispose(mesh, rec.name, fn) end
    for _, install in ipairs(rec.installs) do install(mesh, rec) end
  end
end

return M
