-- cli_principals_spec.lua: `durable --as PRINCIPAL`, DURABLE_PRINCIPAL, and
-- `durable grant / revoke / grants`, driven as a user drives them.  Without
-- --as (and with DURABLE_PRINCIPAL unset) the command is the platform, and
-- only the platform manages grants.  Store-parametrised like cli_spec.
local cmd = require "command"
local run, spawn, exit_code, wait_for = cmd.run, cmd.spawn, cmd.exit_code, cmd.wait_for
local read_file, spit = cmd.read_file, cmd.spit
local P

local function one_line(s) return s:match("^[^\n]+\n$") ~= nil end

describe("durable --as (" .. cmd.KIND .. ")", function()
  local alice, bob
  before_each(function()
    local _
    _, P = cmd.begin("cliacl")
    -- one pair per test: grants outlive a test on a shared database
    alice, bob = "alice-" .. P:gsub("/", "-"), "bob-" .. P:gsub("/", "-")
  end)
  after_each(cmd.finish)

  local function ok(args)
    local code, out, err = run(args)
    assert.equal(0, code, err)
    return out
  end

  it("grants, revokes and lists, each line the arguments that made it", function()
    ok { "grant", alice, P .. "/a", "read" }
    ok { "grant", alice, P .. "/a", "write" }
    ok { "grant", alice, P .. "/b", "read" }
    ok { "grant", bob, P .. "/a", "read,write" }
    assert.equal(("%s\t%s/a\tread,write\n%s\t%s/b\tread\n"):format(alice, P, alice, P),
      ok { "grants", alice })
    ok { "revoke", alice, P .. "/a", "read" }
    ok { "revoke", alice, P .. "/b" }
    assert.equal(("%s\t%s/a\twrite\n"):format(alice, P), ok { "grants", alice })
    local all = ok { "grants" }
    assert.truthy(all:find(("%s\t%s/a\tread,write\n"):format(bob, P), 1, true), all)
    -- bad modes, names and prefixes are usage errors
    local code, _, err = run { "grant", alice, P .. "/a", "execute" }
    assert.equal(2, code)
    assert.truthy(one_line(err), err)
    code = run { "grant", "platform", P .. "/a", "read" }
    assert.equal(2, code)
    code = run { "grant", alice, P .. "//a", "read" }
    assert.equal(2, code)
    code = run { "grant", alice, P .. "/a" }
    assert.equal(2, code)
  end)

  it("reads and writes only what the grants allow, --as or DURABLE_PRINCIPAL", function()
    local doc, other = P .. "/doc", P .. "/other"
    ok { "put", doc, "Doc", '{"v":0}' }
    ok { "put", other, "Doc", '{"v":0}' }
    local code, out, err = run { "--as", alice, "get", "@" .. doc }
    assert.equal(1, code)
    assert.equal("", out)
    assert.equal(("durable: get: principal '%s' may not read '%s'\n"):format(alice, doc), err)
    code, _, err = run { "get", "@" .. doc, env = { DURABLE_PRINCIPAL = alice } }
    assert.equal(1, code)
    assert.truthy(err:find("may not read", 1, true), err)

    ok { "grant", alice, doc, "read" }
    assert.truthy(ok { "--as", alice, "get", "@" .. doc }:find('"v":0', 1, true))
    assert.truthy(ok { "get", "@" .. doc, env = { DURABLE_PRINCIPAL = alice } }:find('"v":0', 1, true))
    -- --as wins over the environment
    code = run { "--as", bob, "get", "@" .. doc, env = { DURABLE_PRINCIPAL = alice } }
    assert.equal(1, code)
    -- a listing leaves out what it may not read
    local listed = ok { "--as", alice, "search", "namespace:" .. P }
    assert.truthy(listed:find(doc, 1, true))
    assert.falsy(listed:find(other, 1, true))
    -- a write needs write: refused, nothing written
    code, _, err = run { "--as", alice, "put", doc, "Doc", '{"v":1}' }
    assert.equal(1, code)
    assert.equal(("durable: put: principal '%s' may not write '%s'\n"):format(alice, doc), err)
    assert.truthy(ok { "get", "@" .. doc }:find('"v":0', 1, true))
    ok { "grant", alice, doc, "write" }
    ok { "put", doc, "Doc", '{"v":2}', env = { DURABLE_PRINCIPAL = alice } }
    assert.truthy(ok { "get", "@" .. doc }:find('"v":2', 1, true))
  end)

  it("publishes, reads and lists streams only where the grants allow", function()
    local doc, other = P .. "/doc", P .. "/other"
    local code, _, err = run { "--as", alice, "publish", "Log", doc, '{"n":1}' }
    assert.equal(1, code)
    assert.truthy(err:find(("principal '%s' may not write '%s'"):format(alice, doc), 1, true), err)
    assert.truthy(one_line(err), err)
    code = run { "get", "@" .. doc .. "/_DurableStream/Log" }
    assert.equal(1, code, "a denied publish makes no stream")

    ok { "grant", alice, doc, "write" }
    assert.equal("1\n", ok { "--as", alice, "publish", "Log", doc, '{"n":1}' })
    assert.equal("1\n", ok { "publish", "Log", other, '{"n":1}', "--no-owner" })
    code, _, err = run { "--as", alice, "read", "Log", doc }
    assert.equal(1, code)
    assert.truthy(err:find("may not read", 1, true), err)
    ok { "grant", alice, doc, "read" }
    assert.truthy(ok { "--as", alice, "read", "Log", doc }:find('"payload":{"n":1}', 1, true))
    local streams = ok { "--as", alice, "streams", "--json" }
    assert.truthy(streams:find(doc .. "/_DurableStream/Log", 1, true), streams)
    assert.falsy(streams:find(other, 1, true), streams)
  end)

  it("leaves grants to the platform", function()
    ok { "put", P .. "/made", "T", "{}" } -- the store is made
    local code, _, err = run { "--as", alice, "grant", alice, P, "read,write" }
    assert.equal(1, code)
    assert.equal(("durable: grant: principal '%s' may not grant: grants are the platform's "
      .. "(run without --as and $DURABLE_PRINCIPAL)\n"):format(alice), err)
    code = run { "revoke", alice, P, env = { DURABLE_PRINCIPAL = alice } }
    assert.equal(1, code)
    assert.equal("", ok { "grants", alice })
    ok { "grant", alice, P, "read" }
    ok { "grant", bob, P, "read" }
    assert.equal(("%s\t%s\tread\n"):format(alice, P), ok { "--as", alice, "grants" })
    code = run { "--as", alice, "grants", bob }
    assert.equal(1, code)
  end)

  it("refuses 'platform', empty and malformed principals as bad usage", function()
    ok { "put", P .. "/doc", "Doc", "{}" }
    local code, out, err = run { "--as", "platform", "get", "@" .. P .. "/doc" }
    assert.equal(2, code)
    assert.equal("", out)
    assert.truthy(err:find("'platform' is not a principal's name", 1, true), err)
    assert.truthy(one_line(err), err)
    code = run { "get", "@" .. P .. "/doc", env = { DURABLE_PRINCIPAL = "platform" } }
    assert.equal(2, code)
    code, _, err = run { "get", "@" .. P .. "/doc", env = { DURABLE_PRINCIPAL = "" } }
    assert.equal(2, code)
    assert.truthy(err:find("$DURABLE_PRINCIPAL", 1, true), err)
    code = run { "--as", "", "get", "@" .. P .. "/doc" }
    assert.equal(2, code)
    code = run { "--as", "a\tb", "get", "@" .. P .. "/doc" }
    assert.equal(2, code)
    -- after the command name too
    code = run { "get", "@" .. P .. "/doc", "--as", "platform" }
    assert.equal(2, code)
  end)

  it("hosts --as a principal: consumes only the streams it may read and write", function()
    local plugin = cmd.tmpname() .. ".lua"
    cmd.track(plugin)
    spit(plugin, [[
return { node_types = { AclDoc = function(config)
  config:with_durable_stream_consumer {
    namespace = "AclLog",
    key = function(hub) return hub.address end,
    handler = function(hub, item)
      return hub:update_node(hub.address, function(node)
        node.content.text = (node.content.text or "") .. item.payload.text
        return node
      end)
    end,
  }
end } }
]])
    local ro, rw = P .. "/ro", P .. "/rw"
    ok { "put", ro, "AclDoc", "{}" }
    ok { "put", rw, "AclDoc", "{}" }
    ok { "grant", alice, ro, "read" }
    ok { "grant", alice, rw, "read,write" }
    ok { "publish", "AclLog", ro, '{"text":"no"}' }
    ok { "publish", "AclLog", rw, '{"text":"yes"}' }
    local host = spawn { "run", "--as", alice, plugin }
    assert.truthy(wait_for(function()
      return ok { "get", "@" .. rw }:find('"text":"yes"', 1, true)
    end, 15), read_file(host.err))
    assert.truthy(wait_for(function()
      return (read_file(host.err) or ""):find(("principal '%s' may not write '%s'"):format(alice, ro),
        1, true)
    end, 15), read_file(host.err))
    assert.falsy(ok { "get", "@" .. ro }:find("text", 1, true))
    os.execute("kill -TERM " .. host.pid)
    assert.equal(0, exit_code(host, 15), read_file(host.err))
  end)
end)
