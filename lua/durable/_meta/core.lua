---@meta
-- _meta/core.lua: lua-language-server annotations for durable.core, the C half of the Lua
-- module (bindings/lua/).  Never loaded: it documents, for readers and for
-- lua-language-server, what the C functions take and return.  The friendly
-- API (lua/durable/init.lua) is built on these.
--
-- Conventions: a low-level call that takes `cb` calls it exactly once, on
-- the mesh's loop, as cb(true, value...) or cb(false, message, code); the
-- call itself returns true when the work was queued, nil, message, code when
-- the runtime refused it, and raises on misuse (a wrong argument).  A name
-- (path, namespace, key, node type, hub address, message type, query) with
-- a NUL byte is misuse: C would end the string there, so it is refused with
-- "WHAT must not contain a NUL byte (was \"Space/a\0/...\")".
error("Cannot require a meta file")

---@class durable.core
local core = {}

---@type string
core.version = ""
---@type integer  instructions one entry into Lua may run (default budget)
core.default_instruction_budget = 100000000
---The JSON null.
---@type userdata
core.null = nil
---Method tables of the mesh and hub userdata (lua/durable/ adds to them).
core.Mesh = {}
core.Hub = {}
---The callback-taking primitives the friendly API is built on, for the
---runtime's own modules (lua/durable/*.lua) only: they are not methods of
---the mesh and hub objects (`mesh._write`, `hub._publish` are nil), so user
---code cannot go around the checks and completions of lua/durable/.  Each
---takes the mesh (or hub) as its first argument:
---core.primitives.mesh.step(mesh, ms).
core.primitives = { mesh = {}, hub = {} }

---Open a mesh over a store, on a libuv loop the mesh owns.  `principal`
---(a name by core.principal_check; nil: the platform) is the principal the
---mesh acts as: every primitive below checks against its grants.  A bad
---name raises.
---@param opts { principal?: string, store: string, quiesce_budget_ms?: integer, request_timeout_ms?: integer, instruction_budget?: integer, log?: fun(level: "error"|"warn"|"info"|"debug", line: string), streams?: { holder_probe_ms?: integer, reclaim_ms?: integer, backoff_min_ms?: integer, backoff_max_ms?: integer, liveness_ms?: integer } }
---@return durable.Mesh|nil mesh
---@return string? message
---@return string? code
function core.open(opts) end

---Registry references the module holds (specs assert it returns to its
---baseline).
---@return integer
function core.refs() end

---Whether Lua is running inside a call from C (a handler, a callback):
---there, nothing may run the loop.
---@return boolean
function core.in_callback() end

---Meshes open in this Lua state.
---@return integer
function core.meshes() end

---Mark the calling chunk as the module's own glue: once an instruction
---budget is spent, user code is stopped on every instruction but this
---chunk's code may finish (it settles completions).
function core.trust() end

---@param code integer a negative DURABLE_E* code
---@return string name "ENOTFOUND", ...
function core.err_name(code) end

---@param name string "ECONFLICT", ...
---@return integer|nil code the negative DURABLE_E* code; nil for a name the runtime has not
function core.err_code(name) end

---Give coroutine `co` the calling thread's hook (the instruction budget of
---the entry that resumes it).  For the glue that resumes handlers.
---@param co thread
function core.inherit_hook(co) end

---"handler ran away: more than N instructions" when the current entry spent
---its instruction budget, else nil.
---@return string|nil
function core.ran_away() end

---After the glue reported a runaway (its coroutine is dead): the rest of
---the entry gets a fresh budget.
function core.budget_reset() end

---@param path string
---@return true|nil ok
---@return string? message
---@return string? code
function core.path_check(path) end

---true, or nil, message, "EINVAL": the NodeType rules (durable.h's
---durable_node_type_check): 1 to 255 bytes of valid UTF-8, no control
---character (so no newline), no NUL.
---@param name string
---@return true|nil ok
---@return string? message
---@return string? code
function core.node_type_check(name) end

---true, or nil, message, "EINVAL": the principal naming rules (durable.h's
---durable_principal_check): 1 to 128 bytes of valid UTF-8, no control
---character, not "platform" (the platform is no principal: name none).
---@param name string
---@return true|nil ok
---@return string? message
---@return string? code
function core.principal_check(name) end

---"read", "write" or "read,write" as DURABLE_GRANT_* modes (1, 2, 3), or
---nil for anything else.
---@param text string
---@return integer|nil modes
function core.grant_modes(text) end

---Compact JSON text: "$type" first, then keys in byte order; integers stay
---integers.  Raises naming what cannot be encoded ("a.b[2]: cannot encode a
---function").
---@param value any
---@return string
function core.encode(value) end

---@param text string
---@return any value  (nil, message, "EINVAL" when it is not JSON)
---@return string? message
---@return string? code
function core.decode(text) end

---A value encoded as `text` itself (checked now; raises if not JSON).
---@param text string
---@return table
function core.json(text) end

---The text of a core.json value, or nil.
---@return string?
function core.is_json(value) end

---Mark `t` (or a new table) to be written as a JSON array even when empty.
---@param t? table
---@return table
function core.array(t) end

---Make the process a host of the mesh's stream consumers (what `durable
---run` does; durable.host is the friendly name).
---@return true|nil ok
---@return string? message
---@return string? code
function core.host(mesh) end

---Serve the Prometheus text format at http://ADDRESS/metrics on the mesh's
---loop (durable_mesh_serve_metrics); mesh:serve_metrics is the friendly name.
---@param mesh userdata
---@param address string "IPV4:PORT", "[IPV6]:PORT" or "localhost:PORT"
---@return true|nil ok
---@return string? message
---@return string? code "EINVAL" (malformed), "EIO" (cannot bind), "EEXIST"
function core.serve_metrics(mesh, address) end

---Test-only: whether uv_run of the mesh's loop is on the C stack now.  A
---message handler sees true (a turn of the runtime); a completion or a
---reader's on_item sees false (delivered after uv_run returned).
---@return boolean
function core._inside_uv_run(mesh) end

-- ---- the mesh userdata --------------------------------------------------------

---Recycle every hub, run every pending callback, close the store and the
---loop.  Idempotent; raises inside a handler.
function core.Mesh:close() end
---The mesh's counters, and per stream ("NS@KEY") what this process did with
---it since the mesh opened: items appended, handled (acknowledged), failed
---(handler failures), redelivered (handed to a handler here again: a retry,
---a claim again, a replay), dead_lettered, trimmed, batches (a batch
---consumer's acknowledged calls: handled / batches is the mean batch).
---@return { activations: integer, recycles: integer, quiesce_timeouts: integer, messages: integer, read_reprobes: integer, active_hubs: integer, streams: table<string, { appended: integer, handled: integer, failed: integer, redelivered: integer, dead_lettered: integer, trimmed: integer, batches: integer }> }
function core.Mesh:stats() end
---@param level "error"|"warn"|"info"|"debug"
---@param line string
function core.Mesh:log(level, line) end
---@return string the store URL; with a password, libpq's key=value pairs, every secret "***"
function core.Mesh:store_name() end
---@return boolean
function core.Mesh:is_open() end
---The process-level read-issuing hub (the runtime's own: an error on a mesh
---acting as a principal, whose messages from it would pass the read gate).
---@return durable.Hub
function core.Mesh:reads_hub() end
---Run the loop once, waiting at most timeout_ms (nil: no limit) for an
---event.  Raises inside a handler or while the loop runs.
---@param timeout_ms? integer
---@return boolean alive the loop still has something that can happen
function core.primitives.mesh.step(mesh, timeout_ms) end
---Run the loop once without waiting (uv_run NOWAIT) and deliver what it
---gave; for another loop (luv, cqueues, copas) driving the mesh.  Raises
---inside a handler or a callback.
---@return integer timeout_ms how long the caller may wait before the next step: -1 until fd() is readable, 0 now
function core.Mesh:step() end
---The wait before the next step(), as step() returns it; runs nothing.
---Ask again before each wait of your loop: Lua that used the mesh
---meanwhile may have made a step due.
---@return integer timeout_ms
function core.Mesh:timeout() end
---The file descriptor of the mesh's loop (uv_backend_fd): readable when
---the loop has work.  Poll it for reading only; stop before mesh:close().
---@return integer fd
function core.Mesh:fd() end
---@return integer the loop's clock, ms
function core.primitives.mesh.now(mesh) end
---cb(true, node) | cb(false, message, code) ("ENOTFOUND" when absent,
---"EACCES" when the mesh's principal may not read it).  get, query and
---write act as the mesh's principal.
function core.primitives.mesh.get(mesh, path, cb) end
---cb(true, nodes, more) for one page (limit 0..1000, after = last id).
function core.primitives.mesh.query(mesh, query, after, limit, cb) end
---One transaction of { kind = "put"|"create"|"replace"|"delete", path,
---node_type?, content? (a Lua value), expected_version? }; cb(true, node).
function core.primitives.mesh.write(mesh, writes, cb) end
---Make sure NodeType `name` is configured; raises when the name breaks the
---NodeType rules (core.node_type_check).
function core.primitives.mesh.node_type(mesh, name) end
---fn(hub, msg, reply) for each message of msg_type to hubs of node_type.
function core.primitives.mesh.on(mesh, node_type, msg_type, fn) end
---fn(hub, reply) when a hub of node_type activates.
function core.primitives.mesh.on_init(mesh, node_type, fn) end
---fn(hub) when a hub of node_type leaves.
function core.primitives.mesh.on_dispose(mesh, node_type, fn) end
---The client hub at `address`; raises when the address is no path.
---@return durable.Hub|nil
function core.primitives.mesh.client(mesh, address) end
---@return durable.Hub|nil the active hub at address
function core.primitives.mesh.find(mesh, address) end
---cb(true, true) once Started; cb(false, message, "ENOTFOUND") for no node.
function core.primitives.mesh.activate(mesh, address, cb) end
---cb(true, true) once the hub is dead (at once if none is active).
function core.primitives.mesh.recycle(mesh, address, cb) end
---A mesh read: cb(true, node | nil) or cb(false, message, "EUNAVAIL"), or
---"EACCES" when the mesh's principal may not read it (checked before
---anything is activated).
function core.primitives.mesh.read(mesh, path, cb) end
---Grant (add = true) or revoke modes (core.grant_modes; 0 with add false:
---all) of `principal` on `prefix`: cb(true, true).  A mesh acting as a
---principal gets cb(false, "principal '…' may not grant: …", "EACCES").
function core.primitives.mesh.grant(mesh, principal, prefix, modes, add, cb) end
---cb(true, { { principal, prefix, mode = "read"|"write"|"read,write" } })
---for `principal` (nil: everyone); a principal's mesh lists its own only.
function core.primitives.mesh.grants(mesh, principal, cb) end
---@return string|nil principal the principal the mesh acts as; nil: the platform
function core.Mesh:principal() end

-- ---- the hub userdata ---------------------------------------------------------

---cb(true, decoded reply) or cb(false, message, code), as a turn of this
---hub; returns nil, message, "ESHUTDOWN" at once from a leaving hub.
function core.primitives.hub.request(hub, to, msg_type, payload, timeout_ms, cb) end
---@return true|nil ok
---@return string? message
---@return string? code
function core.Hub:post(to, msg_type, payload) end
---Post msg_type/payload to this hub after ms.
---@return true|nil ok
---@return string? message
---@return string? code
function core.Hub:timer(ms, msg_type, payload) end
---Let go of the C hub now (also __close and __gc).
function core.Hub:release() end

-- ---- the reply userdata (what C hands a handler wrapper) -----------------------

---@class durable.Reply
local Reply = {}
---Finish the message with `value` (JSON-encoded; raises if it cannot be).
---@return boolean finished false when it was finished already
function Reply:ok(value) end
---Finish the message as failed with `message` and `code` ("ECONFLICT", ...;
---default, and a name the runtime does not have: "EFAILED").  `at`, for a
---batch consumer's reply: the sequence of the item the batch failed at
---(durable_reply_fail_at); other replies fail as without it.
---@param message? string
---@param code? string
---@param at? integer
---@return boolean
function Reply:fail(message, code, at) end
---@return boolean still unfinished
function Reply:pending() end

-- ---- durable streams (bindings/lua/streams.c; hub.read: reader.c) -----------------

---true, or nil, message, "EINVAL" with durable_stream_check's message for a
---bad stream id ("A durable stream needs a non-empty Namespace without '/' (was '')."
---/ "Durable stream 'NS' needs the owning node's path as Key." / a path rule).
---@param namespace string|nil
---@param key string|nil
---@return true|nil ok
---@return string? message
---@return string? code
function core.stream_check(namespace, key) end

---true, or nil, message, "EINVAL" naming a bad publish id and the rule it
---breaks ("publish id 'a/b' is invalid: '/' is not allowed"): 1 to 128
---bytes, one path segment; given a stream, also its node's path length
---in that stream.
---@param id string|nil
---@param namespace? string
---@param key? string
---@return true|nil ok
---@return string? message
---@return string? code
function core.publish_id_check(id, namespace, key) end

---The stream node's path and its items' namespace; raises on a bad id.
---@param namespace string
---@param key string
---@return string path "{key}/_DurableStream/{namespace}"
---@return string items_namespace "{path}/_DurableStreamItem"
function core.stream_path(namespace, key) end

---true, or nil, message, "EINVAL" when the stream timings break the rule
---between them (backoff_min_ms above backoff_max_ms, both given), the
---message naming both and their values.
---@param streams? { holder_probe_ms?: integer, reclaim_ms?: integer, backoff_min_ms?: integer, backoff_max_ms?: integer, liveness_ms?: integer }
---@return true|nil ok
---@return string? message
---@return string? code
function core.stream_timings_check(streams) end

---Every hub of node_type consumes the family `namespace`.  spec =
---{ key_of = fn(hub) -> key | nil (the hub's address), source_of =
---fn(hub) -> source table | nil, run = fn(hub, item, reply), max_attempts =,
---retention =, batch = { items =, bytes =, wait_ms = } | nil }, each
---function called through the one protected call; with a batch, run =
---fn(hub, items, reply), one reply for the array of items.  That table is
---held for the mesh's life.
function core.primitives.mesh.consume_type(mesh, node_type, namespace, spec) end

---Append `payload_text` (JSON text, kept byte for byte); cb(true,
---sequence) once saved, or cb(false, message, code).  With a publish id:
---an id the stream holds already gives the sequence it got then, and
---nothing is appended.  Raises on a bad stream id, payload or publish id
---(EINVAL).
---@param publish_id? string
function core.primitives.hub.publish(hub, namespace, key, payload_text, cb, publish_id) end

---A reader (durable_stream_read): on_item(item) for each item after `after`, in
---order; on a failure (on_item raised, an unreadable item) it stops and
---calls on_error(message), or logs.  source: a source table or nil.
---@return durable.Subscription
function core.primitives.hub.read(hub, namespace, key, after, source, on_item, on_error) end

---This hub consumes the stream (namespace, key) while it is active; spec =
---{ run = fn(hub, item, reply), max_attempts =, retention =, batch = } (as
---consume_type's); source: a source table or nil.  Held
---until the hub is dead.  Raises on misuse (a family it consumes already).
---@return true|nil ok
---@return string? message
---@return string? code
function core.primitives.hub.consume(hub, namespace, key, spec, source) end
