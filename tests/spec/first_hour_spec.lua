-- first_hour_spec.lua: what a new user meets first, from the user's side --
-- the command run in the wrong folder, a plugin that calls os.exit, a
-- folder given as a plugin, a publish to an owner that is not there, a
-- host with items it cannot have consumed, the lines of a failing
-- handler.
local cmd = require "command"
local helper = require "helper"

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

  it("has a host say once why items wait for an owner it cannot activate", function()
    local nobody, other = cmd.ns .. "/nobody", cmd.ns .. "/other"
    assert.equal(0, (cmd.run { "put", other, "Other", "{}" }))
    for _, owner in ipairs { nobody, other } do
      for i = 1, 2 do
        assert.equal(0, (cmd.run { "publish", "Probe", owner, '{"i":' .. i .. "}", "--no-owner" }))
      end
    end
    local host = cmd.host("tests/spec/fixtures/processes.lua", { DURABLE_MP_LOG = cmd.tmpname() })
    local function said(text)
      local n = 0
      for line in (cmd.read_file(host.err) or ""):gmatch("[^\n]+") do
        if line:find(text, 1, true) then n = n + 1 end
      end
      return n
    end
    local absent = ("Probe@%s: 2 items waiting, but this host cannot have them consumed: "
      .. "there is no node at %s, its owner"):format(nobody, nobody)
    local foreign = ("Probe@%s: 2 items waiting, but this host cannot have them consumed: "
      .. "its owner %s is a node of NodeType Other, and no plugin of this host declares a consumer of Probe"):format(other, other)
    assert.truthy(cmd.wait_for(function() return said(absent) == 1 and said(foreign) == 1 end, 15),
      cmd.read_file(host.err))
    -- another append is no news: said once per stream until the reason changes
    assert.equal(0, (cmd.run { "publish", "Probe", nobody, '{"i":3}', "--no-owner" }))
    cmd.sleep("1.5")
    assert.equal(1, said("Probe@" .. nobody .. ": "))
    assert.equal(1, said(foreign))
  end)

  it("says a folder given as a plugin is one", function()
    local dir = cmd.tmpname()
    os.remove(dir)
    assert.is_true(os.execute("mkdir " .. cmd.quote(dir)) == true)
    local code, _, err = cmd.run { "run", dir }
    assert.equal(1, code)
    assert.equal(("durable: run: plugin '%s' is not a regular file (a directory): name the "
      .. "plugin's file in that folder (durable run %s/NAME.lua)\n"):format(dir, dir), err)
    os.execute("rmdir " .. cmd.quote(dir))
  end)

  describe("a failing handler", function()
    helper.each()

    it("logs one short line per attempt, no lease line per retry, and says the ways out", function()
      local mesh = helper.open { streams = { backoff_min_ms = 5, backoff_max_ms = 10 } }
      local owner = cmd.ns .. "/acct"
      local hub = mesh:hub("client/" .. cmd.ns)
      helper.ok(hub:publish_durable({ namespace = "Ledger", key = owner }, { n = 1 }, { no_owner = true }))
      local tries = 0
      assert(hub:consume { namespace = "Ledger", key = function() return owner end,
        handler = function()
          tries = tries + 1
          error("overdraft: balance 10 < 30")
        end })
      helper.run_until(mesh, function() return tries >= 11 end)
      local lines = helper.log_lines("was NOT acknowledged")
      assert.is_true(#lines >= 10)
      for i = 1, 10 do
        local line = lines[i]:gsub("^error ", "")
        assert.matches(("at item 1, attempt %d "):format(i), line, 1, true)
        assert.matches("overdraft: balance 10 < 30", line, 1, true)
        assert.matches("retried from the checkpoint in", line, 1, true)
        -- about 200 characters besides the hub and the stream it names
        -- (a short message, with its file and line: nothing is cut)
        local rest = #line - #("client/" .. cmd.ns) - #("Ledger@" .. owner)
        assert.is_true(rest <= 210, rest .. ": " .. line)
      end
      -- the lease was granted once, not again at every retry
      assert.equal(1, #helper.log_lines("Ledger@" .. owner .. ": lease granted"))
      -- and the handler's traceback, many lines long, was logged once
      assert.equal(1, #helper.log_lines("warn [Lua] the 'Ledger' handler at hub 'client/" .. cmd.ns
        .. "' on item 1 failed: "))
      -- after 10 in a row, the ways out
      local ways = helper.log_lines("has failed 10 times in a row")
      assert.equal(1, #ways)
      for _, way in ipairs { "durable seek Ledger " .. owner .. " --to 1", "max_attempts",
                             "durable dead", "durable requeue" } do
        assert.matches(way, ways[1], 1, true)
      end
    end)

    it("names the ways back once the item is moved to the dead letters", function()
      local mesh = helper.open { streams = { backoff_min_ms = 5, backoff_max_ms = 10 } }
      local owner = cmd.ns .. "/acct"
      local hub = mesh:hub("client/" .. cmd.ns)
      helper.ok(hub:publish_durable({ namespace = "Ledger", key = owner }, { n = 1 }, { no_owner = true }))
      assert(hub:consume { namespace = "Ledger", key = function() return owner end, max_attempts = 2,
        handler = function() error("no") end })
      helper.run_until(mesh, function() return #helper.log_lines("moved to the dead letters") == 1 end)
      local line = helper.log_lines("moved to the dead letters")[1]
      assert.matches(("`durable dead Ledger %s` shows it, `durable requeue Ledger %s 1` appends it again")
        :format(owner, owner), line, 1, true)
    end)

  end)

  describe("a publish from Lua to an owner that is not there", function()
    helper.each()

    it("warns once when a publish makes a stream whose owner has no node", function()
      local mesh = helper.open {}
      local hub = mesh:hub("client/" .. cmd.ns)
      local owner = cmd.ns .. "/typo"
      helper.ok(hub:publish_durable({ namespace = "Ledger", key = owner }, { n = 1 }))
      helper.ok(hub:publish_durable({ namespace = "Ledger", key = owner }, { n = 2 }))
      helper.run_until(mesh, function() return #helper.log_lines("no host consumes it") >= 1 end)
      assert.equal(1, #helper.log_lines(("there is no node at %s, its owner"):format(owner)))
      -- said it means it: nothing said
      helper.ok(hub:publish_durable({ namespace = "Ledger", key = owner .. "2" }, { n = 1 }, { no_owner = true }))
      mesh:run_until(function() return false end, 200)
      assert.equal(0, #helper.log_lines(("there is no node at %s2"):format(owner)))
    end)
  end)

  it("refuses durable publish to an owner that is not there, unless --no-owner", function()
    local owner = cmd.ns .. "/dco"
    local code, out, err = cmd.run { "publish", "DocumentLog", owner, '{"text":"typo"}' }
    assert.equal(1, code)
    assert.equal("", out)
    assert.equal(("durable: publish: no node at '%s', the owner of DocumentLog@%s: no host would "
      .. "consume what is published there (a typo in the key or the family?); make the owner "
      .. "first (durable put %s TYPE '{}'), or give --no-owner to publish anyway\n")
      :format(owner, owner, owner), err)
    code = cmd.run { "get", "@" .. owner .. "/_DurableStream/DocumentLog" }
    assert.equal(1, code, "nothing was made")
    code, out, err = cmd.run { "publish", "DocumentLog", owner, '{"text":"meant"}', "--no-owner" }
    assert.equal(0, code, err)
    assert.equal("1\n", out)
    code, out, err = cmd.run { "publish", "DocumentLog", owner, "-", stdin = '{"text":"x"}\n' }
    assert.equal(1, code)
    assert.matches("no node at '" .. owner .. "'", err, 1, true)
    assert.equal(0, (cmd.run { "put", owner, "Document", "{}" }))
    code, out, err = cmd.run { "publish", "DocumentLog", owner, '{"text":"now"}' }
    assert.equal(0, code, err)
    assert.equal("2\n", out)
  end)
end)
