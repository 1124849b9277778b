--- durable.completion: the one way anything finishes later.
--
-- A completion is a value that arrives later, or a failure (a message and
-- a code such as "ENOTFOUND").  Nothing blocks the loop.  Three ways to get
-- at the outcome, one per place:
--
--   inside a handler    local v, message, code = c:await()
--                       (the handler runs in a coroutine: await suspends it
--                       and the loop goes on; it resumes once c settles)
--   in a callback       c:next(function(v) ... end)  -> a new completion
--   in a script, spec   local v, message, code = c:wait()  (runs the loop)
--
--   hub:request(...) --> completion --:next(fn)--> completion --:wait()--> value
--                         (settled by a C callback, on the loop)
--
-- Settling runs the continuations at once, in the order they were added
-- (no extra tick: the C runtime already made the callback a loop turn).  A
-- continuation that raises fails the completion it produced; it never
-- escapes into the C callback that settled the first one.  A handler's
-- coroutine is resumed from such a continuation, so the part of a handler
-- after an await runs inside that loop turn, and a raise there fails the
-- handler's message, never the C callback.
--
-- A failure keeps its code: a raise of { code = "ECONFLICT", message = ... }
-- (or durable.fail(code, message), which raises that) fails with that code;
-- a plain string raise is "EFAILED", as is a code the runtime has no name
-- for (the message is kept).  A failure may also name the item of a batch
-- it stopped at: a raise of { ..., at = sequence } (durable.fail_at) keeps
-- `at` on the failed completion, through every :next() and adoption, so
-- that a batch consumer's reply fails at that item.
--
-- A cold completion (completion.cold) does nothing until the first :next(),
-- :await() or :wait(); durable streams' publish uses that so that building a
-- publish does not append anything yet.  One that is collected without ever
-- being started -- hub:publish_durable(...) written as a statement, which
-- sends nothing -- logs a warning naming the line that made it.
--
-- Errors follow luv: misuse raises (a wrong argument, :wait() inside a
-- handler, :await() outside one); an operational failure is a failed
-- completion, and :wait() / :await() return nil, message, code for it.
local core = require "durable.core"
local prim = core.primitives -- the C primitives, for the runtime's modules only

-- This glue settles completions: a spent instruction budget stops the user
-- code it calls, never the glue itself (see bindings/lua/core.c).
core.trust()

local M = {}

---@class durable.Completion
---@field state "pending"|"ok"|"failed"
---@field value any        the value once ok
---@field message string?  the failure's message
---@field code string?     the failure's code ("EFAILED", "ENOTFOUND", "ECONFLICT", ...)
---@field at integer?      the sequence of the batch's item the failure named (durable.fail_at)
---@field traceback string? where a continuation or a handler raised, when one did
local Completion = {}
Completion.__index = Completion
Completion.__name = "durable.completion"

-- A cold completion has the same methods, and a finalizer that warns when
-- it is collected unstarted (only cold ones pay for finalization).
local Cold = {}
for k, v in pairs(Completion) do Cold[k] = v end

local PENDING, OK, FAILED = "pending", "ok", "failed"

---@class durable.Failure
---@field code string
---@field message string
---@field at integer? the sequence of the item of a batch that failed
local Failure = { __name = "durable.failure" }
function Failure:__tostring() return self.code .. ": " .. self.message end

-- The message, the code and the item a raised value fails with: { code =,
-- message =, at = } keeps its code (EFAILED for a name the runtime does not
-- have) and an integer `at`; anything else is EFAILED with the value as
-- text, naming no item.
local function failure_of(e)
  if type(e) == "string" then return e, "EFAILED" end
  if type(e) == "table" and (type(e.code) == "string" or type(e.message) == "string"
      or math.type(e.at) == "integer") then
    local code = type(e.code) == "string" and e.code or "EFAILED"
    local message = type(e.message) == "string" and e.message or code
    if core.err_code(code) == nil then code = "EFAILED" end
    return message, code, math.type(e.at) == "integer" and e.at or nil
  end
  local mt = getmetatable(e)
  if type(mt) == "table" and mt.__tostring then return tostring(e), "EFAILED" end
  return ("(error object is a %s value)"):format(type(e)), "EFAILED"
end

---Raise a failure with `code` ("ECONFLICT", "ENOTFOUND", ...) and
---`message`: inside a handler, the sender (or the stream's log) sees that
---code.  Exported as durable.fail.
---@param code string
---@param message? string
function M.fail(code, message)
  if type(code) ~= "string" or code == "" then
    error("durable.fail(code, message): code must be an error name such as \"ECONFLICT\"", 2)
  end
  if message ~= nil and type(message) ~= "string" then
    error("durable.fail(code, message): message must be a string", 2)
  end
  error(setmetatable({ code = code, message = message or code }, Failure), 0)
end

---Inside a batch handler: raise a failure that names the item it stopped
---at (an item of the batch, or its sequence) -- the items before it are
---handed again (in batches) and acknowledged without it, and it alone is
---retried (the backoff, max_attempts, the dead letters) without the
---runtime handing the batch over one item at a time to find it.  The same
---as error{ code = code, message = message, at = sequence }.  `code`
---defaults to "EFAILED".  Exported as durable.fail_at.
---@param item_or_sequence durable.Item|integer
---@param message string
---@param code? string
function M.fail_at(item_or_sequence, message, code)
  local at = item_or_sequence
  if type(at) == "table" then at = at.sequence end
  if math.type(at) ~= "integer" or at < 1 then
    error("durable.fail_at(item, message [, code]): item must be an item of the batch or its "
      .. ("sequence (an integer >= 1), not %s"):format(tostring(item_or_sequence)), 2)
  end
  if type(message) ~= "string" then
    error("durable.fail_at(item, message [, code]): message must be a string", 2)
  end
  if code ~= nil and (type(code) ~= "string" or code == "") then
    error("durable.fail_at(item, message [, code]): code must be an error name such as "
      .. "\"EFAILED\"", 2)
  end
  error(setmetatable({ code = code or "EFAILED", message = message, at = at }, Failure), 0)
end

-- The traceback of the last raise seen by a continuation; kept apart from
-- the message so the message stays one readable line.
local last_traceback
local function msgh(e)
  last_traceback = debug.traceback((failure_of(e)), 2)
  return e
end

local function new(mesh)
  return setmetatable({ state = PENDING, mesh = mesh }, Completion)
end

-- Coroutines this module runs handlers in (weak: a handler suspended on a
-- completion nobody can settle is collected with it).
local handler_threads = setmetatable({}, { __mode = "k" })
-- Per thread, how many :next() continuations (or cold starts) run on it
-- now: await is refused there (it would suspend the handler in the middle
-- of settling some other completion).
local in_continuation = setmetatable({}, { __mode = "k" })
local AWAIT = {} -- what a handler's coroutine yields: AWAIT, completion

-- xpcall(fn, msgh, a, b) counted as a continuation of the running thread.
local function continuation(fn, a, b)
  local co = coroutine.running()
  local n = in_continuation[co]
  in_continuation[co] = (n or 0) + 1
  local ok, r, message, code = xpcall(fn, msgh, a, b)
  in_continuation[co] = n
  return ok, r, message, code
end

-- What waits for a completion (`_subs`): nothing, one subscriber, or a
-- list of them (a table without a metatable).  A subscriber is a function
-- fn(c), or the completion a :next() made, which runs its continuation
-- (continue, below).  A producer may hold hundreds of thousands of
-- completions at once: one subscriber, the usual case, costs no table and
-- a :next() no closure.
local continue

local function notify(sub, c)
  if type(sub) == "function" then sub(c) else continue(sub, c) end
end

local function settle(c, ok, a, b, at)
  if c.state ~= PENDING then return false end
  if ok then
    c.state, c.value = OK, a
  else
    c.state, c.message, c.code = FAILED, tostring(a or "failed"), b or "EFAILED"
    c.at = at
  end
  local subs = c._subs
  c._subs = nil
  if subs == nil then return true end
  if type(subs) == "table" and getmetatable(subs) == nil then
    for i = 1, #subs do notify(subs[i], c) end
  else
    notify(subs, c)
  end
  return true
end

---Whether `x` is a completion.
---@param x any
---@return boolean
function M.is(x)
  local mt = getmetatable(x)
  return mt == Completion or mt == Cold
end

-- `c` takes the outcome of a continuation: its raise, or what it returned
-- (a value, or a completion to follow).
local function take(c, ok, r)
  if not ok then
    c.traceback = last_traceback
    settle(c, false, failure_of(r))
  else
    M.adopt(c, r)
  end
end

local function start(c)
  local fn = c._start
  if fn == nil then return end
  c._start = nil
  if c._call then -- completion.cold_call: fn(settle, c), c's array its arguments
    c._call = nil
    local ok, r, message, code = continuation(fn, function(success, a, b)
      settle(c, success, a, b)
    end, c)
    for i = #c, 1, -1 do c[i] = nil end
    if ok and not r then
      settle(c, false, message, code)
    elseif not ok then
      take(c, ok, r)
    end
    return
  end
  take(c, continuation(fn))
end

---Run fn(c) once `c` has settled (now, if it has).  Starts a cold one.
---For the runtime's own glue (handlers, adapters); users use :next().
---@param c durable.Completion
---@param fn fun(c: durable.Completion)
function M.subscribe(c, fn)
  start(c)
  if c.state ~= PENDING then
    notify(fn, c)
    return
  end
  local subs = c._subs
  if subs == nil then
    c._subs = fn
  elseif type(subs) == "table" and getmetatable(subs) == nil then
    subs[#subs + 1] = fn
  else
    c._subs = { subs, fn }
  end
end

---Settle `c` as `r` settles when `r` is a completion, else with the value `r`.
---@param c durable.Completion
---@param r any
function M.adopt(c, r)
  if M.is(r) then
    if c.mesh == nil then c.mesh = r.mesh end
    M.subscribe(r, function(rc)
      if rc.state == OK then
        settle(c, true, rc.value)
      else
        c.traceback = c.traceback or rc.traceback
        settle(c, false, rc.message, rc.code, rc.at)
      end
    end)
  else
    settle(c, true, r)
  end
end

---A pending completion and the two functions that settle it (once; later
---calls are ignored).  `mesh` is whose loop :wait() runs; nil is fine when
---the completion is only ever returned from handlers.
---@param mesh? durable.Mesh
---@return durable.Completion c
---@return fun(value: any) resolve
---@return fun(message: string, code?: string) fail
function M.new(mesh)
  local c = new(mesh)
  return c, function(value) settle(c, true, value) end,
    function(message, code) settle(c, false, message, code) end
end

---A completion that is already ok with `value`.
---@param value any
---@param mesh? durable.Mesh
---@return durable.Completion
function M.done(value, mesh)
  local c = new(mesh)
  settle(c, true, value)
  return c
end

---A completion that has already failed.
---@param message string
---@param code? string  default "EFAILED"
---@param mesh? durable.Mesh
---@return durable.Completion
function M.failed(message, code, mesh)
  local c = new(mesh)
  settle(c, false, message, code)
  return c
end

---A completion over a low-level call of durable.core: `submit(cb)` calls
---the C function with cb, which C calls once with (true, value) or (false,
---message, code); an immediate refusal (nil, message, code) fails it.
---Misuse raises from here, where the call was made.
---@param mesh durable.Mesh
---@param submit fun(cb: fun(ok: boolean, a: any, b: any)): any, string?, string?
---@return durable.Completion
function M.from(mesh, submit)
  local c = new(mesh)
  local ok, message, code = submit(function(success, a, b)
    settle(c, success, a, b)
  end)
  if not ok then settle(c, false, message, code) end
  return c
end

---A cold completion: `fn()` runs on the first :next() or :wait() (not
---before), and its result (a value, or a completion to follow) settles it.
---@param mesh? durable.Mesh
---@param fn fun(): any
---@return durable.Completion
function M.cold(mesh, fn)
  if type(fn) ~= "function" then
    error("completion.cold(mesh, fn): fn must be a function", 2)
  end
  -- where it was made: the first caller outside the module's own glue
  -- (publish_durable's caller, not publish_durable); kept as two fields, the
  -- text is made only if the warning is ever written
  local trusted = debug.getregistry()["durable.trusted"] or {}
  local info
  for level = 2, 8 do
    info = debug.getinfo(level, "Sl")
    if info == nil or not trusted[info.source] then break end
  end
  return setmetatable({ state = PENDING, mesh = mesh, _start = fn,
    _src = info and info.short_src, _line = info and info.currentline }, Cold)
end

---A cold completion of one call of the runtime: on the first :next(),
---:await() or :wait(), `call(settle, c)` runs, where c[1], c[2], ... are
---`...` (kept in the completion, not in a closure: a producer may hold a
---great many of these), and settle(ok, value_or_message, code) settles it
---once; a call that returns nil, message, code is refused at once.
---@param mesh durable.Mesh
---@param call fun(settle: fun(ok: boolean, a: any, b: any), c: table): any, string?, string?
---@return durable.Completion
function M.cold_call(mesh, call, ...)
  local c = M.cold(mesh, call)
  c._call = true
  for i = 1, select("#", ...) do c[i] = (select(i, ...)) end
  return c
end

-- A cold completion collected unstarted did nothing -- almost always a
-- publish written as a statement: say where it was made.
function Cold:__gc()
  if self._start == nil then return end
  local line = ("a cold completion made at %s:%s was collected without ever being started, "
    .. "so it did nothing (nothing was sent): await it, return it from the handler, "
    .. "or call :next() or :wait() on it"):format(self._src or "?", self._line or "?")
  local mesh = self.mesh
  if mesh and mesh:is_open() and pcall(mesh.log, mesh, "warn", line) then return end
  io.stderr:write("durable: warn ", line, "\n")
end

---A completion of the values of all `list`'s completions (plain values
---count as done), in order; fails with the first failure.
---@param list any[]
---@param mesh? durable.Mesh
---@return durable.Completion
function M.all(list, mesh)
  if type(list) ~= "table" then error("completion.all(list): list must be a table", 2) end
  local c = new(mesh)
  local n, left, values = #list, #list, {}
  if n == 0 then
    settle(c, true, values)
    return c
  end
  for i = 1, n do -- the mesh whose loop :wait() runs: the first one named
    local item = list[i]
    if M.is(item) and c.mesh == nil then c.mesh = item.mesh end
  end
  for i = 1, n do
    local item = list[i]
    local sub = new(c.mesh)
    M.adopt(sub, item)
    M.subscribe(sub, function(s)
      if s.state == OK then
        values[i] = s.value
        left = left - 1
        if left == 0 then settle(c, true, values) end
      else
        settle(c, false, s.message, s.code, s.at)
      end
    end)
  end
  return c
end

---Continue with `on_ok(value)` once this completion is ok (or with
---`on_fail(message, code)` once it failed).  What the function returns --
---a value, or a completion to follow -- settles the new completion; a raise
---fails it.  Without the matching function the outcome passes through.
---@param on_ok? fun(value: any): any
---@param on_fail? fun(message: string, code: string): any
---@return durable.Completion
function Completion:next(on_ok, on_fail)
  if on_ok ~= nil and type(on_ok) ~= "function" then
    error("completion:next(on_ok [, on_fail]): on_ok must be a function", 2)
  end
  if on_fail ~= nil and type(on_fail) ~= "function" then
    error("completion:next(on_ok [, on_fail]): on_fail must be a function", 2)
  end
  local c2 = setmetatable({ state = PENDING, mesh = self.mesh, _ok = on_ok, _fail = on_fail },
    Completion)
  M.subscribe(self, c2)
  return c2
end

-- c settled: run the continuation c2 (made by c:next()) holds.
continue = function(c2, c)
  local fn, a, b
  if c.state == OK then
    fn, a = c2._ok, c.value
  else
    fn, a, b = c2._fail, c.message, c.code
  end
  c2._ok, c2._fail = nil, nil
  if fn == nil then
    if c.state == OK then
      settle(c2, true, c.value)
    else
      c2.traceback = c.traceback
      settle(c2, false, c.message, c.code, c.at)
    end
    return
  end
  take(c2, continuation(fn, a, b))
end

---Inside a handler: suspend it until this completion settles (the loop goes
---on meanwhile), then return its value, or nil, message, code when it
---failed.  Starts a cold one.  Raises outside a handler's coroutine -- in a
---script or a spec use :wait(), in a callback :next() -- and inside a
---:next() continuation.
---@return any value
---@return string? message
---@return string? code
function Completion:await()
  local co, main = coroutine.running()
  if main or not handler_threads[co] then
    error("completion:await() works only inside a handler (it suspends the handler's "
      .. "coroutine); here use :wait() (a script, a spec) or :next() (a callback)", 2)
  end
  if in_continuation[co] then
    error("completion:await() inside a :next() continuation: await in the handler "
      .. "itself, or return a completion from the continuation", 2)
  end
  start(self)
  if self.state == PENDING then
    coroutine.yield(AWAIT, self)
  end
  if self.state == OK then return self.value end
  return nil, self.message, self.code
end

---Run fn(...) as a handler: in a coroutine of its own, where :await()
---suspends it.  Returns a completion of its outcome: what fn returned (a
---value, or a completion to follow), or its raise -- then
---on_raise(message, code, traceback) runs first, so the raise can be logged.
---For the runtime's own glue (plugin.lua); user code is already inside one.
---@param on_raise fun(message: string, code: string, traceback: string)
---@param fn fun(...): any
---@return durable.Completion
function M.spawn(on_raise, fn, ...)
  local c = new(nil)
  local co = coroutine.create(fn)
  handler_threads[co] = true
  local step
  local function resume(...)
    core.inherit_hook(co) -- the budget of the entry resuming it (core.c)
    return step(coroutine.resume(co, ...))
  end
  step = function(ok, a, b)
    local runaway = core.ran_away() -- here, or in a coroutine it made and caught
    if ok and runaway then
      ok, a = false, runaway
      if coroutine.status(co) ~= "dead" then coroutine.close(co) end
    end
    if not ok then
      -- reported here, the rest of the entry goes on (core.c)
      if runaway then core.budget_reset() end
      local message, code, at = failure_of(a)
      c.traceback = debug.traceback(co, message)
      on_raise(message, code, c.traceback)
      settle(c, false, message, code, at)
    elseif coroutine.status(co) == "dead" then
      M.adopt(c, a)
    elseif a == AWAIT and M.is(b) then
      M.subscribe(b, function() resume() end)
    else
      coroutine.close(co)
      local message = "a handler may yield only through completion:await()"
      c.traceback = message
      on_raise(message, "EFAILED", message)
      settle(c, false, message, "EFAILED")
    end
  end
  resume(...)
  return c
end

-- Turns of a loop run by M.run, nested runs included.
local turns = 0

---Run the loop of the completion's mesh until `pred()` is true, at most
---`timeout_ms` (nil: no limit).  Returns true, or nil and a message.
---
---A predicate may run the loop itself (`mesh:get_node(p):wait()` inside
---it): what it waits for may then have happened during that nested run,
---with nothing left to wake the loop, so the turn after such a predicate
---only polls (waits 0 ms) instead of blocking until the next event.
---@param mesh durable.Mesh
---@param pred fun(): boolean
---@param timeout_ms? number
---@return true|nil ok
---@return string? message
function M.run(mesh, pred, timeout_ms)
  local deadline = timeout_ms and prim.mesh.now(mesh) + math.ceil(timeout_ms)
  while true do
    local before = turns
    if pred() then break end
    local wait_ms
    if deadline then
      wait_ms = deadline - prim.mesh.now(mesh)
      if wait_ms <= 0 then
        return nil, ("timed out after %d ms"):format(math.ceil(timeout_ms))
      end
    end
    if turns ~= before then wait_ms = 0 end -- the predicate ran the loop
    turns = turns + 1
    local alive = prim.mesh.step(mesh, wait_ms)
    if not alive and deadline == nil and not pred() then
      return nil, "nothing is left to run on the loop and the condition is still false"
    end
  end
  return true
end

---Run the loop until this completion settles (outside handlers only: inside
---one, :await() it or return it).  Returns the value; or nil, message,
---code when it failed, or when `timeout_ms` passed first ("ETIMEDOUT").
---@param timeout_ms? number  no limit when nil
---@return any value
---@return string? message
---@return string? code
function Completion:wait(timeout_ms)
  if timeout_ms ~= nil and (type(timeout_ms) ~= "number" or timeout_ms < 0) then
    error("completion:wait([timeout_ms]): timeout_ms must be a number >= 0", 2)
  end
  if core.in_callback() then
    error("completion:wait() cannot be called inside a handler or a callback "
      .. "(it would run the loop there); use :await() in a handler, or return the completion", 2)
  end
  start(self)
  if self.state == PENDING then
    local mesh = self.mesh
    if mesh == nil then
      error("completion:wait(): this completion belongs to no mesh, so nothing "
        .. "here can settle it", 2)
    end
    local ok, message = M.run(mesh, function() return self.state ~= PENDING end,
      timeout_ms)
    if not ok then return nil, message, "ETIMEDOUT" end
  end
  if self.state == OK then return self.value end
  return nil, self.message, self.code
end

---"pending", "ok" or "failed".
---@return "pending"|"ok"|"failed"
function Completion:status()
  return self.state
end

function Completion:__tostring()
  if self.state == OK then
    return "durable.completion(ok)"
  elseif self.state == FAILED then
    return ("durable.completion(failed: %s %s)"):format(self.code, self.message)
  end
  return "durable.completion(pending)"
end

Cold.__tostring = Completion.__tostring

M.Completion = Completion
return M
