-- pg_link.lua: a faulty link to a PostgreSQL, for the specs: a slow one
-- (the partition spec: this kernel has no netem qdisc to add delay with),
-- or one that loses the answers to commits (stream_ids_spec).
--
--   lua5.4 tests/support/pg_link.lua LISTEN UPSTREAM_SOCKET [delay=MS] [cut_commits=N]
--
-- LISTEN is ADDRESS:PORT (TCP), or the path of a unix socket to make (for
-- libpq, DIR/.s.PGSQL.PORT: then host=DIR reaches it).  Each client is
-- joined to the unix socket UPSTREAM_SOCKET, a PostgreSQL's .s.PGSQL.PORT.
--
--   delay=MS      every chunk either way is held MS before it goes on, in
--                 order (libuv runs timers of equal timeouts in the order
--                 they were started), so a round trip through the link
--                 costs 2 * MS more, as on a distant link.  A side that
--                 closes closes the other MS later.
--   cut_commits=N every Nth answer of the server that reports a COMMIT done
--                 (its CommandComplete "COMMIT") is dropped, and that
--                 connection closed both ways: the transaction is saved,
--                 and its client cannot know it -- a link lost at the worst
--                 moment.  (An answer split over two reads is not seen:
--                 fewer cuts, never a wrong one.)
--
-- Prints "listening" once it accepts; runs until killed.  Needs luv
-- (Debian's lua-luv).
local uv = require "luv"

local listen, upstream = arg[1], arg[2]
local delay, cut_every = 0, nil
for i = 3, #arg do
  local name, value = arg[i]:match("^([%w_]+)=(%d+)$")
  if name == "delay" then delay = tonumber(value)
  elseif name == "cut_commits" and tonumber(value) > 0 then cut_every = tonumber(value)
  else error("pg_link.lua: unknown option " .. arg[i] .. " (delay=MS, cut_commits=N)") end
end
assert(listen and upstream,
  "usage: pg_link.lua LISTEN UPSTREAM_SOCKET [delay=MS] [cut_commits=N]")

-- the message CommandComplete with the tag COMMIT: 'C', its length, the tag
local COMMIT_DONE = "C\0\0\0\11COMMIT\0"
local commits = 0

local function later(fn)
  if delay == 0 then return fn() end
  local t = uv.new_timer()
  t:start(delay, 0, function()
    t:close()
    fn()
  end)
end

local function close(handle)
  if not handle:is_closing() then handle:close() end
end

-- Everything read from `from` is written to `to`, `delay` ms later; from the
-- server, a commit's answer may be lost instead (cut_commits).
local function relay(from, to, from_server)
  from:read_start(function(err, data)
    if err or not data then
      close(from)
      later(function() close(to) end)
      return
    end
    if from_server and cut_every and data:find(COMMIT_DONE, 1, true) then
      commits = commits + 1
      if commits % cut_every == 0 then
        close(from)
        close(to)
        return
      end
    end
    later(function()
      if not to:is_closing() then to:write(data) end
    end)
  end)
end

local server
local address, port = listen:match("^([^/]+):(%d+)$")
if address then
  server = uv.new_tcp()
  assert(server:bind(address, tonumber(port)))
else
  server = uv.new_pipe(false)
  assert(server:bind(listen))
end
assert(server:listen(128, function(err)
  if err then return end
  local client = address and uv.new_tcp() or uv.new_pipe(false)
  server:accept(client)
  if address then client:nodelay(true) end
  local up = uv.new_pipe(false)
  up:connect(upstream, function(cerr)
    if cerr then
      close(client)
      close(up)
      return
    end
    relay(client, up, false)
    relay(up, client, true)
  end)
end))
io.stdout:write("listening\n")
io.stdout:flush()
uv.run()
