-- document_log.lua: a Document applies its DocumentLog stream to its text.
--
-- Producers append {"$type":"DocumentLogAppend","text":…,"offset":…} to the
-- stream DocumentLog@{document path}.  The Document's hub consumes it: each
-- item inserts `text` at `offset` (or appends when the offset is missing or
-- past the end) and records the item's sequence as `applied` in the SAME
-- write.  That closes the at-least-once window of durable streams: an item
-- handed over again after a crash between the write and its acknowledgement
-- finds applied >= its sequence and changes nothing.
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
        handler = function(hub, item)
          local append = item.payload
          if append["$type"] ~= "DocumentLogAppend" or type(append.text) ~= "string" then
            -- not acknowledged; the host's log line says EINVAL and why
            durable.fail("EINVAL", ("item %d is not a DocumentLogAppend"):format(item.sequence))
          end
          return hub:update_node(hub.address, function(node)
            local doc = node.content
            if (doc.applied or 0) >= item.sequence then return nil end -- seen: no write
            doc.text = apply(doc.text or "", append)
            doc.applied = item.sequence -- the same write as the effect
            return node
          end)
        end,
      }
    end,
  },
}
