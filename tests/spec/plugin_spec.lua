-- plugin_spec.lua: plugin files.  A broken one is refused at durable.open
-- with the file, the line and the reason, and nothing starts: no store is
-- opened, no hub exists.  A store that cannot be opened is an operational
-- failure (nil, message, code), not a raise.
local helper = require "helper"
local durable = require "durable"
local core = require "durable.core"

local function broken(name) return helper.fixture("broken/" .. name) end

describe("a plugin file", function()
  helper.each()

  -- Open with a good plugin and a broken one on a SQLite file that does not
  -- exist yet: the refusal must leave it uncreated.
  local function refused(file)
    local db = helper.tmpname(".db")
    local ok, err = pcall(durable.open, {
      store = "sqlite:" .. db,
      plugins = { helper.fixture "hubs.lua", file },
    })
    assert.is_false(ok, "durable.open accepted " .. file)
    assert.is_string(err)
    assert.is_nil(io.open(db, "r"), "the store was opened")
    assert.equal(0, core.meshes())
    return err
  end

  local cases = {
    { "syntax.lua", 3, "'}' expected" },
    { "runtime.lua", 3, "attempt to index a nil value" },
    { "not_table.lua", 3, "a plugin must return a table" },
    { "unknown_key.lua", 4, "unknown key 'nodetypes' in the plugin table" },
    { "not_function.lua", 4, "node_types.Doc must be a function(config), not number" },
    { "unknown_field.lua", 5, "cannot set 'handler' on the NodeType 'Doc' configuration: unknown field" },
    { "unknown_method.lua", 5, "NodeType 'Doc' configuration has no field 'with_typo'" },
    { "config_error.lua", 6, "the configuration failed" },
    { "reserved_message.lua", 5, "message types beginning with 'durable.' belong to the runtime" },
  }
  for _, case in ipairs(cases) do
    local name, line, reason = case[1], case[2], case[3]
    it(("is refused with its file, line and reason: %s"):format(name), function()
      local err = refused(broken(name))
      local where = broken(name) .. ":" .. line .. ":"
      assert.is_truthy(err:find(where, 1, true), ("expected %q in %q"):format(where, err))
      assert.is_truthy(err:find(reason, 1, true), ("expected %q in %q"):format(reason, err))
      assert.is_falsy(err:find("\n", 1, true), "one line")
    end)
  end

  it("that does not exist is refused, naming it", function()
    local err = refused(broken("no_such_file.lua"))
    assert.matches("no_such_file.lua", err, 1, true)
  end)

  it("may not configure a NodeType another plugin configures", function()
    local err = refused(helper.fixture "hubs.lua")
    assert.matches("NodeType 'BadInit' is already configured by " .. helper.fixture "hubs.lua", err, 1, true)
  end)

  it("configures NodeTypes whose handlers run", function()
    local mesh = helper.open { plugins = { helper.fixture "hubs.lua" } }
    local ns = helper.ns()
    helper.ok(mesh:put_node { path = ns .. "/e", node_type = "Echo" })
    assert.equal(7, helper.ok(mesh:hub("client/" .. ns):request(ns .. "/e", "echo", 7)))
  end)
end)

describe("durable.open", function()
  helper.each()

  it("returns nil, message, code for a store it cannot open", function()
    local mesh, message, code = durable.open {
      store = "postgresql:///nodb?host=/nonexistent-dir&connect_timeout=1",
    }
    assert.is_nil(mesh)
    assert.is_string(message)
    assert.is_string(code)
    assert.matches("^E", code)
    assert.equal(0, core.meshes())
  end)

  it("raises on misuse", function()
    assert.has_error(function() durable.open() end)
    assert.has_error(function() durable.open { store = 42 } end)
    assert.has_error(function() durable.open { stroe = "sqlite::memory:" } end)
    assert.has_error(function() durable.open { store = "sqlite::memory:", quiesce_budget_ms = -1 } end)
    assert.has_error(function() durable.open { store = "sqlite::memory:", plugins = "x.lua" } end)
    assert.equal(0, core.meshes())
  end)
end)
