-- stream_groups_spec.lua: consumer groups -- several independent leased
-- consumers of one stream, each with its own lease, checkpoint and
-- effects; where a new group starts; what holds a trim back and what
-- detaches; an operator's seek and delete of a group.
local helper = require "helper"
local durable = require "durable"
local cmd = require "command"

local FIXTURE = helper.fixture "groups.lua"
local STREAMS = { backoff_min_ms = 20, backoff_max_ms = 60, holder_probe_ms = 200, reclaim_ms = 300 }

describe("consumer groups", function()
  helper.each()

  local mesh, ns, client
  local function setup()
    mesh = helper.open { plugins = { FIXTURE }, streams = STREAMS }
    ns = helper.ns()
    client = mesh:hub("client/" .. ns)
  end
  local function node(path) return helper.ok(mesh:get_node(path)) end
  local function stream_path(family, key) return durable.stream_path { namespace = family, key = key } end
  local function group_node(family, key, group)
    return node(stream_path(family, key) .. "/_DurableStreamGroup/" .. group)
  end
  -- a group's checkpoint, -1 while it has no node yet
  local function group_checkpoint(family, key, group)
    local n = helper.ok(mesh:get_node(stream_path(family, key) .. "/_DurableStreamGroup/" .. group))
    return n and n.content.Checkpoint or -1
  end
  local function publish(family, key, n)
    return helper.ok(client:publish_durable({ namespace = family, key = key }, { n = n }))
  end
  -- a Doc owner in this test's namespace, items 1..n published to its Edits
  local function doc_with(n)
    local owner = ns .. "/doc"
    helper.ok(mesh:put_node { path = owner, node_type = "Doc", content = {} })
    for i = 1, n do publish("Edits", owner, i) end
    return owner
  end
  -- whether each group named acknowledged item n of owner's Edits
  local function groups_at(owner, n, ...)
    for _, g in ipairs({ ... }) do
      if group_checkpoint("Edits", owner, g) ~= n then return false end
    end
    return true
  end
  local function seq(from, to)
    local t = {}
    for i = from, to do t[#t + 1] = i end
    return t
  end
  local function absent(v) return v == nil or v == durable.null end
  local function sleep(ms)
    local until_ms = helper.now(mesh) + ms
    helper.run_until(mesh, function() return helper.now(mesh) >= until_ms end, ms + 1000)
  end

  it("hands every item once, in order, to each group at its own pace", function()
    setup()
    local seen, held = package.loaded.groups_seen, package.loaded.groups_held
    held.on, held.waiting = true, {}
    local owner = doc_with(30)
    helper.run_until(mesh, function() return groups_at(owner, 30, "audit", "search") end)
    -- the slow group holds its first item: the others did not wait for it
    assert.same({ 1 }, seen.slow[owner])
    assert.equal(0, group_node("Edits", owner, "slow").content.Checkpoint)
    held.on = false
    for _, open in ipairs(held.waiting) do open() end
    helper.run_until(mesh, function() return groups_at(owner, 30, "slow") end)
    for _, g in ipairs({ "audit", "search", "slow" }) do
      assert.same(seq(1, 30), seen[g][owner], g)
      local gn = group_node("Edits", owner, g)
      assert.equal("DurableStreamGroup", gn.node_type)
      assert.equal(g, gn.content.Group)
      assert.equal(owner, gn.content.Subscriber)
    end
    -- each group's effects went with its own acknowledgements
    for i = 1, 30 do assert.equal(i, node(owner .. "/_audit/" .. i).content.n) end
    assert.equal(30, node(owner).content.indexed)
    -- counted per group: each handled every item once, none again
    local counts = mesh:stats().streams["Edits@" .. owner]
    for _, g in ipairs({ "audit", "search", "slow" }) do
      assert.equal(30, counts.groups[g].handled, g)
      assert.equal(0, counts.groups[g].redelivered, g)
    end
    assert.equal(30, counts.appended)
    assert.equal(0, counts.handled)
    -- the stream's own lease was never taken: nobody consumes it alone
    local s = node(stream_path("Edits", owner)).content
    assert.equal(0, s.Checkpoint)
    assert.is_true(absent(s.Subscriber))
  end)

  it("wakes an owner that left for the groups its items wait for", function()
    setup()
    local seen = package.loaded.groups_seen
    package.loaded.groups_held.on = false
    local owner = doc_with(3)
    helper.run_until(mesh, function() return groups_at(owner, 3, "slow") end)
    for _ = 1, 2 do -- twice: each orphan period wakes it once
      helper.ok(mesh:recycle(owner)) -- its three leases are released
      helper.run_until(mesh, function()
        for _, g in ipairs({ "audit", "search", "slow" }) do
          if not absent(group_node("Edits", owner, g).content.Subscriber) then return false end
        end
        return true
      end)
      assert.is_nil(helper.find(mesh, owner))
      local last = publish("Edits", owner, 0) -- nobody activates the owner but the wake
      helper.run_until(mesh, function() return groups_at(owner, last, "audit", "search", "slow") end)
    end
    for _, g in ipairs({ "audit", "search", "slow" }) do assert.same(seq(1, 5), seen[g][owner]) end
  end)

  it("takes one group's lease over from a process that is gone, the others staying put", function()
    setup()
    local seen = package.loaded.groups_seen
    package.loaded.groups_held.on = false
    local owner = doc_with(3)
    helper.run_until(mesh, function() return groups_at(owner, 3, "audit", "search", "slow") end)
    local before = {}
    for _, g in ipairs({ "search", "slow" }) do before[g] = group_node("Edits", owner, g).content.LeaseEpoch end
    -- the audit group's lease as a process that died would have left it
    local path = stream_path("Edits", owner) .. "/_DurableStreamGroup/audit"
    helper.ok(mesh:update_node(path, function(n)
      n.content.Subscriber = owner
      n.content.SubscriberInstance = "elsewhere:4242:" .. ("0"):rep(16)
      n.content.LeaseEpoch = n.content.LeaseEpoch + 1
      return n
    end))
    for i = 4, 6 do publish("Edits", owner, i) end
    helper.run_until(mesh, function() return groups_at(owner, 6, "audit", "slow") end, 10000)
    assert.equal(1, #helper.log_lines("Edits@" .. owner .. " group audit: " .. owner .. " TOOK OVER the lease"))
    for _, g in ipairs({ "search", "slow" }) do
      assert.equal(before[g], group_node("Edits", owner, g).content.LeaseEpoch, g .. " stayed put")
    end
    assert.same(seq(1, 6), seen.slow[owner])
    -- nothing acknowledged handed over again: the item in flight when the
    -- lease was taken may come once more
    local audit = seen.audit[owner]
    for j = 2, #audit do assert.is_true(audit[j] == audit[j - 1] + 1 or audit[j] == audit[j - 1]) end
    assert.is_true(#audit <= 7, table.concat(audit, " "))
    assert.equal(6, audit[#audit])
  end)

  it("keeps each group's dead letters apart", function()
    setup()
    local owner = ns .. "/log"
    publish("Notes", owner, 1)
    local good = {}
    local hub = mesh:hub("reader/" .. ns)
    assert(hub:consume { namespace = "Notes", key = function() return owner end, group = "picky",
      max_attempts = 2, handler = function() error("picky refuses it") end })
    assert(hub:consume { namespace = "Notes", key = function() return owner end, group = "easy",
      handler = function(_, item) good[#good + 1] = item.sequence end })
    local letters
    helper.run_until(mesh, function()
      letters = helper.ok(mesh:query("namespace:" .. stream_path("Notes.dead.picky", owner) .. "/_DurableStreamItem"))
      return #letters == 1
    end, 10000)
    assert.equal(1, group_checkpoint("Notes", owner, "picky"))
    assert.same({ 1 }, good)
    local letter = durable.decode(letters[1].content.PayloadJson)
    assert.equal("picky", letter.Group)
    assert.equal(1, letter.Sequence)
    assert.equal(2, letter.Attempts)
    assert.is_nil(helper.ok(mesh:get_node(stream_path("Notes.dead", owner))))
    assert.equal(1, group_checkpoint("Notes", owner, "easy"))
  end)

  it("starts a new group at the earliest, the latest, a sequence or a time", function()
    setup()
    local owner = ns .. "/log"
    for i = 1, 3 do publish("Notes", owner, i) end
    sleep(30)
    for i = 4, 5 do publish("Notes", owner, i) end
    -- the time item 4 was appended at: the first at or after it is item 4
    local t = node(stream_path("Notes", owner) .. "/_DurableStreamItem/000000000004").content.AppendedAt
    local got = {}
    local function consume(group, start)
      got[group] = {}
      local hub = mesh:hub("reader/" .. ns .. "/" .. group)
      assert(hub:consume { namespace = "Notes", key = function() return owner end, group = group,
        start = start, handler = function(_, item) table.insert(got[group], item.sequence) end })
    end
    consume("earliest", "earliest")
    consume("latest", "latest")
    consume("third", 3)
    consume("since", t)
    helper.run_until(mesh, function()
      return #got.earliest == 5 and #got.third == 3 and #got.since == 2
    end)
    for i = 6, 7 do publish("Notes", owner, i) end
    helper.run_until(mesh, function() return #got.earliest == 7 and #got.latest == 2 end)
    assert.same(seq(1, 7), got.earliest)
    assert.same({ 6, 7 }, got.latest)
    assert.same(seq(3, 7), got.third)
    assert.same(seq(4, 7), got.since)
    -- chosen when the group was made, written there, never changed after
    assert.equal("latest", group_node("Notes", owner, "latest").content.Start)
    assert.equal("3", group_node("Notes", owner, "third").content.Start)
  end)

  it("makes nothing for an owner whose groups have no stream", function()
    setup()
    for i = 1, 20 do
      helper.ok(mesh:put_node { path = ns .. "/q" .. i, node_type = "Quiet", content = {} })
      helper.ok(mesh:read(ns .. "/q" .. i)) -- activated: its three consumers start
    end
    sleep(200)
    for i = 1, 20 do
      assert.same({}, helper.ok(mesh:query("namespace:" .. ns .. "/q" .. i .. "/_DurableStream")))
    end
    -- the first append wakes the dormant consumers: each makes its group
    assert.equal(1, publish("Hush", ns .. "/q1", 1))
    for _, g in ipairs({ "a", "b", "c" }) do
      helper.run_until(mesh, function()
        local n = helper.ok(mesh:get_node(stream_path("Hush", ns .. "/q1") .. "/_DurableStreamGroup/" .. g))
        return n ~= nil and n.content.Checkpoint == 1
      end)
    end
    assert.same({}, helper.ok(mesh:query("namespace:" .. ns .. "/q2/_DurableStream")))
  end)

  it("never trims what a group has not acknowledged", function()
    setup()
    local held = package.loaded.groups_held
    held.on, held.waiting = true, {}
    local owner = doc_with(10)
    helper.run_until(mesh, function() return groups_at(owner, 10, "audit", "search") and #held.waiting == 1 end)
    local stream = { namespace = "Edits", key = owner }
    local message = helper.fails(mesh:trim_durable(stream, 5), "EINVAL")
    assert.matches("item 1 is not acknowledged (group slow's checkpoint 0)", message, 1, true)
    -- a retention policy trims only as far as every group allows
    helper.ok(mesh:set_retention("Edits", "0"))
    held.on = false
    held.waiting[1]()
    helper.run_until(mesh, function() return groups_at(owner, 10, "slow") end)
    -- (the policy is read back within about 5 s)
    helper.run_until(mesh, function()
      return (node(stream_path("Edits", owner)).content.TrimmedThrough or 0) == 10
        and #helper.ok(mesh:query("namespace:" .. stream_path("Edits", owner) .. "/_DurableStreamItem")) == 0
    end, 15000)
  end)

  it("detaches an idle group, which then stops clearly behind the trim until sought", function()
    setup()
    local owner = ns .. "/log"
    local stream = { namespace = "Notes", key = owner }
    local got = { live = {}, idle = {} }
    local function consume(group, detach)
      local hub = mesh:hub("reader/" .. ns .. "/" .. group)
      assert(hub:consume { namespace = "Notes", key = function() return owner end, group = group,
        detach = detach, handler = function(_, item) table.insert(got[group], item.sequence) end })
    end
    for i = 1, 5 do publish("Notes", owner, i) end
    consume("live")
    consume("idle", { idle = "300ms" })
    helper.run_until(mesh, function() return #got.live == 5 and #got.idle == 5 end)
    helper.ok(mesh:recycle("reader/" .. ns .. "/idle")) -- its consumer goes
    for i = 6, 10 do publish("Notes", owner, i) end
    helper.run_until(mesh, function() return #got.live == 10 end)
    -- held back by the idle group, until it has been idle past its bound
    assert.matches("group idle", helper.fails(mesh:trim_durable(stream, 10), "EINVAL"), 1, true)
    sleep(400)
    assert.equal(10, helper.ok(mesh:trim_durable(stream, 10)))
    helper.run_until(mesh, function() return #helper.log_lines("group idle DETACHED") == 1 end)
    assert.equal(1, mesh:stats().streams["Notes@" .. owner].groups.idle.detached) -- counted
    local idle = group_node("Notes", owner, "idle").content
    assert.is_string(idle.DetachedAt)
    assert.equal(5, idle.Checkpoint) -- it keeps its checkpoint
    -- back, it is behind what was trimmed: it says so and skips nothing
    local since = #helper.logs
    consume("idle")
    helper.run_until(mesh, function() return #helper.log_lines("is behind the trim", since) >= 1 end)
    local line = helper.log_lines("is behind the trim", since)[1]
    assert.matches("items up to 10 were trimmed", line, 1, true)
    assert.matches("durable seek Notes " .. owner .. " --group idle --to 10", line, 1, true)
    assert.same(seq(1, 5), got.idle)
    -- the operator's way on: the group's checkpoint past the trim
    assert.equal(5, helper.ok(mesh:seek_durable({ namespace = "Notes", key = owner, group = "idle" }, 10)))
    publish("Notes", owner, 11)
    helper.run_until(mesh, function() return #got.idle == 6 end, 10000)
    assert.same({ 1, 2, 3, 4, 5, 11 }, got.idle)
    assert.is_true(absent(group_node("Notes", owner, "idle").content.DetachedAt)) -- it pins again
  end)

  it("detaches nothing for a trim that is refused", function()
    setup()
    local owner = ns .. "/log"
    local stream = { namespace = "Notes", key = owner }
    local got = {}
    for i = 1, 5 do publish("Notes", owner, i) end
    assert(mesh:hub("reader/" .. ns):consume { namespace = "Notes", key = function() return owner end,
      group = "live", handler = function(_, item) got[#got + 1] = item.sequence end })
    helper.run_until(mesh, function() return group_checkpoint("Notes", owner, "live") == 5 end)
    assert.matches("its items are 1 to 5",
      helper.fails(mesh:trim_durable(stream, 100, { force = true }), "EINVAL"), 1, true)
    sleep(100)
    assert.same({}, helper.log_lines("DETACHED"))
    assert.is_true(absent(group_node("Notes", owner, "live").content.DetachedAt))
    helper.ok(mesh:recycle("reader/" .. ns))
    for i = 6, 10 do publish("Notes", owner, i) end
    assert.matches("group live's checkpoint 5", helper.fails(mesh:trim_durable(stream, 10), "EINVAL"), 1, true)
  end)

  it("detaches a group held past its bound of items, or of age", function()
    setup()
    local owner = ns .. "/log"
    local stream = { namespace = "Notes", key = owner }
    local gates, got = {}, { live = 0 }
    local function consume(group, detach)
      local hub = mesh:hub("reader/" .. ns .. "/" .. group)
      assert(hub:consume { namespace = "Notes", key = function() return owner end, group = group,
        detach = detach, handler = function()
          if group == "live" then got.live = got.live + 1 return end
          local c, open = durable.completion()
          gates[#gates + 1] = open
          return c
        end })
    end
    publish("Notes", owner, 1)
    consume("live")
    consume("few", { items = 3 })
    consume("young", { age = "300ms" })
    helper.run_until(mesh, function() return got.live == 1 and #gates == 2 end)
    -- both hold item 1 in their handlers; 2 more: within both bounds
    publish("Notes", owner, 2)
    publish("Notes", owner, 3)
    helper.run_until(mesh, function() return got.live == 3 end)
    assert.matches("group few's checkpoint 0", helper.fails(mesh:trim_durable(stream, 3), "EINVAL"), 1, true)
    publish("Notes", owner, 4) -- "few" is 4 behind now
    helper.run_until(mesh, function() return got.live == 4 end)
    local message = helper.fails(mesh:trim_durable(stream, 4), "EINVAL")
    assert.matches("group young's checkpoint 0", message, 1, true) -- "few" detached
    sleep(400) -- "young"'s oldest item is older than its bound now
    assert.equal(4, helper.ok(mesh:trim_durable(stream, 4)))
    helper.run_until(mesh, function()
      return #helper.log_lines("group few DETACHED: 4 items behind, more than its bound of 3") == 1
        and #helper.log_lines("group young DETACHED: its oldest unacknowledged item is") == 1
    end)
    for _, open in ipairs(gates) do open() end
  end)

  it("deletes a group only unheld, unless forced", function()
    setup()
    local owner = ns .. "/log"
    local got, kept = {}, {}
    for i = 1, 3 do publish("Notes", owner, i) end
    local hub = mesh:hub("reader/" .. ns)
    assert(hub:consume { namespace = "Notes", key = function() return owner end, group = "g1",
      handler = function(_, item) got[#got + 1] = item.sequence end })
    assert(mesh:hub("reader2/" .. ns):consume { namespace = "Notes", key = function() return owner end,
      group = "g2", handler = function(_, item) kept[#kept + 1] = item.sequence end })
    helper.run_until(mesh, function() return #got == 3 and #kept == 3 end)
    local group = { namespace = "Notes", key = owner, group = "g1" }
    assert.matches("needs --force", helper.fails(mesh:delete_durable_group(group), "ECONFLICT"), 1, true)
    helper.ok(mesh:recycle("reader/" .. ns)) -- g1's consumer goes; g2's keeps up
    for i = 4, 5 do publish("Notes", owner, i) end
    helper.run_until(mesh, function() return group_checkpoint("Notes", owner, "g2") == 5 end)
    local stream = { namespace = "Notes", key = owner }
    assert.matches("group g1's checkpoint 3", helper.fails(mesh:trim_durable(stream, 5), "EINVAL"), 1, true)
    assert.equal(3, helper.ok(mesh:delete_durable_group(group)))
    assert.equal(5, helper.ok(mesh:trim_durable(stream, 5))) -- nothing holds it back now
    assert.is_nil(helper.ok(mesh:get_node(stream_path("Notes", owner) .. "/_DurableStreamGroup/g1")))
    assert.equal("ENOTFOUND", select(3, mesh:delete_durable_group(group):wait(5000)))
    -- the stream itself is not deleted under a group's consumer either
    assert.matches("(group g2)", helper.fails(mesh:delete_durable(stream), "ECONFLICT"), 1, true)
    assert.equal(0, helper.ok(mesh:delete_durable(stream, { force = true }))) -- all trimmed
    assert.same({}, helper.ok(mesh:query("namespace:" .. stream_path("Notes", owner) .. "/_DurableStreamGroup")))
    -- made anew by a publish: the group's consumer, fenced, starts it again
    publish("Notes", owner, 1)
    helper.run_until(mesh, function() return #kept == 6 end, 10000)
    assert.same({ 1, 2, 3, 4, 5, 1 }, kept)
    helper.run_until(mesh, function() return group_checkpoint("Notes", owner, "g2") == 1 end)
  end)

  it("checks a group's name, start and detach where it is declared", function()
    setup()
    local hub = mesh:hub("reader/" .. ns)
    local function bad(t, text)
      t.namespace, t.handler = "Notes", function() end
      local ok, message = pcall(hub.consume, hub, t)
      assert.is_false(ok)
      assert.matches(text, message, 1, true)
    end
    bad({ group = "no spaces" }, "may hold only letters")
    bad({ group = ("x"):rep(65) }, "at most 64")
    bad({ group = "g", start = "tomorrow" }, "is not where a group starts")
    bad({ group = "g", start = 0 }, "1 or more")
    bad({ start = "latest" }, "start and detach are a consumer group's")
    bad({ group = "g", detach = { idle = 5 } }, "detach.idle must be a duration")
    bad({ group = "g", detach = { idle = "all" } }, "detach.idle must be a duration")
    bad({ group = "g", detach = { age = "never" } }, "detach.age must be a duration")
    bad({ group = "g", detach = { items = 0 } }, "detach.items must be an integer >= 1")
  end)

  describe("as an operator sees them", function()
    local store
    local function run(args)
      args.store = store
      return cmd.run(args)
    end
    local function lines(out)
      local t = {}
      for line in out:gmatch("[^\n]+") do t[#t + 1] = durable.decode(line) end
      return t
    end
    -- Six Edits on a Doc of a store of its own, handled by the groups audit
    -- and search, while slow holds its first (held.waiting[1] lets it go
    -- on): the owner, and the fixture's `held`.
    local function six_edits_slow_held()
      store = helper.store()
      mesh = helper.open { store = store, plugins = { FIXTURE }, streams = STREAMS }
      ns = helper.ns()
      client = mesh:hub("client/" .. ns)
      local held = package.loaded.groups_held
      held.on, held.waiting = true, {}
      local owner = doc_with(6)
      helper.run_until(mesh, function() return groups_at(owner, 6, "audit", "search") and #held.waiting == 1 end)
      return owner, held
    end

    it("serves metrics per group, labelled family and group", function()
      store = helper.store()
      mesh = helper.open { store = store, streams = STREAMS }
      ns = helper.ns()
      client = mesh:hub("client/" .. ns)
      -- a family of this test alone: the metrics sum over the store's streams
      local family = "Metered" .. ns:gsub("%W", "")
      local owner = ns .. "/doc"
      local handled, gates = 0, {}
      for i = 1, 4 do publish(family, owner, i) end
      local hub = mesh:hub("reader/" .. ns)
      assert(hub:consume { namespace = family, key = function() return owner end, group = "fast",
        handler = function() handled = handled + 1 end })
      assert(hub:consume { namespace = family, key = function() return owner end, group = "held",
        handler = function()
          local c, open = durable.completion()
          gates[#gates + 1] = open
          return c
        end })
      helper.run_until(mesh, function()
        return group_checkpoint(family, owner, "fast") == 4 and #gates == 1
      end)
      assert.is_true(mesh:serve_metrics("127.0.0.1:0"))
      local port
      helper.run_until(mesh, function()
        for _, line in ipairs(helper.log_lines("serving metrics at")) do
          port = port or line:match("http://127%.0%.0%.1:(%d+)/metrics")
        end
        return port ~= nil
      end)
      -- curl in the background: this loop serves it meanwhile
      local file = helper.tmpname(".metrics")
      os.execute(("(curl -s -o %s.part http://127.0.0.1:%s/metrics; mv %s.part %s) &")
        :format(file, port, file, file))
      local text
      helper.run_until(mesh, function()
        text = cmd.read_file(file)
        return text ~= nil
      end, 10000)
      local function has(line) assert.matches(line:gsub("FAMILY", family), text, 1, true) end
      has('durable_stream_lag{family="FAMILY",group="held"} 4')
      has('durable_stream_lag{family="FAMILY",group="fast"} 0')
      has('durable_stream_handled_total{family="FAMILY",group="fast"} 4')
      has('durable_stream_redelivered_total{family="FAMILY",group="fast"} 0')
      has('durable_stream_lag{family="FAMILY"} 0') -- consumed only in groups
      has('durable_stream_appended_total{family="FAMILY"} 4')
      for _, open in ipairs(gates) do open() end
    end)

    it("lists each group under its stream, seeks one and deletes one", function()
      local owner, held = six_edits_slow_held()
      local code, out, err = run { "streams", "--json" }
      assert.equal(0, code, err)
      local rows = {}
      for _, row in ipairs(lines(out)) do
        if row.key == owner then rows[#rows + 1] = row end
      end
      assert.equal(4, #rows)
      assert.equal(durable.null, rows[1].group)
      assert.equal(3, rows[1].groups)
      assert.equal(0, rows[1].lag) -- consumed only in groups: no lag of its own
      local by = {}
      for i = 2, 4 do by[rows[i].group] = rows[i] end
      assert.equal(6, by.audit.checkpoint)
      assert.equal(0, by.audit.lag)
      assert.equal(owner, by.audit.subscriber)
      assert.equal(0, by.slow.checkpoint)
      assert.equal(6, by.slow.lag) -- exact: last - the group's checkpoint
      assert.is_number(by.slow.oldest_unacknowledged_age_ms)
      assert.equal("earliest", by.slow.start)
      assert.equal(durable.null, by.slow.detached_at)
      code, out, err = run { "streams" }
      assert.equal(0, code, err)
      assert.matches("Edits@" .. owner .. "#slow%s+6%s+0%s+6", out)
      -- the operator skips the slow group ahead: only it moves
      code, out, err = run { "seek", "Edits", owner, "--group", "slow", "--to", "4" }
      assert.equal(0, code, err)
      assert.equal("Edits@" .. owner .. " group slow: checkpoint 4 (was 0)\n", out)
      held.on = false
      for _, open in ipairs(held.waiting) do open() end
      helper.run_until(mesh, function() return groups_at(owner, 6, "slow") end)
      assert.same({ 1, 5, 6 }, package.loaded.groups_seen.slow[owner])
      assert.equal(6, group_node("Edits", owner, "audit").content.Checkpoint)
      -- a group held by a consumer is deleted only with --force
      code, out, err = run { "group", "delete", "Edits", owner, "audit" }
      assert.equal(1, code)
      assert.matches("needs --force", err, 1, true)
      code, out, err = run { "group", "delete", "Edits", owner, "audit", "--force" }
      assert.equal(0, code, err)
      assert.equal("Edits@" .. owner .. ": group deleted (it had acknowledged up to 6)\n", out)
      code, out, err = run { "seek", "Edits", owner, "--group", "nope", "--to", "1" }
      assert.equal(1, code)
      assert.matches("consumer group does not exist", err, 1, true)
      code, out, err = run { "dead", "Edits", owner, "--group", "slow" }
      assert.equal(0, code, err)
      assert.equal("", out)
      code = run { "group", "remove", "Edits", owner, "slow" }
      assert.equal(2, code)
    end)

    it("trims past a slow group named with --group, which goes on after it", function()
      local owner, held = six_edits_slow_held()
      local code, out, err = run { "trim", "Edits", owner, "--through", "4" }
      assert.equal(1, code)
      assert.matches("group slow's checkpoint 0", err, 1, true)
      -- naming another group passes only that one: slow still holds it back
      code, out, err = run { "trim", "Edits", owner, "--through", "4", "--group", "audit" }
      assert.equal(1, code)
      assert.matches("Trimming durable stream Edits@" .. owner .. " (group audit at 6 already) failed: "
        .. "cannot trim", err, 1, true)
      assert.matches("group slow's checkpoint 0", err, 1, true)
      assert.equal(6, group_checkpoint("Edits", owner, "audit")) -- never moved back
      code, out, err = run { "trim", "Edits", owner, "--through", "4", "--group", "nope" }
      assert.equal(1, code)
      assert.matches("consumer group does not exist", err, 1, true)
      -- the slow group caught up to 4 first, then the trim
      code, out, err = run { "trim", "Edits", owner, "--through", "4", "--group", "slow" }
      assert.equal(0, code, err)
      assert.equal("Edits@" .. owner .. ": trimmed through 4 (4 items deleted); group slow at or past it\n", out)
      assert.equal(4, group_checkpoint("Edits", owner, "slow"))
      assert.is_true(absent(group_node("Edits", owner, "slow").content.DetachedAt))
      assert.equal(6, group_checkpoint("Edits", owner, "audit"))
      assert.equal(4, node(stream_path("Edits", owner)).content.TrimmedThrough)
      -- it goes on after 4 (item 1, begun when it was fenced, may finish)
      held.on = false
      for _, open in ipairs(held.waiting) do open() end
      helper.run_until(mesh, function() return groups_at(owner, 6, "slow") end)
      assert.same({ 1, 5, 6 }, package.loaded.groups_seen.slow[owner])
      -- from Lua: a group at or past the trim stays where it is
      assert.equal(1, helper.ok(mesh:trim_durable({ namespace = "Edits", key = owner, group = "audit" }, 5)))
      assert.equal(6, group_checkpoint("Edits", owner, "audit"))
      assert.has_error(function() mesh:trim_durable({ namespace = "Edits", key = owner, group = "a/b" }, 5) end)
    end)

    it("decides a trim's --group on the group as stored, not as another process last saw it", function()
      local owner, held = six_edits_slow_held()
      local other = helper.open { store = store, streams = STREAMS }
      local slow = { namespace = "Edits", key = owner, group = "slow" }
      assert.equal(0, helper.ok(other:seek_durable(slow, 5))) -- `other` saw slow at 5 ...
      local code, _, err = run { "seek", "Edits", owner, "--group", "slow", "--to", "1" }
      assert.equal(0, code, err) -- ... and slow went back to 1 elsewhere
      assert.equal(4, helper.ok(other:trim_durable(slow, 4)))
      assert.equal(4, group_checkpoint("Edits", owner, "slow"))
      held.on = false
      for _, open in ipairs(held.waiting) do open() end
      other:close()
    end)
  end)
end)
