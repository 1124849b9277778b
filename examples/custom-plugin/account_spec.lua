-- account_spec.lua: the Account plugin, specified with busted.
--
--   lua5.4 /usr/bin/busted examples/custom-plugin/account_spec.lua   (from the top of the tree)
--
-- Each test opens a mesh on an in-memory SQLite store with the plugin,
-- makes an account, publishes ledger items from a client hub, and runs the
-- mesh's loop until the account has applied them.
local durable = require "durable"

-- the plugin beside this file, wherever busted is started from
local HERE = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local PLUGIN = HERE .. "account.lua"

describe("an Account consuming its Ledger", function()
  local mesh, client, logs
  local ACCOUNT = "Bank/alice"
  local LEDGER = { namespace = "Ledger", key = ACCOUNT }

  before_each(function()
    logs = {}
    mesh = assert(durable.open {
      store = "sqlite::memory:",
      plugins = { PLUGIN },
      -- retry a refused item after 50..200 ms instead of 1..60 s
      streams = { backoff_min_ms = 50, backoff_max_ms = 200 },
      log = function(level, line) logs[#logs + 1] = level .. " " .. line end,
    })
    client = mesh:hub("client/spec")
  end)

  after_each(function()
    mesh:close()
  end)

  local function open_account(content)
    assert(mesh:put_node { path = ACCOUNT, node_type = "Account", content = content or {} }:wait())
  end

  local function account()
    return mesh:get_node(ACCOUNT):wait().content
  end

  local function publish(kind, amount)
    return assert(client:publish_durable(LEDGER, { ["$type"] = kind, amount = amount }):wait())
  end

  local function wait_applied(n)
    assert(mesh:run_until(function() return (account().applied or 0) >= n end, 5000))
  end

  local function log_lines(text)
    local out = {}
    for _, line in ipairs(logs) do
      if line:find(text, 1, true) then out[#out + 1] = line end
    end
    return out
  end

  it("applies deposits and withdrawals in order, recording the sequence in the same write", function()
    open_account()
    assert.equal(1, publish("Deposit", 100))
    assert.equal(2, publish("Withdrawal", 30))
    assert.equal(3, publish("Deposit", 5))
    wait_applied(3)
    assert.same({ balance = 75, applied = 3 }, account())
  end)

  it("refuses an overdraft: the item is not acknowledged, is retried, and nothing after it is applied",
    function()
      open_account()
      publish("Deposit", 10)
      publish("Withdrawal", 25) -- 10 - 25 < 0: refused
      publish("Deposit", 100)
      assert(mesh:run_until(function() return #log_lines("was NOT acknowledged") >= 2 end, 5000))
      local refused = log_lines("was NOT acknowledged")[1]
      assert.truthy(refused:find("Ledger@" .. ACCOUNT, 1, true), refused)
      assert.truthy(refused:find("overdraft", 1, true), refused)
      assert.same({ balance = 10, applied = 1 }, account()) -- item 3 waits behind item 2

      -- the account allows it now: the next retry goes through, then item 3
      assert(mesh:update_node(ACCOUNT, function(node)
        node.content.credit_limit = 50
        return node
      end):wait())
      wait_applied(3)
      assert.same({ balance = 85, applied = 3, credit_limit = 50 }, account())
    end)

  it("transfers with a message whose handler awaits each step; a refusal keeps its code", function()
    open_account()
    local BOB = "Bank/bob"
    assert(mesh:put_node { path = BOB, node_type = "Account", content = {} }:wait())
    publish("Deposit", 100)
    wait_applied(1)
    assert.same({ withdrawal = 2, deposit = 1 },
      client:request(ACCOUNT, "transfer", { to = BOB, amount = 30 }):wait())
    wait_applied(2)
    assert(mesh:run_until(function() return mesh:get_node(BOB):wait().content.applied == 1 end, 5000))
    assert.equal(70, account().balance)
    assert.equal(30, mesh:get_node(BOB):wait().content.balance)
    -- refused before anything is appended: the sender sees the code
    local _, message, code = client:request(ACCOUNT, "transfer", { to = BOB, amount = 500 }):wait()
    assert.equal("ECONFLICT", code)
    assert.truthy(message:find("the balance is 70", 1, true), message)
    assert.equal("EINVAL", select(3, client:request(ACCOUNT, "transfer", { amount = 1 }):wait()))
  end)

  it("changes nothing for an item it has applied already (a redelivery)", function()
    -- as if items 1 and 2 had been applied and the host stopped before
    -- their acknowledgement: they are handed over again
    open_account { balance = 70, applied = 2 }
    publish("Deposit", 100)
    publish("Withdrawal", 30)
    publish("Deposit", 5)
    wait_applied(3)
    assert.same({ balance = 75, applied = 3 }, account())
  end)
end)
