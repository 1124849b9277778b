--- durable.transaction: the writes a handler hands back, committed with
--- its acknowledgement.
--
-- A stream item's handler is called as handler(hub, item, tx) and a message
-- handler as handler(hub, msg, tx).  What the handler asks of `tx` is not
-- written at once: once the handler has returned, the runtime commits it in
-- ONE transaction -- for a stream item together with the item's
-- acknowledgement, and only while the consumer still holds the stream's
-- lease; for a message before the reply is sent.  So an item's effect is
-- written exactly once: a consumer that lost its lease writes nothing (the
-- new holder handles the item), and a write the database refuses (the node
-- changed since it was read) writes nothing and the item is handed again,
-- to be decided on what is there now.
--
--   handler = function(hub, item, tx)
--     tx:update_node(hub.address, function(node)
--       node.content.text = (node.content.text or "") .. item.payload.text
--       return node
--     end)
--   end
--
-- update_node reads the node now (a completion of the node it will write:
-- await it, or not) and records a replace at the version read -- the
-- compare-and-set is the database's, in the commit.  Several calls on one
-- path within a transaction see each other: each works on what the one
-- before left, and one write goes out.  put_node, create_node and
-- delete_node record their write as it is.
local completion = require "durable.completion"
local core = require "durable.core"

-- glue: a spent instruction budget stops the user code it calls, not this
require("durable.core").trust()

local M = {}

---@class durable.Transaction
---@field hub durable.Hub
local Tx = {}
Tx.__index = Tx
Tx.__name = "durable.transaction"

---A transaction for a handler running on `hub`; `for_item`: a stream
---item's (it may also append to other streams).
---@param hub durable.Hub
---@param for_item? boolean
---@return durable.Transaction
function M.new(hub, for_item)
  return setmetatable({ hub = hub, _order = {}, _last = {}, _writes = {},
    _pending = {}, _publishes = {}, _for_item = for_item, _open = true }, Tx)
end

local function check_open(tx, what)
  if not tx._open then
    error(("tx:%s: this transaction is over (its handler returned, and what it "
      .. "asked is committed): use the hub's own calls here"):format(what), 3)
  end
end

local function check_path(what, path)
  if type(path) ~= "string" then
    error(("tx:%s: path must be a string, not %s"):format(what, type(path)), 3)
  end
end

-- Record the write for `path` (one per path, in the order paths were first
-- touched) and what the path holds after it.
local function record(tx, path, write, node)
  if tx._writes[path] == nil then tx._order[#tx._order + 1] = path end
  tx._writes[path] = write
  tx._last[path] = completion.done(node)
end

-- Record a write as it is, after whatever this transaction is still doing
-- on `path` (an update whose read has not settled): calls on one path take
-- effect in the order they were made.
local function record_after(tx, path, write, node)
  local before = tx._last[path]
  if before == nil or before.state ~= "pending" then
    return record(tx, path, write, node)
  end
  local after = before:next(function()
    record(tx, path, write, node)
    return node
  end)
  tx._last[path] = after
  tx._pending[#tx._pending + 1] = after
end

-- The node table a write of `t` gives (content kept as given).
local function node_of(t, version)
  return { path = t.path, node_type = t.node_type or "", content = t.content or {},
    version = version }
end

---Put (create or replace) a node when the transaction commits.
---@param t { path: string, node_type?: string, content?: table }
function Tx:put_node(t)
  check_open(self, "put_node")
  if type(t) ~= "table" then error("tx:put_node{ path=, node_type=, content= }: expects a table", 2) end
  check_path("put_node", t.path)
  record_after(self, t.path, { kind = "put", path = t.path, node_type = t.node_type,
    content = t.content or {} }, node_of(t))
end

---Create a node when the transaction commits; a node already there fails
---the commit (EEXIST: for a stream item, it is handed again).
---@param t { path: string, node_type?: string, content?: table }
function Tx:create_node(t)
  check_open(self, "create_node")
  if type(t) ~= "table" then error("tx:create_node{ path=, node_type=, content= }: expects a table", 2) end
  check_path("create_node", t.path)
  record_after(self, t.path, { kind = "create", path = t.path, node_type = t.node_type,
    content = t.content or {} }, node_of(t))
end

---Delete a node when the transaction commits (absent: ENOTFOUND fails it).
---@param path string
function Tx:delete_node(path)
  check_open(self, "delete_node")
  check_path("delete_node", path)
  record_after(self, path, { kind = "delete", path = path }, nil)
end

---Read the node at `path` (or what this transaction left there), give it to
---`fn`, and write what fn returns when the transaction commits -- a replace
---at the version read, or a create when there was none; nil writes nothing.
---fn gets a fresh { path, node_type = "", content = {} } for an absent node.
---Returns a completion of the node as it will be written.
---@param path string
---@param fn fun(node: table): table|nil
---@return durable.Completion
function Tx:update_node(path, fn)
  check_open(self, "update_node")
  check_path("update_node", path)
  if type(fn) ~= "function" then error("tx:update_node(path, fn): fn must be a function", 2) end
  local base = self._last[path]
  local from_store = base == nil
  if from_store then base = self.hub:get_node(path) end
  local after = base:next(function(node)
    local version = node and node.version or nil
    local draft = node or { path = path, node_type = "", content = {} }
    local new = fn(draft)
    if new == nil then return node end
    if type(new) ~= "table" then
      error(("tx:update_node: fn must return a node table or nil, not %s"):format(type(new)), 0)
    end
    local earlier = self._writes[path]
    local write = {
      path = path,
      node_type = new.node_type or draft.node_type or "",
      content = new.content or {},
    }
    if earlier then -- what this transaction wrote before decides the kind
      write.kind = earlier.kind == "delete" and "put" or earlier.kind
      write.expected_version = earlier.expected_version
    elseif version then
      write.kind, write.expected_version = "replace", version
    else
      write.kind = "create"
    end
    record(self, path, write, node_of(write, version))
    return new
  end)
  self._last[path] = after
  self._pending[#self._pending + 1] = after
  return after
end

---Append `payload` to another stream once the transaction commits (a
---stream item's handler only): recorded in the acknowledgement's
---transaction, then appended with an id of its own, so exactly once.
---@param stream { namespace: string, key: string }
---@param payload any
function Tx:publish_durable(stream, payload)
  check_open(self, "publish_durable")
  if not self._for_item then
    error("tx:publish_durable: appends are committed with a stream item's "
      .. "acknowledgement; a message handler publishes with hub:publish_durable", 2)
  end
  if type(stream) ~= "table" then
    error("tx:publish_durable({ namespace=, key= }, payload): stream must be a table", 2)
  end
  local ok, message = core.stream_check(stream.namespace, stream.key)
  if not ok then error(message, 2) end
  if payload == nil then
    error(("A durable stream item for %s@%s needs a payload."):format(stream.namespace,
      stream.key), 2)
  end
  self._publishes[#self._publishes + 1] = { namespace = stream.namespace, key = stream.key,
    payload = payload }
end

---For the runtime (plugin.lua): close the transaction and give a completion
---of { writes, publishes } in order, once every read it made has settled.
---@return durable.Completion
function M.finish(tx)
  tx._open = false
  return completion.all(tx._pending):next(function()
    local writes = {}
    for i, path in ipairs(tx._order) do writes[i] = tx._writes[path] end
    return { writes = writes, publishes = tx._publishes }
  end)
end

M.Transaction = Tx
return M
