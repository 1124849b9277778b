-- first_hour_spec.lua: what a new user meets first, from the user's side --
-- the command run in the wrong folder, a plugin that calls os.exit, a
-- folder given as a plugin.
local cmd = require "command"

describe("a new user's first hour (" .. cmd.KIND .. ")", function()
  before_each(function() cmd.begin("firsthour") end)
  after_each(cmd.finish)

  it("read-only commands on a SQLite file that is not there say so and make nothing", function()
    local dir = cmd.tmpname()
    os.remove(dir)
    assert.is_true(os.execute("mkdir " .. cmd.quote(dir)) == true)
    local db = dir .. "/durable.db"
    for _, args in ipairs { { "get", "@a/b" }, { "read", "Log", "a/b" }, { "streams" },
                            { "search", "namespace:a" }, { "dead", "Log", "a/b" },
                            { "grants", "alice" } } do
      args.store = "sqlite:" .. db
      local code, out, err = cmd.run(args)
      assert.equal(1, code, args[1])
      assert.equal("", out, args[1])
      assert.equal(("durable: %s: no database at '%s' (nothing was created); --store or "
        .. "DURABLE_STORE names one\n"):format(args[1], db), err)
      assert.is_nil(cmd.read_file(db), args[1] .. " made the file")
    end
    assert.equal("", (io.popen("ls -A " .. cmd.quote(dir)):read("a")))
    -- a command that writes makes it, as ever
    local code, _, err = cmd.run { "put", "a/b", "T", "{}", store = "sqlite:" .. db }
    assert.equal(0, code, err)
    code, _, err = cmd.run { "get", "@a/b", store = "sqlite:" .. db }
    assert.equal(0, code, err)
    os.execute("rm -rf " .. cmd.quote(dir))
  end)

  it("refuses os.exit in a plugin: at load durable run exits 1 naming the line", function()
    local plugin = cmd.tmpname() .. ".lua"
    cmd.track(plugin)
    cmd.spit(plugin, "local x = 1\nos.exit(0)\nreturn { node_types = {} }\n")
    local code, out, err = cmd.run { "run", plugin }
    assert.equal(1, code)
    assert.equal("", out)
    assert.equal(("durable: run: plugin %s:2: os.exit is refused in a plugin (called at %s:2): "
      .. "a plugin cannot end the host; raise an error to fail the item, or the load\n")
      :format(plugin, plugin), err)
  end)

  it("refuses os.exit in a handler: the item fails, the host goes on", function()
    local plugin = cmd.tmpname() .. ".lua"
    cmd.track(plugin)
    cmd.spit(plugin, table.concat({
      "return { node_types = { Quitter = function(config)",
      "  config:with_durable_stream_consumer { namespace = 'Quit',",
      "    handler = function(hub, item)",
      "      if item.payload.quit then os.exit(3) end",
      "    end } end } }", "" }, "\n"))
    local owner = cmd.ns .. "/q"
    assert.equal(0, (cmd.run { "put", owner, "Quitter", "{}" }))
    local host = cmd.host(plugin)
    assert.equal(0, (cmd.run { "publish", "Quit", owner, '{"quit":true}' }))
    assert.truthy(cmd.wait_for(function()
      return (cmd.read_file(host.err) or ""):find(("os.exit is refused in a plugin (called at %s:4)")
        :format(plugin), 1, true)
    end, 15), cmd.read_file(host.err))
    assert.is_true(cmd.running(host))
  end)

  it("says a folder given as a plugin is one", function()
    local dir = cmd.tmpname()
    os.remove(dir)
    assert.is_true(os.execute("mkdir " .. cmd.quote(dir)) == true)
    local code, _, err = cmd.run { "run", dir }
    assert.equal(1, code)
    assert.equal(("durable: run: plugin '%s' is a folder: name the plugin's file in it "
      .. "(durable run %s/NAME.lua)\n"):format(dir, dir), err)
    os.execute("rmdir " .. cmd.quote(dir))
  end)
end)
