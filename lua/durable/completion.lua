--- durable.completion: the one way anything finishes later.
--
-- A completion is a value that arrives later, or a failure (a message and
-- a code such as "ENOTFOUND").  Nothing blocks the loop and nothing awaits:
-- a handler that needs a store read or another hub's answer returns a
-- completion, and its message is done when that completion is.  Outside
-- handlers (a script, a spec) `:wait()` runs the mesh's loop until the
-- completion settles.
--
--   hub:request(...) --> completion --:next(fn)--> completion --:wait()--> value
--                         (settled by a C callback, on the loop)
--
-- Settling runs the continuations at once, in the order they were added
-- (no extra tick: the C runtime already made the callback a loop turn).  A
-- continuation that raises fails the completion it produced; it never
-- escapes into the C callback that settled the first one.
--
-- A cold completion (completion.cold) does nothing until the first :next()
-- or :wait(); durable streams' publish uses that so that building a publish
-- does not append anything yet.
--
-- Errors follow luv: misuse raises (a wrong argument, :wait() inside a
-- handler); an operational failure is a failed completion, and :wait()
-- returns nil, message, code for it.
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
---@field code string?     the failure's code ("EFAILED", "ENOTFOUND", ...)
---@field traceback string? where a continuation raised, when it did
local Completion = {}
Completion.__index = Completion
Completion.__name = "durable.completion"

local PENDING, OK, FAILED = "pending", "ok", "failed"

-- The traceback of the last raise seen by a continuation; kept apart from
-- the message so the message stays one readable line.
local last_traceback
local function msgh(e)
  local msg = type(e) == "string" and e or tostring(e)
  last_traceback = debug.traceback(msg, 2)
  return msg
end

local function new(mesh)
  return setmetatable({ state = PENDING, mesh = mesh }, Completion)
end

local function settle(c, ok, a, b)
  if c.state ~= PENDING then return false end
  if ok then
    c.state, c.value = OK, a
  else
    c.state, c.message, c.code = FAILED, tostring(a or "failed"), b or "EFAILED"
  end
  local subs = c._subs
  c._subs = nil
  if subs then
    for i = 1, #subs do subs[i](c) end
  end
  return true
end

---Whether `x` is a completion.
---@param x any
---@return boolean
function M.is(x)
  return getmetatable(x) == Completion
end

local function start(c)
  local fn = c._start
  if fn == nil then return end
  c._start = nil
  local ok, r = xpcall(fn, msgh)
  if not ok then
    c.traceback = last_traceback
    settle(c, false, r, "EFAILED")
  else
    M.adopt(c, r)
  end
end

---Run fn(c) once `c` has settled (now, if it has).  Starts a cold one.
---For the runtime's own glue (handlers, adapters); users use :next().
---@param c durable.Completion
---@param fn fun(c: durable.Completion)
function M.subscribe(c, fn)
  start(c)
  if c.state ~= PENDING then
    fn(c)
  else
    local subs = c._subs
    if subs == nil then
      subs = {}
      c._subs = subs
    end
    subs[#subs + 1] = fn
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
        settle(c, false, rc.message, rc.code)
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
  local c = new(mesh)
  c._start = fn
  return c
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
        settle(c, false, s.message, s.code)
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
  local c2 = new(self.mesh)
  M.subscribe(self, function(c)
    local fn, a, b
    if c.state == OK then
      fn, a = on_ok, c.value
    else
      fn, a, b = on_fail, c.message, c.code
    end
    if fn == nil then
      if c.state == OK then
        settle(c2, true, c.value)
      else
        c2.traceback = c.traceback
        settle(c2, false, c.message, c.code)
      end
      return
    end
    local ok, r = xpcall(fn, msgh, a, b)
    if not ok then
      c2.traceback = last_traceback
      settle(c2, false, r, "EFAILED")
    else
      M.adopt(c2, r)
    end
  end)
  return c2
end

---Run the loop of the completion's mesh until `pred()` is true, at most
---`timeout_ms` (nil: no limit).  Returns true, or nil and a message.
---@param mesh durable.Mesh
---@param pred fun(): boolean
---@param timeout_ms? number
---@return true|nil ok
---@return string? message
function M.run(mesh, pred, timeout_ms)
  local deadline = timeout_ms and prim.mesh.now(mesh) + math.ceil(timeout_ms)
  while not pred() do
    local wait_ms
    if deadline then
      wait_ms = deadline - prim.mesh.now(mesh)
      if wait_ms <= 0 then
        return nil, ("timed out after %d ms"):format(math.ceil(timeout_ms))
      end
    end
    local alive = prim.mesh.step(mesh, wait_ms)
    if not alive and deadline == nil and not pred() then
      return nil, "nothing is left to run on the loop and the condition is still false"
    end
  end
  return true
end

---Run the loop until this completion settles (outside handlers only: inside
---one, return the completion instead).  Returns the value; or nil, message,
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
      .. "(it would run the loop there); return the completion instead", 2)
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

M.Completion = Completion
return M
