-- main.lua: a luv program with a durable mesh beside it.
--
--   build/durable lua examples/luv/main.lua [STORE]
--
-- luv's loop is the program's loop: a luv timer ticks every 20 ms and
-- sends an "add" request to a Counter hub; a luv TCP server on 127.0.0.1
-- answers each connection with the count stored in the node.  The mesh is
-- driven from luv's loop through mesh:fd() and mesh:step()
-- (durable.drive_with_luv), so everything -- luv's callbacks, the Counter's
-- handler, the completions settling -- happens inside uv.run(), on one
-- thread, and nothing calls :wait() once the loop runs.  After five ticks
-- a luv TCP client asks the server for the count, the program prints it,
-- stops driving the mesh and lets uv.run() return; then it closes the mesh.
local uv = require "luv"
local durable = require "durable"

local here = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or ".") .. "/"
local temp
local store = arg[1]
if not store then
  temp = os.tmpname()
  store = "sqlite:" .. temp
end

local mesh = assert(durable.open { store = store, plugins = { here .. "counter.lua" } })
local counter = "Counters/luv"
-- before uv.run(), :wait() is fine: nothing else is running yet
assert(mesh:put_node { path = counter, node_type = "Counter", content = { count = 0 } }:wait())
local client = assert(mesh:hub("client/luv-example"))

local stop_driving = durable.drive_with_luv(mesh, uv)

-- a luv TCP server: each connection gets the stored count, then is closed
local server = uv.new_tcp()
assert(server:bind("127.0.0.1", 0))
local port = server:getsockname().port
assert(server:listen(16, function()
  local conn = uv.new_tcp()
  server:accept(conn)
  mesh:get_node(counter):next(function(node)
    conn:write(("count=%d\n"):format(node.content.count), function() conn:close() end)
  end)
end))

local failed
local function finish(failure)
  if failure then
    failed = true
    io.stderr:write("luv example: ", tostring(failure), "\n")
  end
  if not server:is_closing() then server:close() end
  stop_driving()
end

local function ask_server()
  local sock = uv.new_tcp()
  sock:connect("127.0.0.1", port, function(err)
    if err then return finish(err) end
    sock:read_start(function(rerr, data)
      if rerr then return finish(rerr) end
      if data then
        io.write("the server says ", data)
        sock:close()
        finish()
      end
    end)
  end)
end

local ticks = 0
local ticker = uv.new_timer()
ticker:start(20, 20, function()
  ticks = ticks + 1
  if ticks == 5 then ticker:close() end
  local tick = ticks
  client:request(counter, "add", { n = 1 }):next(function(count)
    print(("tick %d: count %d"):format(tick, count))
    if count == 5 then ask_server() end
  end, function(message)
    if not ticker:is_closing() then ticker:close() end
    finish(message)
  end)
end)

uv.run()
mesh:close()
if temp then
  for _, suffix in ipairs { "", "-wal", "-shm", "-live" } do os.remove(temp .. suffix) end
end
os.exit(failed and 1 or 0)
