-- first_hour_spec.lua: what a new user meets first, from the user's side --
-- the command in the wrong folder, ...
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
end)
