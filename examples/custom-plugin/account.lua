-- account.lua: a custom consumer plugin to copy -- an Account keeps the
-- balance of its Ledger stream.
--
-- Producers append to the stream Ledger@{account path}:
--
--   {"$type":"Deposit","amount":100}
--   {"$type":"Withdrawal","amount":30}
--
-- The Account's hub consumes it, one item at a time, in order.  Each item
-- changes `balance` through the handler's transaction `tx`: the write is
-- committed in one transaction with the item's acknowledgement, and only
-- while this hub holds the lease, so each item moves the balance exactly
-- once.  `applied` records the last item applied (what `get` shows, and a
-- guard should an operator rewind the checkpoint to replay the ledger).
--
-- A withdrawal that would take the balance below -credit_limit (0 unless
-- the account's content says otherwise) is refused: the handler raises, the
-- item is NOT acknowledged, the host logs it, and the item is handed over
-- again after a backoff -- until the account allows it (raise credit_limit
-- with `durable put` / mesh:update_node).  An item is never skipped.
--
--   durable put Bank/alice Account '{}'
--   durable run examples/custom-plugin/account.lua
--   durable publish Ledger Bank/alice '{"$type":"Deposit","amount":100}'
--   durable get @Bank/alice          # content: {"balance":100,"applied":1}
--
-- A "transfer" message ({ to = "Bank/bob", amount = 30 }) shows a handler
-- that awaits: it reads the account, appends a Withdrawal to its own Ledger,
-- then a Deposit to the other account's, each step waiting for the one
-- before -- top to bottom, no nesting (every handler runs in a coroutine, and
-- completion:await() suspends it while the loop goes on).  A refusal keeps
-- its code: the sender sees EINVAL or ECONFLICT, not just "failed".
local durable = require "durable"

-- The balance after `entry`, or raises why it cannot be applied.
local function apply(account, entry, sequence)
  local amount = entry.amount
  if math.type(amount) ~= "integer" or amount <= 0 then
    error(("ledger item %d: amount must be a positive integer, not %s")
      :format(sequence, tostring(amount)), 0)
  end
  local balance = account.balance or 0
  if entry["$type"] == "Deposit" then
    return balance + amount
  elseif entry["$type"] == "Withdrawal" then
    local floor = -(account.credit_limit or 0)
    if balance - amount < floor then
      error(("ledger item %d: overdraft -- withdrawing %d from a balance of %d (credit limit %d)")
        :format(sequence, amount, balance, -floor), 0)
    end
    return balance - amount
  end
  error(("ledger item %d: unknown $type %s (Deposit or Withdrawal)")
    :format(sequence, tostring(entry["$type"])), 0)
end

return {
  node_types = {
    Account = function(config)
      config:with_durable_stream_consumer {
        namespace = "Ledger",
        key = function(hub) return hub.address end, -- Ledger@{this account}
        handler = function(hub, item, tx)
          -- read-modify-write of the account node, committed with the
          -- item's acknowledgement (a replace at the version read: if the
          -- node moved meanwhile, nothing is written and the item comes again)
          tx:update_node(hub.address, function(node)
            local account = node.content
            if (account.applied or 0) >= item.sequence then return nil end -- a replay
            account.balance = apply(account, item.payload, item.sequence)   -- raises: not acknowledged
            account.applied = item.sequence
            return node
          end)
        end,
      }

      config:on("transfer", function(hub, msg)
        local to, amount = msg.payload and msg.payload.to, msg.payload and msg.payload.amount
        if type(to) ~= "string" or math.type(amount) ~= "integer" or amount <= 0 then
          durable.fail("EINVAL", "transfer: expects { to = ACCOUNT PATH, amount = N > 0 }")
        end
        -- the balance as applied so far: items still in the Ledger are not in
        -- it, and the Withdrawal item is checked again when it is applied
        local node = hub:get_node(hub.address):await()
        local account = node and node.content or {}
        local balance, floor = account.balance or 0, -(account.credit_limit or 0)
        if balance - amount < floor then
          durable.fail("ECONFLICT", ("transfer of %d: the balance is %d (credit limit %d)")
            :format(amount, balance, -floor))
        end
        local withdrawal, message, code = hub:publish_durable({ namespace = "Ledger", key = hub.address },
          { ["$type"] = "Withdrawal", amount = amount }):await()
        if not withdrawal then durable.fail(code, message) end
        local deposit, message2, code2 = hub:publish_durable({ namespace = "Ledger", key = to },
          { ["$type"] = "Deposit", amount = amount }):await()
        if not deposit then durable.fail(code2, message2) end
        return { withdrawal = withdrawal, deposit = deposit } -- the two items' sequences
      end)
    end,
  },
}
