-- document_log.lua: a Document applies its DocumentLog stream to its text.
--
-- Producers append {"$type":"DocumentLogAppend","text":…,"offset":…} to the
-- stream DocumentLog@{document path}.  The Document's hub consumes it: each
-- item inserts `text` at `offset` (or appends when the offset is missing or
-- past the end).  The write goes through the handler's transaction `tx`, so
-- it is committed in one transaction with the item's acknowledgement, and
-- only while this hub holds the stream's lease: each item's effect is
-- written exactly once, whatever crashes or takeovers happen in between.
-- `applied` records the last item applied, for readers of the document (and
-- so that an operator who rewinds the checkpoint to replay the stream does
-- not insert the same text twice); exactly once does not rest on it.
--
--   durable run plugins/document_log.lua
--   durable put Space/doc Document '{}'
--   durable publish DocumentLog Space/doc '{"$type":"DocumentLogAppend","text":"Hello","offset":0}'
--   durable get @Space/doc
local durable = require "durable"

local function apply(text, append)
  local offset = tonumber(append.offset)
  if offset == nil or offset < 0 or offset > #text then
    return text .. append.text
  end
  return text:sub(1, offset) .. append.text .. text:sub(offset + 1)
end

return {
  node_types = {
    Document = function(config)
      config:with_durable_stream_consumer {
        namespace = "DocumentLog",
        key = function(hub) return hub.address end,
        handler = function(hub, item, tx)
          local append = item.payload
          if append["$type"] ~= "DocumentLogAppend" or type(append.text) ~= "string" then
            -- not acknowledged; the host's log line says EINVAL and why
            durable.fail("EINVAL", ("item %d is not a DocumentLogAppend"):format(item.sequence))
          end
          -- committed with the acknowledgement, under the lease
          tx:update_node(hub.address, function(node)
            local doc = node.content
            if (doc.applied or 0) >= item.sequence then return nil end -- a replay
            doc.text = apply(doc.text or "", append)
            doc.applied = item.sequence
            return node
          end)
        end,
      }
    end,
  },
}
