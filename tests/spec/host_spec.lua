-- host_spec.lua: a Lua program as a host (durable.host(mesh), or
-- durable.open{ host = true }), what `durable run` does for streams.
--
-- Two meshes on one SQLite file stand for two processes (each store open is
-- its own instance, so each hears the other's commits through the store's
-- doorbell, as another process would): a producer mesh with no plugins
-- appends, a consumer mesh with the fixture's DurableStreamConsumerProbe
-- consumes.  Nothing activates the owners by hand.  Without hosting, the
-- consumer mesh never hears of those items; once it hosts, the owners whose
-- streams wait are activated and their consumers handle every item, those
-- appended before and those appended after.
local helper = require "helper"
local durable = require "durable"
local probe = require "probe"

local FAMILY = probe.FAMILY
local CONSUMER = "DurableStreamConsumerProbe"
local QUIET_MS = 400 -- a consumer that would be woken is woken well within it

describe("a Lua host #sqlite", function()
  helper.each()

  local url, producer, ns, client

  before_each(function()
    url = "sqlite:" .. helper.tmpname(".db")
    producer = helper.open { store = url, streams = probe.STREAMS }
    ns = helper.ns()
    client = producer:hub("client/" .. ns)
  end)

  local function owner(id)
    local path = ns .. "/" .. id
    helper.ok(producer:put_node { path = path, node_type = CONSUMER, content = {} })
    return path
  end

  local function publish(path, a, b)
    for i = a, b do
      local seq = helper.ok(client:publish_durable({ namespace = FAMILY, key = path }, { value = i }))
      assert.equal(i, seq)
    end
  end

  local function consumer_mesh(extra)
    local opts = { store = url, plugins = { probe.FIXTURE }, streams = probe.STREAMS }
    for k, v in pairs(extra or {}) do opts[k] = v end
    local mesh = helper.open(opts)
    local delay = ns .. "/delay"
    helper.ok(mesh:put_node { path = delay, node_type = "StreamDelay" })
    probe.reset(delay, 1)
    return mesh
  end

  -- run `mesh` for QUIET_MS: nothing may be handled meanwhile
  local function quiet(mesh)
    local deadline = helper.now(mesh) + QUIET_MS
    mesh:run_until(function() return helper.now(mesh) >= deadline end)
  end

  it("consumes, after durable.host(mesh), what another store appended before and after; "
    .. "without it, nothing", function()
    local early = owner("early")
    publish(early, 1, 3) -- before the consumer mesh exists
    local mesh = consumer_mesh()
    quiet(mesh)
    assert.same({}, probe.snapshot(early), "not hosting: the waiting stream is not consumed")

    local live = owner("live")
    publish(live, 1, 2) -- another store's appends while the consumer runs
    quiet(mesh)
    assert.same({}, probe.snapshot(live), "not hosting: another store's appends wake nobody here")

    assert.is_true(durable.host(mesh))
    helper.run_until(mesh, function() return #probe.of(early) == 3 and #probe.of(live) == 2 end)
    assert.same({ 1, 2, 3 }, probe.snapshot(early))
    assert.same({ 1, 2 }, probe.snapshot(live))

    local later = owner("later")
    publish(later, 1, 2) -- appended by the other store while this one hosts
    helper.run_until(mesh, function() return #probe.of(later) == 2 end)
    assert.same({ 1, 2 }, probe.snapshot(later))
    assert.same({}, probe.violations)
  end)

  it("hosts from the open with durable.open{ host = true }", function()
    local path = owner("opened")
    publish(path, 1, 2)
    local mesh = consumer_mesh { host = true }
    helper.run_until(mesh, function() return #probe.of(path) == 2 end)
    assert.same({ 1, 2 }, probe.snapshot(path))
  end)

  it("refuses a host option that is no boolean, and a mesh that is none", function()
    assert.has_error(function() durable.open { store = url, host = "yes" } end,
      "durable.open: 'host' must be a boolean")
    assert.has_error(function() durable.host({}) end,
      "durable.host(mesh): expects a mesh from durable.open")
  end)
end)
