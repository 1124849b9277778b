-- delay_proxy.lua: a slow link for the partition spec, where the kernel has
-- no netem qdisc to add delay with.
--
--   lua5.4 tests/support/delay_proxy.lua ADDRESS PORT UPSTREAM_SOCKET DELAY_MS
--
-- Listens on ADDRESS:PORT (TCP) and joins each client to the unix socket
-- UPSTREAM_SOCKET (a PostgreSQL's .s.PGSQL.N).  Every chunk either way is
-- held DELAY_MS before it goes on, in order (libuv runs timers of equal
-- timeouts in the order they were started), so a round trip through it
-- costs 2 * DELAY_MS more, as on a distant link.  A side that closes closes
-- the other DELAY_MS later.  Prints "listening" once it accepts; runs until
-- killed.  Needs luv (Debian's lua-luv).
local uv = require "luv"

local address, port, upstream, delay = arg[1], tonumber(arg[2]), arg[3], tonumber(arg[4])
assert(address and port and upstream and delay,
  "usage: delay_proxy.lua ADDRESS PORT UPSTREAM_SOCKET DELAY_MS")

local function later(fn)
  local t = uv.new_timer()
  t:start(delay, 0, function()
    t:close()
    fn()
  end)
end

local function close(handle)
  if not handle:is_closing() then handle:close() end
end

-- Everything read from `from` is written to `to`, DELAY_MS later.
local function relay(from, to)
  from:read_start(function(err, data)
    if err or not data then
      close(from)
      later(function() close(to) end)
      return
    end
    later(function()
      if not to:is_closing() then to:write(data) end
    end)
  end)
end

local server = uv.new_tcp()
assert(server:bind(address, port))
assert(server:listen(128, function(err)
  if err then return end
  local client = uv.new_tcp()
  server:accept(client)
  client:nodelay(true)
  local up = uv.new_pipe(false)
  up:connect(upstream, function(cerr)
    if cerr then
      close(client)
      close(up)
      return
    end
    relay(client, up)
    relay(up, client)
  end)
end))
io.stdout:write("listening\n")
io.stdout:flush()
uv.run()
