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

  it("decodes escapes, white space, numbers and repeated keys as jansson reads them", function()
    local cases = {
      { '"plain"', "plain" },
      { '"a\\"b\\\\c\\/d"', 'a"b\\c/d' },
      { '"\\b\\f\\n\\r\\t"', "\b\f\n\r\t" },
      { '"\\u0041\\u00e9\\u20ac"', "A\u{e9}\u{20ac}" },
      { '"\\ud83d\\ude00!"', "\u{1f600}!" },
      { '"x\\u0001y\\u007f"', "x\1y\127" },
      { '"caf\u{e9} \u{1f600}"', "caf\u{e9} \u{1f600}" },
      { ' \t\r\n 7 \n', 7 },
      { "-0", 0 },
      { "9223372036854775807", math.maxinteger },
      { "-9223372036854775808", math.mininteger },
      { "1e2", 100.0 },
      { "-2.5E-1", -0.25 },
      { "1e-400", 0.0 },
      { "0." .. string.rep("0", 80) .. "1", 1e-81 },
      { "true", true },
      { "false", false },
    }
    for _, c in ipairs(cases) do
      local v = durable.decode(c[1])
      assert.equal(c[2], v, c[1])
      assert.equal(math.type(c[2]), math.type(v), c[1])
    end
    assert.equal(durable.null, durable.decode(" null "))
    local v = durable.decode(' { "a" : 1 , "a" : [ 2 , { } , [ ] ] , "b\\n" : { "c" : "d" } } ')
    assert.equal(2, v.a[1])
    assert.same({}, v.a[2])
    assert.equal('{"a":[2,{},[]],"b\\n":{"c":"d"}}', durable.encode(v))
    local deep = string.rep("[", 2000) .. string.rep("]", 2000)
    local depth, at = 0, durable.decode(deep)
    while at do depth, at = depth + 1, at[1] end
    assert.equal(2000, depth)
  end)

  it("decodes what it encodes, for any value", function()
    local seed = os.time()
    math.randomseed(seed)
    local chars = { "a", "Z", "0", " ", '"', "\\", "/", "\n", "\t", "\1", "\31", "\127",
      "\u{e9}", "\u{7ff}", "\u{800}", "\u{ffff}", "\u{10000}", "\u{10ffff}", "$" }
    local function text()
      local t = {}
      for i = 1, math.random(0, 12) do t[i] = chars[math.random(#chars)] end
      return table.concat(t)
    end
    local function value(depth)
      local kind = math.random(depth > 3 and 5 or 7)
      if kind == 1 then return math.random(-1000, 1000) * 10 ^ math.random(-5, 15)
      elseif kind == 2 then return math.random(math.mininteger, math.maxinteger)
      elseif kind == 3 then return text()
      elseif kind == 4 then return math.random(2) == 1
      elseif kind == 5 then return durable.null
      elseif kind == 6 then
        local a = {}
        for i = 1, math.random(0, 5) do a[i] = value(depth + 1) end
        return #a == 0 and durable.array {} or a
      else
        local o = {}
        for _ = 1, math.random(0, 5) do o[text()] = value(depth + 1) end
        return o
      end
    end
    for i = 1, 2000 do
      local text1 = durable.encode(value(0))
      local back = durable.decode(text1)
      assert.equal(text1, durable.encode(back), ("seed %d, value %d"):format(seed, i))
    end
  end)

  it("decodes failures as nil, message, code", function()
    local v, message, code = durable.decode("{")
    assert.is_nil(v)
    assert.matches("invalid JSON", message)
    assert.equal("EINVAL", code)
    for _, bad in ipairs { '"\\u0000"', '"\\ud83d"', '"\\udc00"', '"\255"', "[1,]", "01",
      "1e400", "18446744073709551616", '{"a" 1}', "nul", "", string.rep("[", 3000) .. string.rep("]", 3000) } do
      v, message, code = durable.decode(bad)
      assert.is_nil(v, bad)
      assert.matches("invalid JSON at line", message, 1, true)
      assert.equal("EINVAL", code)
    end
  end)
end)
