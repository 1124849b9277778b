-- dashboard_spec.lua: the Grafana dashboard of examples/grafana asks only
-- for metrics that `durable run --metrics` exports.  A query naming a metric
-- the endpoint does not serve (a typo, a rename, `_total` left off a
-- counter) shows "No data" in Grafana and fails nowhere else, so the names
-- are checked against a real endpoint, not a list kept by hand: a host on a
-- temporary SQLite store, with a plugin that consumes a family on its own
-- and in a consumer group, is handed an item and scraped with curl; the
-- names it exports are its `# TYPE NAME KIND` lines.  Every PromQL
-- expression of the dashboard (each panel target's `expr`, each template
-- variable's query) is read from its JSON, and each name in it that begins
-- with durable_ must be one of them.
--
-- Tagged #sqlite: the store is a temporary SQLite file whichever store the
-- run is for, so the PostgreSQL run of the suite leaves it out.

local json = require "dkjson"
local cmd = require "command"

local read_file, spit, tmpname = cmd.read_file, cmd.spit, cmd.tmpname

local DASHBOARD = "examples/grafana/durable-dashboard.json"

-- A Dash node consumes FAMILY@{its path} on its own and in the group "audit":
-- the endpoint then has a family's series and a group's.
local SOURCE = [[
return {
  node_types = {
    Dash = function(config)
      config:with_durable_stream_consumer { namespace = FAMILY, handler = function() end }
      config:with_durable_stream_consumer {
        namespace = FAMILY, group = "audit", handler = function() end,
      }
    end,
  },
}
]]

local function dashboard()
  local text = assert(read_file(DASHBOARD), "cannot read " .. DASHBOARD)
  local d, _, err = json.decode(text, 1, json.null)
  assert(type(d) == "table", DASHBOARD .. " is not JSON: " .. tostring(err))
  return d
end

-- The panels of the dashboard, a row's own panels (when collapsed) included.
local function panels(d)
  local out = {}
  local function add(list)
    for _, p in ipairs(list or {}) do
      out[#out + 1] = p
      add(p.panels)
    end
  end
  add(d.panels)
  return out
end

-- Every PromQL expression of the dashboard as { where =, expr = }: each
-- `expr` anywhere (panel targets), and the `query` and `definition` of each
-- template variable (a string, or Grafana 10's { query = ... }) but a
-- datasource variable's, whose query is the plugin's name.
local function expressions(d)
  local out = {}
  local function walk(v, where, keys)
    if type(v) == "string" then
      if keys[where:match("([%w_]+)$")] then out[#out + 1] = { where = where, expr = v } end
    elseif type(v) == "table" then
      for k, child in pairs(v) do
        local name = type(v.title) == "string" and (" '" .. v.title .. "'") or ""
        walk(child, where .. name .. (type(k) == "number" and ("[" .. k .. "]") or ("." .. k)), keys)
      end
    end
  end
  walk(d.panels, "panels", { expr = true })
  for i, var in ipairs(d.templating and d.templating.list or {}) do
    if var.type ~= "datasource" then
      walk(var, ("templating.list[%d] '%s'"):format(i, tostring(var.name)),
        { query = true, definition = true, expr = true })
    end
  end
  return out
end

-- The metric names in a PromQL expression: each identifier that begins with
-- durable_, in full (its _total too); labels, functions and the
-- dashboard's $variables are not metrics of ours and are left alone.
local function metric_names(expr)
  local names = {}
  for name in expr:gmatch("%f[%w_:]durable_[%w_:]*") do names[#names + 1] = name end
  return names
end

-- Is `name` a series of a metric the endpoint types? A counter's series
-- is typed with its _total in the 0.0.4 text format, without it in
-- OpenMetrics; a histogram's or a summary's carry suffixes of their own.
local function exported(name, types)
  if types[name] then return true end
  local base, suffix = name:match("^(.+)_(%l+)$")
  local kind = base and types[base]
  return (suffix == "total" and kind == "counter")
    or ((suffix == "bucket" or suffix == "sum" or suffix == "count") and kind == "histogram")
    or ((suffix == "sum" or suffix == "count") and kind == "summary")
end

describe("examples/grafana/durable-dashboard.json", function()
  after_each(cmd.finish)

  it("is a dashboard on a Prometheus datasource variable, filtered by family", function()
    local d = dashboard()
    assert.is_string(d.title)
    assert.is_string(d.uid)
    local vars = {}
    for _, var in ipairs(d.templating.list) do vars[var.name] = var end
    assert.equal("datasource", vars.datasource and vars.datasource.type)
    assert.equal("prometheus", vars.datasource.query)
    assert.truthy(vars.family, "no family variable")
    local q = vars.family.query
    assert.equal("label_values(durable_stream_lag, family)", type(q) == "table" and q.query or q)
    local ids = {}
    for _, p in ipairs(panels(d)) do
      local what = ("panel %s '%s'"):format(tostring(p.id), tostring(p.title))
      assert.is_nil(ids[p.id], what .. ": its id is another panel's too")
      ids[p.id] = true
      if p.type ~= "row" then
        assert.equal("${datasource}", p.datasource and p.datasource.uid, what)
        assert.is_true(#(p.targets or {}) > 0, what .. " has no query")
        for _, t in ipairs(p.targets) do
          assert.is_true(type(t.expr) == "string" and t.expr ~= "", what .. ": a target with no expr")
        end
      end
    end
  end)

  it("names only metrics a real `durable run --metrics` endpoint exports #sqlite", function()
    -- a host on a temporary SQLite store, one item handed to its consumers
    local db = tmpname()
    os.remove(db)
    for _, suffix in ipairs { "-wal", "-shm", "-journal", "-live" } do cmd.track(db .. suffix) end
    local store = "sqlite:" .. db
    local family, key = "Dash" .. cmd.RUN, "dashspec/owner"
    local plugin = cmd.track(tmpname() .. ".lua")
    spit(plugin, (SOURCE:gsub("FAMILY", ("%q"):format(family))))
    local code, _, err = cmd.run { "put", key, "Dash", "{}", store = store }
    assert.equal(0, code, err)
    code, _, err = cmd.run { "publish", family, key, '{"i":1}', store = store }
    assert.equal(0, code, err)
    local host = cmd.spawn { "run", "--metrics", "127.0.0.1:0", plugin, store = store }
    local port = cmd.wait_for(function()
      local log = read_file(host.err) or ""
      return (log:find("durable run: hosting", 1, true) or not cmd.running(host))
        and (log:match("serving metrics at http://127%.0%.0%.1:(%d+)/metrics") or "none")
    end, 15)
    assert.is_truthy(tonumber(port), "the host did not start: " .. (read_file(host.err) or ""))

    local function scrape()
      local out = tmpname()
      local ok = os.execute(("curl -s -S -f -o %s http://127.0.0.1:%s/metrics"):format(out, port))
      return ok == true and read_file(out) or nil
    end
    -- the item handled by both consumers: the family's series and the group's
    local L = ('{family="%s"}'):format(family)
    local G = ('{family="%s",group="audit"}'):format(family)
    local text = cmd.wait_for(function()
      local t = scrape()
      return t and t:find("\ndurable_stream_handled_total" .. L .. " 1\n", 1, true)
        and t:find("\ndurable_stream_handled_total" .. G .. " 1\n", 1, true) and t
    end, 15)
    assert.is_truthy(text, "the endpoint never counted the item: " .. tostring(scrape())
      .. (read_file(host.err) or ""))
    cmd.signal(host, "INT")
    assert.equal(0, cmd.exit_code(host, 10), read_file(host.err))

    local types = {}
    for name, kind in text:gmatch("# TYPE ([%w_:]+) (%a+)") do types[name] = kind end
    assert.equal("gauge", types.durable_stream_lag, text)
    assert.equal("counter", types.durable_stream_handled_total, text)

    -- every name of every expression, each missing one with where it is
    local used, missing = {}, {}
    local exprs = expressions(dashboard())
    assert.is_true(#exprs > 0, "no expression found in " .. DASHBOARD)
    for _, e in ipairs(exprs) do
      for _, name in ipairs(metric_names(e.expr)) do
        used[name] = true
        if not exported(name, types) then
          missing[#missing + 1] = ("%s in %s: %s"):format(name, e.where, e.expr)
        end
      end
    end
    table.sort(missing)
    local names = {}
    for name in pairs(types) do names[#names + 1] = name end
    table.sort(names)
    assert.is_true(#missing == 0, DASHBOARD .. " names metrics the endpoint does not export:\n  "
      .. table.concat(missing, "\n  ") .. "\n(it exports: " .. table.concat(names, " ") .. ")")
    -- and it does show what its README says it shows
    for _, name in ipairs { "durable_stream_lag", "durable_stream_oldest_unacknowledged_age_seconds",
                            "durable_stream_handled_total", "durable_stream_failed_total",
                            "durable_stream_dead_lettered_total" } do
      assert.is_true(used[name], DASHBOARD .. " has no query on " .. name)
    end
  end)
end)
