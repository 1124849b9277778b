-- json_spec.lua: Lua values <-> JSON text.  Payload and content text is
-- stored as produced, so the same value must always give the same text:
-- "$type" first, then the keys in byte order, compact; integers stay
-- integers.
local helper = require "helper"
local durable = require "durable"

describe("JSON text", function()
  helper.each()

  it("writes $type first, then keys sorted, compact", function()
    local text = durable.encode { z = 1, ["$type"] = "Append", a = { y = true, b = false }, ["!"] = 0 }
    assert.equal('{"$type":"Append","!":0,"a":{"b":false,"y":true},"z":1}', text)
  end)

  it("gives the same text for the same value, whatever the insertion order", function()
    local a, b = {}, {}
    for i = 1, 50 do a["k" .. i] = i end
    for i = 50, 1, -1 do b["k" .. i] = i end
    assert.equal(durable.encode(a), durable.encode(b))
  end)

  it("keeps integers integers and floats floats", function()
    assert.equal('[1,-7,9007199254740993,1.0,0.5]', durable.encode { 1, -7, 9007199254740993, 1.0, 0.5 })
    local v = durable.decode('{"i":9007199254740993,"f":2.0}')
    assert.equal("integer", math.type(v.i))
    assert.equal(9007199254740993, v.i)
    assert.equal("float", math.type(v.f))
  end)

  it("maps JSON null to durable.null and back", function()
    local v = durable.decode('{"a":null,"b":[null,1]}')
    assert.equal(durable.null, v.a)
    assert.equal(durable.null, v.b[1])
    assert.equal('{"a":null,"b":[null,1]}', durable.encode(v))
    assert.equal("null", durable.encode(nil))
  end)

  it("writes 1..n tables as arrays, {} as an object, and keeps a decoded [] an array", function()
    assert.equal('[1,2,3]', durable.encode { 1, 2, 3 })
    assert.equal('{}', durable.encode {})
    assert.equal('[]', durable.encode(durable.array {}))
    assert.equal('{"a":[]}', durable.encode(durable.decode('{"a":[]}')))
  end)

  it("splices durable.json text, and keeps it as given at the top", function()
    assert.equal('{"raw":{"x":[1,2]}}', durable.encode { raw = durable.json('{ "x" : [1, 2] }') })
    assert.equal('{ "x" : [1, 2] }', durable.encode(durable.json('{ "x" : [1, 2] }')))
    assert.has_error(function() durable.json("{not json") end)
  end)

  it("refuses what JSON cannot hold, naming where", function()
    local ok, err = pcall(durable.encode, { a = { b = { 1, function() end } } })
    assert.is_false(ok)
    assert.matches("a.b[2]: cannot encode a function", err, 1, true)
    assert.has_error(function() durable.encode { 1, nil, 3 } end)
    assert.has_error(function() durable.encode { [1] = 1, x = 2 } end)
    assert.has_error(function() durable.encode(0 / 0) end)
    assert.has_error(function() durable.encode("\255") end)
    local t = {}
    t.self = t
    assert.has_error(function() durable.encode(t) end)
  end)

  it("decodes failures as nil, message, code", function()
    local v, message, code = durable.decode("{")
    assert.is_nil(v)
    assert.matches("invalid JSON", message)
    assert.equal("EINVAL", code)
  end)
end)
