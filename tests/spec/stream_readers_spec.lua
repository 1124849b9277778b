-- stream_readers_spec.lua: reading a stream without a lease, and items
-- read from elsewhere.  hub:read_durable gives every item after a sequence,
-- in order, the backlog then the live tail, until closed; it stops at an
-- item it cannot read or one its on_item refuses, and says so.  A source
-- (durable.source, durable.document_parts) reads items where they already
-- are, while the lease and checkpoint stay on the stream node.  The two
-- plugins of the tree run end to end.
local helper = require "helper"
local durable = require "durable"
local probe = require "probe"

local STREAMS = probe.STREAMS

describe("a durable stream reader", function()
  helper.each()

  local mesh, ns, client
  local function open(plugins)
    mesh = helper.open { plugins = plugins or {}, streams = STREAMS }
    ns = helper.ns()
    client = mesh:hub("client/" .. ns)
  end
  local function pause(ms) mesh:run_until(function() return false end, ms) end
  local function publish(id, i, payload)
    assert.equal(i, helper.ok(client:publish_durable(id, payload or { value = i })))
  end

  it("from the middle of a stream gives what follows, then the live tail, until closed", function()
    open()
    local id = { namespace = "Log", key = ns .. "/middle" }
    for i = 1, 10 do publish(id, i) end
    local got = {}
    local sub = client:read_durable(id, 5, function(item)
      assert.equal(item.sequence, item.payload.value)
      got[#got + 1] = item.sequence
    end)
    assert.equal("open", sub:status())
    helper.run_until(mesh, function() return #got == 5 end)
    assert.same({ 6, 7, 8, 9, 10 }, got)
    publish(id, 11)
    publish(id, 12)
    helper.run_until(mesh, function() return #got == 7 end)
    assert.same({ 6, 7, 8, 9, 10, 11, 12 }, got)
    sub:close()
    sub:close() -- idempotent
    assert.equal("closed", sub:status())
    publish(id, 13)
    pause(150)
    assert.equal(7, #got, "nothing after close")
    -- a reader of a stream that does not exist yet waits for it
    local later = { namespace = "Log", key = ns .. "/later" }
    local seen = {}
    local waiting = client:read_durable(later, nil, function(item) seen[#seen + 1] = item.sequence end)
    pause(100)
    publish(later, 1)
    helper.run_until(mesh, function() return #seen == 1 end)
    assert.equal("open", waiting:status())
  end)

  it("hands over every number a producer can append, exactly; refuses the others at the door",
    function()
      open()
      local id = { namespace = "Log", key = ns .. "/numbers" }
      publish(id, 1, durable.json('{"max":9223372036854775807,"min":-9223372036854775808,'
        .. '"r":1e308,"tiny":5e-324,"long":123456789012345678901234567890.5}'))
      local got
      client:read_durable(id, 0, function(item) got = item.payload end)
      helper.run_until(mesh, function() return got ~= nil end)
      assert.equal(math.maxinteger, got.max)
      assert.equal("integer", math.type(got.max))
      assert.equal(math.mininteger, got.min)
      assert.equal(1e308, got.r)
      assert.equal(5e-324, got.tiny)
      assert.equal(123456789012345678901234567890.5, got.long)
      -- an integer beyond 64 bits would reach a reader rounded, or stop it:
      -- refused (a bigger number goes as a string), as `durable publish` and
      -- the C store refuse it
      for _, text in ipairs { '{"i":9223372036854775808}', '[-9223372036854775809]', '1e400' } do
        local ok, err = pcall(durable.json, text)
        assert.is_false(ok, text)
        assert.matches("too big %a* ?integer", err:gsub("real number overflow", "too big integer"))
      end
    end)

  it("stops where on_item raises, or where an item cannot be read, and says why", function()
    open()
    local id = { namespace = "Log", key = ns .. "/stops" }
    for i = 1, 5 do publish(id, i) end
    local got, errors = {}, {}
    local sub = client:read_durable(id, 0, function(item)
      if item.sequence == 3 then error("no third") end
      got[#got + 1] = item.sequence
    end, nil, function(message) errors[#errors + 1] = message end)
    helper.run_until(mesh, function() return #errors == 1 end)
    pause(100)
    assert.same({ 1, 2 }, got)
    assert.matches("on_item failed on item 3: .*no third", errors[1])
    local status, message = sub:status()
    assert.equal("failed", status)
    assert.equal(errors[1], message)
    -- an unreadable payload; no on_error: the log says it
    local _, items_ns = durable.stream_path(id)
    helper.ok(mesh:put_node { path = items_ns .. "/000000000006", node_type = "DurableStreamItem",
      content = { Sequence = 6, PayloadJson = "{oops", AppendedAt = durable.null } })
    publish(id, 7)
    local seen = {}
    local poisoned = client:read_durable(id, 4, function(item) seen[#seen + 1] = item.sequence end)
    helper.run_until(mesh, function() return poisoned:status() == "failed" end)
    assert.same({ 5 }, seen, "stopped at 6, never skipped to 7")
    assert.matches("000000000006 could not be read", select(2, poisoned:status()))
    assert.equal(1, #helper.log_lines("read_durable of Log@" .. id.key .. " stopped: "))
  end)

  it("reads through a durable.source, with the lease and checkpoint still on the stream node",
    function()
      open()
      local owner = ns .. "/src"
      local events = ns .. "/events"
      -- events "e-N" carry their own number; anything else is not an item
      local source = durable.source {
        items_namespace = events,
        sequence_of = function(node) return tonumber(node.id:match("^e%-(%d+)$")) end,
        payload_of = function(node) return { value = node.content.n, id = node.id } end,
      }
      for _, n in ipairs { 2, 1, 3 } do
        helper.ok(mesh:put_node { path = ("%s/e-%d"):format(events, n), content = { n = n } })
      end
      helper.ok(mesh:put_node { path = events .. "/readme", content = { n = 99 } })
      local got = {}
      local sub = client:read_durable({ namespace = "Events", key = owner }, 0,
        function(item) got[#got + 1] = item.payload.id end, source)
      helper.run_until(mesh, function() return #got == 3 end)
      assert.same({ "e-1", "e-2", "e-3" }, got)
      -- the live tail of a source: an item ahead of a gap waits for it
      helper.ok(mesh:put_node { path = events .. "/e-5", content = { n = 5 } })
      pause(100)
      assert.equal(3, #got)
      helper.ok(mesh:put_node { path = events .. "/e-4", content = { n = 4 } })
      helper.run_until(mesh, function() return #got == 5 end)
      assert.same({ "e-1", "e-2", "e-3", "e-4", "e-5" }, got)
      sub:close()
      -- a consumer over the same source: the stream node holds lease and checkpoint
      local id = { namespace = "Events", key = owner }
      local path = durable.stream_path(id)
      helper.ok(mesh:put_node { path = path, node_type = "DurableStream",
        content = { Namespace = "Events", Key = owner } })
      local handled = {}
      local hub = assert(mesh:hub("client/" .. ns .. "/events-consumer"))
      assert.is_true(hub:consume {
        namespace = "Events", key = function() return owner end,
        source = function() return source end,
        handler = function(_, item)
          assert.equal(item.sequence, item.payload.value)
          handled[#handled + 1] = item.sequence
        end,
      })
      helper.run_until(mesh, function() return #handled == 5 end)
      helper.run_until(mesh, function() return helper.ok(mesh:get_node(path)).content.Checkpoint == 5 end)
      assert.equal(hub.address, helper.ok(mesh:get_node(path)).content.Subscriber)
      assert.equal(0, #helper.ok(mesh:query("namespace:" .. path .. "/_DurableStreamItem")),
        "no second copy of the items")
    end)

  it("is refused when used wrongly", function()
    open()
    local id = { namespace = "Log", key = ns .. "/x" }
    assert.has_error(function() client:read_durable(id, -1, function() end) end)
    assert.has_error(function() client:read_durable(id, 1.5, function() end) end)
    assert.has_error(function() client:read_durable(id, 0) end)
    assert.has_error(function() client:read_durable(id, 0, function() end, { items_namespace = "a/b" }) end)
    assert.has_error(function() client:read_durable(id, 0, function() end, nil, "log") end)
    assert.has_error(function() durable.source() end)
    assert.has_error(function() durable.source { items_namespace = "a//b", sequence_of = print } end)
    assert.has_error(function() durable.source { items_namespace = "a/b" } end)
    assert.has_error(function() durable.source { items_namespace = "a/b", sequence_of = print, extra = 1 } end)
    assert.has_error(function() durable.document_parts(42) end)
    assert.has_error(function() durable.document_parts("a/") end)
    assert.is_true(durable.is_source(durable.document_parts("a/b")))
  end)
end)

describe("the DocumentLog plugins", function()
  helper.each()

  it("apply a Document's appends in order, and skip a redelivered item thanks to `applied`", function()
    local mesh = helper.open { plugins = { "plugins/document_log.lua" }, streams = STREAMS }
    local ns = helper.ns()
    local doc = ns .. "/doc"
    local client = mesh:hub("client/" .. ns)
    helper.ok(mesh:put_node { path = doc, node_type = "Document", content = {} })
    local id = { namespace = "DocumentLog", key = doc }
    for i, text in ipairs { "world", "Hello ", "!" } do
      local offset = ({ 0, 0, 11 })[i]
      assert.equal(i, helper.ok(client:publish_durable(id,
        { ["$type"] = "DocumentLogAppend", text = text, offset = offset })))
    end
    helper.run_until(mesh, function() return helper.ok(mesh:get_node(doc)).content.applied == 3 end)
    local node = helper.ok(mesh:get_node(doc))
    assert.equal("Hello world!", node.content.text)
    -- an acknowledgement lost (a crash after the write, before the ack):
    -- items 2 and 3 are handed over again and change nothing
    local path = durable.stream_path(id)
    helper.run_until(mesh, function() return helper.ok(mesh:get_node(path)).content.Checkpoint == 3 end)
    local logged = #helper.logs
    helper.ok(mesh:recycle(doc))
    helper.ok(mesh:update_node(path, function(n)
      n.content.Checkpoint = 1
      return n
    end))
    assert.is_not_nil(mesh:hub(doc)) -- a fresh activation claims, resuming after 1
    helper.run_until(mesh, function() return helper.ok(mesh:get_node(path)).content.Checkpoint == 3 end)
    -- since the recycle, one grant, resuming after 1 (its epoch depends on
    -- how many claims the first activation took: its start and the wake of
    -- the first append may both claim)
    local grants = helper.log_lines("DocumentLog@" .. doc .. ": lease granted to " .. doc, logged)
    assert.equal(1, #grants, table.concat(helper.log_lines("DocumentLog@" .. doc), "\n"))
    assert.truthy(grants[1]:find(", checkpoint 1, last 3)", 1, true), grants[1])
    local again = helper.ok(mesh:get_node(doc))
    assert.equal("Hello world!", again.content.text)
    assert.equal(node.version, again.version, "the redelivered items wrote nothing")
    -- and a bad append stops at its item, retried, never skipped
    assert.equal(4, helper.ok(client:publish_durable(id, { ["$type"] = "Other", text = "x" })))
    helper.run_until(mesh, function() return #helper.log_lines("item 4 is not a DocumentLogAppend") >= 1 end)
    assert.equal(3, helper.ok(mesh:get_node(doc)).content.applied)
  end)

  it("consume a PartedDocument's six-digit parts through durable.document_parts", function()
    local mesh = helper.open { plugins = { "plugins/document_parts.lua" }, streams = STREAMS }
    local ns = helper.ns()
    local doc = ns .. "/parted"
    helper.ok(mesh:put_node { path = doc, node_type = "PartedDocument", content = {} })
    local function part(id, text)
      helper.ok(mesh:put_node { path = doc .. "/_DocumentPart/" .. id, node_type = "DocumentPart",
        content = { text = text } })
    end
    part("000000", "a")
    part("000001", "b")
    part("42", "X")        -- not six digits
    part("0000002", "Y")   -- seven
    part("00000a", "Z")    -- not digits
    -- the lease and the checkpoint live on {doc}/_DurableStream/DocumentLog;
    -- a producer made it (here: by hand), and the owner's activation claims
    local path = durable.stream_path { namespace = "DocumentLog", key = doc }
    helper.ok(mesh:put_node { path = path, node_type = "DurableStream",
      content = { Namespace = "DocumentLog", Key = doc } })
    assert.is_not_nil(mesh:hub(doc))
    helper.run_until(mesh, function() return helper.ok(mesh:get_node(doc)).content.parts_applied == 2 end)
    assert.equal("ab", helper.ok(mesh:get_node(doc)).content.text)
    part("000002", "c")
    helper.run_until(mesh, function() return helper.ok(mesh:get_node(doc)).content.parts_applied == 3 end)
    mesh:run_until(function() return false end, 100)
    assert.equal("abc", helper.ok(mesh:get_node(doc)).content.text)
    local state = helper.ok(mesh:get_node(path)).content
    assert.equal(3, state.Checkpoint)
    assert.equal(doc, state.Subscriber)
    -- a reader over the same parts sees them with sequence = index + 1
    local got = {}
    local sub = mesh:hub("client/" .. ns):read_durable({ namespace = "DocumentLog", key = doc }, 1,
      function(item) got[#got + 1] = item.sequence .. "=" .. item.payload.text end,
      durable.document_parts(doc))
    helper.run_until(mesh, function() return #got == 2 end)
    assert.same({ "2=b", "3=c" }, got)
    sub:close()
  end)
end)
