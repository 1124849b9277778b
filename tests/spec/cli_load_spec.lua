-- cli_load_spec.lua: `durable publish NAMESPACE KEY -`, a bulk load of JSON
-- lines from standard input: every line an item, in order; a summary line,
-- or every sequence with --print; a bad line stops it, naming the line,
-- with the lines before it appended and none after; with --id-field a
-- load cut off half-way and run again appends every line once, in order.
local json = require "dkjson"

local cmd = require "command"
local run, spawn = cmd.run, cmd.spawn

describe("durable publish - (" .. cmd.KIND .. ")", function()
  local KEY
  before_each(function()
    cmd.begin("loadspec")
    KEY = cmd.ns .. "/doc"
    assert.equal(0, (run{ "put", KEY, "Doc", "{}" })) -- the stream's owner
  end)
  after_each(cmd.finish)

  -- the stream's items: payloads, in sequence order (checked contiguous)
  local function items()
    local code, out, err = run{ "read", "Log", KEY }
    assert.equal(0, code, err)
    local list = {}
    for line in out:gmatch("[^\n]+") do
      local item = json.decode(line)
      assert.equal(#list + 1, item.sequence)
      list[#list + 1] = item.payload
    end
    return list
  end

  local function lines(from, to)
    local t = {}
    for i = from, to do t[#t + 1] = ('{"id":"k%d","i":%d}'):format(i, i) end
    return table.concat(t, "\n") .. "\n"
  end

  it("appends every line in order and says how many", function()
    local code, out, err = run{ "publish", "Log", KEY, "-", stdin = lines(1, 500) .. "\n  \n" }
    assert.equal(0, code, err)
    assert.equal("502 lines: 500 items appended, 0 answered by their publish ids; sequences 1-500\n", out)
    local got = items()
    assert.equal(500, #got)
    for i = 1, 500 do assert.equal(i, got[i].i) end
    code, out, err = run{ "publish", "Log", KEY, "-", "--print", stdin = lines(501, 503) }
    assert.equal(0, code, err)
    assert.equal("501\n502\n503\n", out)
    -- an id twice in one load: one item, the second line answered by it
    code, out, err = run{ "publish", "Log", KEY, "-", "--id-field", "id",
      stdin = '{"id":"d1","i":504}\n{"id":"d1","i":505}\n{"id":"d2","i":506}\n' }
    assert.equal(0, code, err)
    assert.equal("3 lines: 2 items appended, 1 answered by their publish ids; sequences 504-505\n", out)
    -- nothing to load is no error
    code, out, err = run{ "publish", "Log", KEY, "-", stdin = "" }
    assert.equal(0, code, err)
    assert.equal("0 lines: nothing to append\n", out)
  end)

  it("stops at a bad line, naming it, with the lines before it appended and none after", function()
    for _, bad in ipairs { "{oops", "null", '"', "[1," } do
      local ns = cmd.ns .. "/" .. #bad
      local code, out, err = run{ "publish", "Log", ns, "-", "--no-owner",
        stdin = lines(1, 40) .. bad .. "\n" .. lines(41, 50) }
      assert.equal(1, code, err)
      assert.equal("", out)
      assert.matches("^durable: publish: line 41: .*; the lines before it were appended, none after\n$", err)
      KEY = ns
      local got = items()
      assert.equal(40, #got)
      for i = 1, 40 do assert.equal(i, got[i].i) end
    end
    -- a line without its id field
    local code, _, err = run{ "publish", "Log", KEY, "-", "--id-field", "id", "--no-owner",
      stdin = '{"i":1}\n' }
    assert.equal(1, code)
    assert.matches("line 1: it has no field 'id' that is a string or an integer", err, 1, true)
  end)

  it("finishes a load killed half-way when run again with --id-field: every line once, in order", function()
    local N = 50000
    local file = cmd.tmpname()
    cmd.spit(file, lines(1, N))
    local job = spawn{ "publish", "Log", KEY, "-", "--id-field", "id", stdin_file = file }
    assert.truthy(cmd.wait_for(function()
      local code, out = run{ "streams", "--json" }
      for line in (code == 0 and out or ""):gmatch("[^\n]+") do
        local row = json.decode(line)
        if row.key == KEY and row.last >= 2000 then return true end
      end
    end, 30), "the load began")
    cmd.kill(job)
    local got = items()
    assert.is_true(#got < N, "killed before the end (" .. #got .. " items)")
    local code, out, err = run{ "publish", "Log", KEY, "-", "--id-field", "id", stdin = lines(1, N) }
    assert.equal(0, code, err)
    assert.matches(("^%d lines: %d items appended, %d answered by their publish ids; sequences 1%%-%d\n$")
      :format(N, N - #got, #got, N), out)
    got = items()
    assert.equal(N, #got)
    for i = 1, N do assert.equal(i, got[i].i) end
  end)

  it("reads a pipe as it comes, and ends at a failure without waiting for more input", function()
    local out = cmd.tmpname()
    os.execute("printf '{\"n\":1}\\n{\"n\":2}\\n' | "
      .. cmd.command_line { "publish", "Log", KEY, "-", "--print" } .. " >" .. out .. " 2>/dev/null")
    assert.equal("1\n2\n", cmd.read_file(out))
    -- a principal that may read the stream, not write to it: its first
    -- publish fails while the pipe stays open for two seconds more
    local who = "loader" .. cmd.ns:gsub("%W", "")
    assert.equal(0, (run { "grant", who, cmd.ns, "read" }))
    local took = cmd.tmpname()
    os.execute("s=$(date +%s%N); (echo '{\"n\":3}'; sleep 2) | ("
      .. cmd.command_line { "publish", "Log", KEY, "-", env = { DURABLE_PRINCIPAL = who } }
      .. " >/dev/null 2>" .. out .. "; echo $(( ($(date +%s%N) - s) / 1000000 )) >" .. took .. ")")
    assert.matches("line 1: .* may not write", cmd.read_file(out))
    assert.is_true(tonumber(cmd.read_file(took)) < 1500, "it ended at once: " .. cmd.read_file(took) .. " ms")
  end)

  it("takes --id for one item and --id-field for a load, not the other way round", function()
    local code, _, err = run{ "publish", "--id", "x", "Log", KEY, "-", stdin = "{}\n" }
    assert.equal(2, code)
    assert.matches("takes --id-field NAME", err, 1, true)
    code, _, err = run{ "publish", "--print", "Log", KEY, "{}" }
    assert.equal(2, code)
    assert.matches("--print and --id-field are for a load", err, 1, true)
  end)
end)
