--- durable.streams: durable streams from Lua.
--
--   hub:publish_durable({ namespace = "DocumentLog", key = "Space/doc" },
--                       { ["$type"] = "DocumentLogAppend", text = "Hi", offset = 0 })
--     :next(function(sequence) ... end)       -- cold: nothing is sent before this
--   hub:publish_durable(stream, payload, { id = "order-42" })  -- idempotent
--
--   config:with_durable_stream_consumer {     -- in a plugin's NodeType function
--     namespace = "DocumentLog",
--     key = function(hub) return hub.address end,
--     handler = function(hub, item) return hub:update_node(...) end,
--   }
--   config:with_durable_stream_consumer {     -- up to 500 items per call
--     namespace = "Payments", batch = 500,
--     handler = function(hub, items, tx) ... end,
--   }
--
--   local sub = hub:read_durable(stream, 0, function(item) ... end)
--   sub:close()
--
-- A durable stream is saved nodes ({key}/_DurableStream/{namespace} and its
-- 12-digit item nodes); the C runtime (src/streams/) orders, leases and
-- acknowledges it.  This file validates what Lua hands over -- misuse
-- raises where it was made, with messages that name the stream id or the
-- payload and the rule it broke -- and builds the small tables
-- bindings/lua/streams.c calls back: a consumer's key and source functions,
-- and `run`, which runs the handler in a coroutine (it may :await()) and
-- finishes the item's reply with its outcome, through plugin.run like every
-- other handler:
--
--   nil (or any value)  done: the item is acknowledged
--   a completion        done when it completes; a failed one fails the item
--   raises              failed: NOT acknowledged, retried after a backoff
--
-- A failed item is logged by the runtime ("Durable stream consumer ...
-- stopped on ... the item was NOT acknowledged ...", with the failure's code
-- and message) and handed over again from the checkpoint; it is never
-- skipped -- unless the consumer opted in to max_attempts: then after N
-- failures in a row it goes to the dead letters ({namespace}.dead).
--
-- With `batch`, the handler gets an array of consecutive items and `tx`
-- commits with the acknowledgement of them all; a failure fails the batch
-- (the runtime then finds the failing item: at once when the raise named
-- it, durable.fail_at, else by handing the items over one at a time).
local core = require "durable.core"
local prim = core.primitives
local completion = require "durable.completion"
local plugin = require "durable.plugin"
local transaction = require "durable.transaction"

-- A cold completion of one call of the runtime: nothing is sent until it
-- is used, then submit(cb) once (seek, trim, delete, retention; a publish
-- keeps its arguments in the completion instead: publish_call).
local function cold_call(mesh, submit)
  return completion.cold(mesh, function() return completion.from(mesh, submit) end)
end

local function publish_call(cb, c)
  return prim.hub.publish(c[1], c[2], c[3], c[4], cb, c[5], c[6])
end

-- `run` below finishes replies: let it finish even once a budget is spent
core.trust()

local M = {}
local Hub, Mesh = core.Hub, core.Mesh

---@class durable.StreamId
---@field namespace string the stream family ("DocumentLog"): non-empty, no '/'
---@field key string the owner's path ("Space/doc")

---@class durable.Item
---@field sequence integer from 1, contiguous per stream
---@field payload any the payload, decoded
---@field raw string the payload text exactly as produced
---@field stream durable.StreamId
---@field appended_at integer? ms since the epoch (nil when the source has none)
---@field path string the node the item was read from

---@class durable.Source
---@field items_namespace string
---@field sequence_of? fun(node: durable.Node): integer|nil
---@field payload_of? fun(node: durable.Node): any
---@field document? string
local Source = { __name = "durable.source" }
Source.__index = Source

---How a batch consumer's batches are formed: up to `items` consecutive
---items (1 to 10000) and `bytes` of payload (0 or absent: no bound; a first
---item larger goes alone); with nothing more read, a batch goes at once,
---unless `wait_ms` (0 to 60000) asks to wait that long for more.
---@class durable.Batch
---@field items integer
---@field bytes? integer
---@field wait_ms? integer

---@class durable.Subscription
---@field close fun(self: durable.Subscription) no item is delivered after it (idempotent)
---@field status fun(self: durable.Subscription): "open"|"closed"|"failed", string?

-- ---- checks ---------------------------------------------------------------

-- namespace, key of a stream id table; raises at `level`, naming the id and
-- the rule, when it is not one.
local function stream_id(what, stream, level)
  if type(stream) ~= "table" then
    error(("%s: the stream must be a table { namespace =, key = }, not %s")
      :format(what, type(stream)), level + 1)
  end
  local ns, key = stream.namespace, stream.key
  if ns ~= nil and type(ns) ~= "string" then
    error(("%s: the stream's namespace must be a string, not %s"):format(what, type(ns)), level + 1)
  end
  if key ~= nil and type(key) ~= "string" then
    error(("%s: the stream's key must be a string, not %s"):format(what, type(key)), level + 1)
  end
  local ok, message = core.stream_check(ns, key)
  if not ok then error(message, level + 1) end
  return ns, key
end

-- The `group` of a stream table (nil: the stream's own), checked; raises at
-- `level`.
local function group_of(what, stream, level)
  local group = stream.group
  if group == nil then return nil end
  if type(group) ~= "string" then
    error(("%s: the group must be a string, not %s"):format(what, type(group)), level + 1)
  end
  local ok, message = core.group_check(group)
  if not ok then error(("%s: %s"):format(what, message), level + 1) end
  return group
end

---Whether `x` is a source (durable.source{...}, durable.document_parts(...)).
---@param x any
---@return boolean
function M.is_source(x)
  return getmetatable(x) == Source
end

local SOURCE_KEYS = { items_namespace = true, sequence_of = true, payload_of = true }

---Where a stream's items are read from, other than its own item nodes: the
---children of `items_namespace`, `sequence_of(node)` (1-based, contiguous;
---nil for "not an item") and `payload_of(node)` (the payload, any JSON
---value; nil: the node's content as stored).  The lease and the checkpoint
---still live on the stream node.
---@param t { items_namespace: string, sequence_of: fun(node: durable.Node): integer|nil, payload_of?: fun(node: durable.Node): any }
---@return durable.Source
function M.source(t)
  if type(t) ~= "table" then
    error("durable.source{ items_namespace =, sequence_of =, payload_of = }: expects a table", 2)
  end
  for k in pairs(t) do
    if not SOURCE_KEYS[k] then error(("durable.source: unknown field '%s'"):format(tostring(k)), 2) end
  end
  if type(t.items_namespace) ~= "string" then
    error("durable.source: items_namespace must be a path (string)", 2)
  end
  local ok, message = core.path_check(t.items_namespace)
  if not ok then error("durable.source: items_namespace: " .. message, 2) end
  if type(t.sequence_of) ~= "function" then
    error("durable.source: sequence_of must be a function(node)", 2)
  end
  if t.payload_of ~= nil and type(t.payload_of) ~= "function" then
    error("durable.source: payload_of must be a function(node) or nil", 2)
  end
  return setmetatable({
    items_namespace = t.items_namespace, sequence_of = t.sequence_of, payload_of = t.payload_of,
  }, Source)
end

---A document's `{document_path}/_DocumentPart/{index:D6}` children as a
---source: part 000000 is sequence 1, 000001 sequence 2, ...; ids that are
---not exactly six digits are not items; the payload is the part's content.
---@param document_path string
---@return durable.Source
function M.document_parts(document_path)
  if type(document_path) ~= "string" then
    error(("durable.document_parts(path): path must be a string, not %s"):format(type(document_path)), 2)
  end
  local ok, message = core.path_check(document_path)
  if not ok then error("durable.document_parts: " .. message, 2) end
  return setmetatable({ document = document_path,
                        items_namespace = document_path .. "/_DocumentPart" }, Source)
end

---The stream node's path and its items' namespace.
---@param stream durable.StreamId
---@return string path "{key}/_DurableStream/{namespace}"
---@return string items_namespace "{path}/_DurableStreamItem"
function M.stream_path(stream)
  local ns, key = stream_id("durable.stream_path", stream, 2)
  return core.stream_path(ns, key)
end

-- ---- the mesh's stream timings -------------------------------------------------

local OPTION_ORDER = { "holder_probe_ms", "reclaim_ms", "backoff_min_ms", "backoff_max_ms",
  "liveness_ms" }
local OPTION_KEYS = {}
for _, k in ipairs(OPTION_ORDER) do OPTION_KEYS[k] = true end

---Check the shape of durable.open's `streams` option (the stream timings,
---given to the mesh at open): a table of known names, each an integer
---number of milliseconds; raises at the caller's caller.  Their defaults
---and the rule between them (backoff_min_ms at most backoff_max_ms) are the
---C layer's (src/include/durable_stream_timings.h), asked here through
---core.stream_timings_check so that a breach raises at the caller's line.
---@param t any
function M.check_options(t)
  if t == nil then return end
  if type(t) ~= "table" then
    error("durable.open: 'streams' must be a table { holder_probe_ms =, reclaim_ms =, "
      .. "backoff_min_ms =, backoff_max_ms =, liveness_ms = }", 3)
  end
  for k, v in pairs(t) do
    if not OPTION_KEYS[k] then
      error(("durable.open: unknown streams option '%s'"):format(tostring(k)), 3)
    end
    if math.type(v) ~= "integer" or v <= 0 or v > 0xffffffff then
      error(("durable.open: streams.%s must be an integer > 0 (milliseconds)"):format(k), 3)
    end
  end
  local ok, message = core.stream_timings_check(t)
  if not ok then error("durable.open: " .. message, 3) end
end

-- ---- producing -----------------------------------------------------------------------

local PUBLISH_KEYS = { id = true, no_owner = true }

---@class durable.PublishOptions
---@field id? string a publish id: 1 to 128 bytes, one path segment (no '/'); a publish whose id the stream holds already completes with the sequence it got then and appends nothing
---@field no_owner? boolean true: no warning when the publish makes a stream whose owner has no node (a stream read by its key alone, an owner made later)

---Append `payload` to the stream; a COLD completion of its sequence:
---nothing is sent until :next() or :wait().  It completes once the item is
---a saved node.  The payload is a table (written with "$type" first, then
---its keys in byte order) or durable.json(text), kept byte for byte.  A bad
---stream id, a missing payload or a bad publish id raises here, with a
---message that names the id and the rule.  With `options.id` the publish
---is idempotent: an id the stream already holds -- from this process or
---any other, however long ago -- gives the sequence it got the first time,
---and nothing is appended; so retry a failed publish with the same id.
---A publish that makes a stream whose owner (the key) has no node logs a
---WARN once (no host consumes it until one is there); `options.no_owner =
---true` says the caller means it.
---@param stream durable.StreamId
---@param payload any
---@param options? durable.PublishOptions
---@return durable.Completion # of the sequence (integer); fails "Appending to durable stream NS@KEY failed: ..."
function Hub:publish_durable(stream, payload, options)
  local ns, key = stream_id("publish_durable", stream, 2)
  local id, no_owner
  if options ~= nil then
    if type(options) ~= "table" then
      error(("publish_durable: options must be a table { id = }, not %s"):format(type(options)), 2)
    end
    for k in pairs(options) do
      if not PUBLISH_KEYS[k] then
        error(("publish_durable: unknown option '%s'"):format(tostring(k)), 2)
      end
    end
    id, no_owner = options.id, options.no_owner
    if no_owner ~= nil and type(no_owner) ~= "boolean" then
      error(("publish_durable: no_owner must be a boolean, not %s"):format(type(no_owner)), 2)
    end
    if id ~= nil and type(id) ~= "string" then
      error(("publish_durable: the publish id must be a string, not %s"):format(type(id)), 2)
    end
    if id ~= nil then
      local ok, message = core.publish_id_check(id, ns, key)
      if not ok then error("publish_durable: " .. message, 2) end
    end
  end
  if payload == nil or payload == core.null then
    error(("A durable stream item for %s@%s needs a payload."):format(ns, key), 2)
  end
  local encoded, text = pcall(core.encode, payload)
  if not encoded then
    error(("publish_durable: the payload for %s@%s: %s")
      :format(ns, key, (tostring(text):gsub("^durable%.encode: ", ""))), 2)
  end
  return completion.cold_call(self.mesh, publish_call, self, ns, key, text, id,
    no_owner == true)
end

---An operator's replay or skip: set the stream's acknowledged checkpoint to
---`sequence` (0 up to its last sequence).  The lease is let go with a new
---epoch, so the holder, in whatever process, claims again and resumes after
---`sequence` (the item it has begun may be handed over once more).  A cold
---completion of the checkpoint it was at; a stream that does not exist
---fails ENOTFOUND, a sequence past its last EINVAL.
---With `group` in the stream table, it is that consumer group's checkpoint
---that moves (the way on for a group behind a trim); the group must exist.
---@param stream { namespace: string, key: string, group?: string }
---@param sequence integer
---@return durable.Completion
function Mesh:seek_durable(stream, sequence)
  local ns, key = stream_id("seek_durable", stream, 2)
  local group = group_of("seek_durable", stream, 2)
  if math.type(sequence) ~= "integer" or sequence < 0 then
    error(("seek_durable: the checkpoint must be an integer >= 0, not %s"):format(tostring(sequence)), 2)
  end
  local mesh = self
  if group then
    return cold_call(mesh, function(cb)
      return prim.mesh.group_seek(mesh, ns, key, group, sequence, cb)
    end)
  end
  return cold_call(mesh, function(cb) return prim.mesh.seek(mesh, ns, key, sequence, cb) end)
end

-- The options of an operator's act that may be forced: nil or { force = }.
local function force_option(what, options)
  if options == nil then return false end
  if type(options) ~= "table" then
    error(("%s: options must be a table { force = }, not %s"):format(what, type(options)), 3)
  end
  for k in pairs(options) do
    if k ~= "force" then error(("%s: unknown option '%s'"):format(what, tostring(k)), 3) end
  end
  return options.force == true
end

---An operator's delete of a consumer group of the stream: its node (lease,
---checkpoint) and failure record go.  Refused (ECONFLICT) while a consumer
---holds it, unless `{ force = true }`, which fences that consumer first.  A
---consumer that still declares the group makes it anew at its next claim,
---at its start.  A cold completion of the checkpoint the group had.
---@param stream { namespace: string, key: string, group: string }
---@param options? { force?: boolean }
---@return durable.Completion
function Mesh:delete_durable_group(stream, options)
  local ns, key = stream_id("delete_durable_group", stream, 2)
  local group = group_of("delete_durable_group", stream, 2)
  if group == nil then error("delete_durable_group: the stream table needs group =", 2) end
  local force = force_option("delete_durable_group", options)
  local mesh = self
  return cold_call(mesh, function(cb)
    return prim.mesh.group_delete(mesh, ns, key, group, force, cb)
  end)
end

---An operator's trim: delete the stream's items 1 .. `through`, which must
---be acknowledged -- by the stream's own consumer and every attached
---consumer group -- unless `{ force = true }` (then the checkpoint moves to
---`through` first, as by seek_durable, and the groups behind are
---detached).  With `group` in the stream table, that group's checkpoint is
---first moved forward to `through` when it is behind (as seek_durable of the
---group; it goes on after `through`), and the trim goes on as without it.
---A reader asking for a trimmed item fails ENOTFOUND, saying so.  A cold
---completion of the number of items deleted.
---@param stream { namespace: string, key: string, group?: string }
---@param through integer
---@param options? { force?: boolean }
---@return durable.Completion
function Mesh:trim_durable(stream, through, options)
  local ns, key = stream_id("trim_durable", stream, 2)
  local group = group_of("trim_durable", stream, 2)
  if math.type(through) ~= "integer" or through < 1 then
    error(("trim_durable: through must be an integer >= 1, not %s"):format(tostring(through)), 2)
  end
  local force = force_option("trim_durable", options)
  local mesh = self
  return cold_call(mesh, function(cb)
    return prim.mesh.trim(mesh, ns, key, through, force, group, cb)
  end)
end

---An operator's delete: the stream's node, all its items and its publish
---ids go, in small transactions; a later publish starts a new stream at
---sequence 1.  Refused (ECONFLICT) while a consumer holds it, unless
---`{ force = true }`, which fences that consumer first.  While it runs,
---publishes to the stream fail ENOTFOUND, saying it is being deleted.  A cold
---completion of the number of items deleted.
---@param stream { namespace: string, key: string }
---@param options? { force?: boolean }
---@return durable.Completion
function Mesh:delete_durable(stream, options)
  local ns, key = stream_id("delete_durable", stream, 2)
  local force = force_option("delete_durable", options)
  local mesh = self
  return cold_call(mesh, function(cb) return prim.mesh.delete(mesh, ns, key, force, cb) end)
end

-- A retention policy's text ("all", "1000", "7d"; an integer is a count):
-- the text, or nil and why it is not one.
local function retention_text(policy)
  if math.type(policy) == "integer" then policy = tostring(policy) end
  if type(policy) ~= "string" then
    return nil, ("must be a string such as \"7d\" or an integer count, not %s"):format(type(policy))
  end
  local ok, message = core.retention_check(policy)
  if not ok then return nil, message end
  return policy
end

---An operator's retention policy for a whole stream family, over what its
---consumers declare, in every process (each reads it back within about
---5 s): "all", a number of acknowledged items to keep ("0": none), or how
---long to keep them ("30s", "12h", "7d").  nil removes it.  A cold
---completion of true once it is stored.
---@param family string
---@param policy string|integer|nil
---@return durable.Completion
function Mesh:set_retention(family, policy)
  if type(family) ~= "string" then
    error(("set_retention: the family must be a string, not %s"):format(type(family)), 2)
  end
  local ok, message = core.stream_check(family, "x") -- a family is a stream namespace
  if not ok then error("set_retention: " .. message, 2) end
  local text
  if policy ~= nil then
    local message
    text, message = retention_text(policy)
    if not text then error(("set_retention: the policy %s"):format(message), 2) end
  end
  local mesh = self
  return cold_call(mesh, function(cb) return prim.mesh.set_retention(mesh, family, text, cb) end)
end

-- ---- reading ---------------------------------------------------------------------------

---A plain, unleased reader: every item after `after_sequence`, in order and
---gap-free (an item ahead of a missing one waits for it; a duplicate is
---dropped), the backlog and then the live tail, until :close().  No
---acknowledgement.  on_item(item) runs as a protected call; when it raises,
---or an item cannot be read (its payload is not JSON), the reader stops at
---that item and says why through on_error(message), or the log.  The mesh's
---close closes it too.
---@param stream durable.StreamId
---@param after_sequence? integer default 0: from the first item
---@param on_item fun(item: durable.Item)
---@param source? durable.Source default: the stream's own items
---@param on_error? fun(message: string)
---@return durable.Subscription
function Hub:read_durable(stream, after_sequence, on_item, source, on_error)
  local ns, key = stream_id("read_durable", stream, 2)
  if after_sequence == nil then after_sequence = 0 end
  if math.type(after_sequence) ~= "integer" or after_sequence < 0 then
    error("read_durable: after_sequence must be an integer >= 0", 2)
  end
  if type(on_item) ~= "function" then error("read_durable: on_item must be a function(item)", 2) end
  if source ~= nil and not M.is_source(source) then
    error("read_durable: source must be made by durable.source{...} or durable.document_parts(path)", 2)
  end
  if on_error ~= nil and type(on_error) ~= "function" then
    error("read_durable: on_error must be a function(message)", 2)
  end
  return prim.hub.read(self, ns, key, after_sequence, source, on_item, on_error)
end

-- ---- consuming ------------------------------------------------------------------------------

local CONSUMER_KEYS = { namespace = true, key = true, handler = true, source = true,
                        max_attempts = true, retention = true, batch = true,
                        group = true, start = true, detach = true }
local DETACH_KEYS = { idle = true, items = true, age = true }

-- A consumer group's `group`, `start` and `detach`; raises at `level`,
-- naming the field and its rule.
local function check_group(what, t, level)
  if t.group == nil then
    if t.start ~= nil or t.detach ~= nil then
      error(("%s: start and detach are a consumer group's (give group =)"):format(what), level + 1)
    end
    return
  end
  if type(t.group) ~= "string" then
    error(("%s: group must be a string, not %s"):format(what, type(t.group)), level + 1)
  end
  local ok, message = core.group_check(t.group)
  if not ok then error(("%s: %s"):format(what, message), level + 1) end
  local start = t.start
  if math.type(start) == "integer" then
    if start < 1 then
      error(("%s: start as a sequence is 1 or more (was %d)"):format(what, start), level + 1)
    end
  elseif start ~= nil then
    if type(start) ~= "string" then
      error(("%s: start must be \"earliest\", \"latest\", a sequence or a UTC time, not %s")
        :format(what, type(start)), level + 1)
    end
    ok, message = core.start_check(start)
    if not ok then error(("%s: %s"):format(what, message), level + 1) end
  end
  local d = t.detach
  if d == nil then return end
  if type(d) ~= "table" then
    error(("%s: detach must be a table { idle =, items =, age = }"):format(what), level + 1)
  end
  for k in pairs(d) do
    if not DETACH_KEYS[k] then
      error(("%s: unknown detach field '%s' (known: idle, items, age)"):format(what, tostring(k)),
        level + 1)
    end
  end
  for _, k in ipairs({ "idle", "age" }) do
    local v = d[k]
    if v ~= nil and not (k == "idle" and v == "never") then
      local good = type(v) == "string" and v ~= "all" and core.retention_check(v)
        and not v:match("^%d+$")
      if not good then
        error(("%s: detach.%s must be a duration such as \"7d\" or \"12h\"%s (was %s)")
          :format(what, k, k == "idle" and ", or \"never\"" or "", tostring(v)), level + 1)
      end
    end
  end
  if d.items ~= nil and (math.type(d.items) ~= "integer" or d.items < 1) then
    error(("%s: detach.items must be an integer >= 1 (was %s)"):format(what, tostring(d.items)),
      level + 1)
  end
end

-- The limits of a batch (durable.h: DURABLE_BATCH_ITEMS_MAX,
-- DURABLE_BATCH_WAIT_MAX_MS).
local BATCH_ITEMS_MAX, BATCH_WAIT_MAX_MS = 10000, 60000
local BATCH_KEYS = { items = true, bytes = true, wait_ms = true }

-- A consumer's `batch` (an integer: the items per call; or { items =,
-- bytes =, wait_ms = }) as the table C reads, or nil for none; raises at
-- `level`, naming the field and its rule.
local function batch_of(what, b, level)
  if b == nil then return nil end
  if math.type(b) == "integer" then b = { items = b } end
  if type(b) ~= "table" then
    error(("%s: batch must be an integer (items per call) or a table { items =, bytes =, "
      .. "wait_ms = }, not %s"):format(what, type(b) == "number" and tostring(b) or type(b)),
      level + 1)
  end
  for k in pairs(b) do
    if not BATCH_KEYS[k] then
      error(("%s: unknown batch field '%s' (known: items, bytes, wait_ms)")
        :format(what, tostring(k)), level + 1)
    end
  end
  local items, bytes, wait_ms = b.items, b.bytes or 0, b.wait_ms or 0
  if math.type(items) ~= "integer" or items < 1 or items > BATCH_ITEMS_MAX then
    error(("%s: batch items must be an integer from 1 to %d (was %s)")
      :format(what, BATCH_ITEMS_MAX, tostring(items)), level + 1)
  end
  if math.type(bytes) ~= "integer" or bytes < 0 then
    error(("%s: batch bytes must be an integer >= 0, 0 for no bound (was %s)")
      :format(what, tostring(bytes)), level + 1)
  end
  if math.type(wait_ms) ~= "integer" or wait_ms < 0 or wait_ms > BATCH_WAIT_MAX_MS then
    error(("%s: batch wait_ms must be an integer from 0 to %d (was %s)")
      :format(what, BATCH_WAIT_MAX_MS, tostring(wait_ms)), level + 1)
  end
  return { items = items, bytes = bytes, wait_ms = wait_ms }
end

-- The fields of a consumer declaration; raises at `level`.
local function check_consumer(what, t, level)
  if type(t) ~= "table" then
    error(("%s{ namespace =, key =, handler = [, source =] }: expects a table"):format(what), level + 1)
  end
  for k in pairs(t) do
    if not CONSUMER_KEYS[k] then
      error(("%s: unknown field '%s' (known: namespace, key, handler, source, max_attempts, "
        .. "retention, batch, group, start, detach)")
        :format(what, tostring(k)), level + 1)
    end
  end
  if t.namespace ~= nil and type(t.namespace) ~= "string" then
    error(("%s: namespace must be a string, not %s"):format(what, type(t.namespace)), level + 1)
  end
  local ok, message = core.stream_check(t.namespace, "x")
  if not ok then error(message, level + 1) end
  if t.key ~= nil and type(t.key) ~= "function" then
    error(("%s: key must be a function(hub) returning the owner's path"):format(what), level + 1)
  end
  if type(t.handler) ~= "function" then
    error(("%s: handler must be a function(hub, %s)")
      :format(what, t.batch ~= nil and "items" or "item"), level + 1)
  end
  if t.source ~= nil and type(t.source) ~= "function" then
    error(("%s: source must be a function(hub) returning a durable.source"):format(what), level + 1)
  end
  local n = t.max_attempts
  if n ~= nil and (math.type(n) ~= "integer" or n < 1 or n > 1000000) then
    error(("%s: max_attempts must be an integer from 1 to 1000000 (was %s)")
      :format(what, tostring(n)), level + 1)
  end
  if t.retention ~= nil then
    local ok, message = retention_text(t.retention)
    if not ok then error(("%s: retention %s"):format(what, message), level + 1) end
  end
  check_group(what, t, level + 1)
  return t.namespace, batch_of(what, t.batch, level + 1)
end

-- fn(hub, item, reply), or with a batch fn(hub, items, reply): the handler,
-- run by the one finisher of every handler (plugin.run: a coroutine, then
-- the reply finished with its outcome -- with a batch, for all its items;
-- what it returns is not a payload, so only done or failed counts).  A
-- raise's traceback, many lines long, is logged at warn once per item and
-- hub; its retries log it at debug, the consumer's one line per attempt
-- saying the rest.
local function runner(ns, handler, batch)
  local warned_hub, warned_first
  local function what(hub, first, last)
    return function()
      local level = (warned_hub == hub.address and warned_first == first) and "debug" or nil
      warned_hub, warned_first = hub.address, first
      if first == last then
        return ("the '%s' handler at hub '%s' on item %d"):format(ns, hub.address, first), level
      end
      return ("the '%s' handler at hub '%s' on items %d..%d"):format(ns, hub.address, first, last), level
    end
  end
  if batch then
    return function(hub, items, reply)
      local first, last = items[1].sequence, items[#items].sequence
      plugin.run(reply, hub, what(hub, first, last), false, transaction.new(hub, true), handler, hub,
        items)
    end
  end
  return function(hub, item, reply)
    local sequence = item.sequence
    plugin.run(reply, hub, what(hub, sequence, sequence), false, transaction.new(hub, true), handler,
      hub, item)
  end
end

local function key_checked(ns, key)
  if type(key) ~= "string" then
    error(("the key function of the '%s' consumer must return the owner's path (a string), not %s")
      :format(ns, type(key)), 0)
  end
  if key:find("\0", 1, true) then
    error(("the key function of the '%s' consumer returned a key with a NUL byte (%q)")
      :format(ns, key), 0)
  end
  return key
end

local function source_checked(ns, source)
  if source ~= nil and not M.is_source(source) then
    error(("the source function of the '%s' consumer must return durable.source{...} or "
      .. "durable.document_parts(path), not %s"):format(ns, type(source)), 0)
  end
  return source
end

---Every hub of this NodeType consumes the stream `key(hub)` of the family
---`namespace` (default key: the hub's own address), with `handler(hub,
---item)` on the hub's loop, one item at a time, in order, each acknowledged
---once the handler is done (it returns nil, or a completion; a raise or a
---failed completion is a failure: the item is retried, never skipped).
---Dormant until the stream exists.  `source(hub)` may name where the items
---are (durable.document_parts(hub.address), ...).  `max_attempts = N` (opt
---in): an item that failed N times in a row is moved to the dead-letter
---stream `{namespace}.dead` of the same owner, with its acknowledgement,
---and the stream goes on.  `retention` (default "all") is how long
---acknowledged items are kept: a count ("1000", or 0: none) or a duration
---("30s", "12h", "7d"); an operator's mesh:set_retention for the family
---wins.  `batch = N` (or { items = N, bytes =, wait_ms = }, see
---durable.Batch): the handler is called as handler(hub, items, tx) with up
---to N consecutive items, in order, and what `tx` records commits in one
---transaction with the acknowledgement of them all; a failure fails the
---whole batch -- durable.fail_at(item, message) names the item, so the
---items before it are acknowledged and it alone is retried (else the
---items are handed over one at a time to find it).  Several families per
---NodeType are fine; the same family twice is not.
---@param t { namespace: string, key?: fun(hub: durable.Hub): string, handler: (fun(hub: durable.Hub, item: durable.Item, tx: durable.Transaction): durable.Completion|nil)|(fun(hub: durable.Hub, items: durable.Item[], tx: durable.Transaction): durable.Completion|nil), source?: fun(hub: durable.Hub): durable.Source|nil, max_attempts?: integer, retention?: string|integer, batch?: integer|durable.Batch }
function plugin.methods.with_durable_stream_consumer(config, t)
  local rec = plugin.record(config)
  local ns, batch = check_consumer("config:with_durable_stream_consumer", t, 2)
  rec.stream_families = rec.stream_families or {}
  local consumed = t.group and (ns .. "/" .. t.group) or ns
  if rec.stream_families[consumed] then
    error(("NodeType '%s' already consumes the '%s' stream family%s")
      :format(rec.name, ns, t.group and (" in group " .. t.group) or ""), 2)
  end
  rec.stream_families[consumed] = true
  local key_fn, source_fn = t.key, t.source
  local spec = {
    key_of = key_fn and function(hub) return key_checked(ns, key_fn(hub)) end,
    source_of = source_fn and function(hub) return source_checked(ns, source_fn(hub)) end,
    run = runner(ns, t.handler, batch),
    max_attempts = t.max_attempts,
    retention = t.retention and retention_text(t.retention),
    batch = batch,
    group = t.group, start = t.start, detach = t.detach,
  }
  rec.installs[#rec.installs + 1] = function(mesh, r)
    prim.mesh.consume_type(mesh, r.name, ns, spec)
  end
end

---This hub (a client hub, say) consumes a stream for as long as it is
---active; the fields are those of config:with_durable_stream_consumer, and
---key and source are called once, now.  Raises on misuse (a bad field, a
---family this hub consumes already); nil, message, code when the hub
---cannot consume (it is leaving).
---@param t { namespace: string, key?: fun(hub: durable.Hub): string, handler: (fun(hub: durable.Hub, item: durable.Item, tx: durable.Transaction): durable.Completion|nil)|(fun(hub: durable.Hub, items: durable.Item[], tx: durable.Transaction): durable.Completion|nil), source?: fun(hub: durable.Hub): durable.Source|nil, max_attempts?: integer, retention?: string|integer, batch?: integer|durable.Batch }
---@return true|nil ok
---@return string? message
---@return string? code
function Hub:consume(t)
  local ns, batch = check_consumer("hub:consume", t, 2)
  local key = self.address
  if t.key then
    local ok, k = pcall(t.key, self)
    if not ok then error(("hub:consume: the key function failed: %s"):format(k), 2) end
    local good, why = pcall(key_checked, ns, k)
    if not good then error("hub:consume: " .. why, 2) end
    key = k
  end
  local check, message = core.stream_check(ns, key)
  if not check then error(message, 2) end
  local source
  if t.source then
    local ok, s = pcall(t.source, self)
    if not ok then error(("hub:consume: the source function failed: %s"):format(s), 2) end
    local good, why = pcall(source_checked, ns, s)
    if not good then error("hub:consume: " .. why, 2) end
    source = s
  end
  return prim.hub.consume(self, ns, key, { run = runner(ns, t.handler, batch),
    max_attempts = t.max_attempts, retention = t.retention and retention_text(t.retention),
    batch = batch, group = t.group, start = t.start, detach = t.detach }, source)
end

M.Mesh, M.Hub = Mesh, Hub
return M
