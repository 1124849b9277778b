-- document_parts.lua: a PartedDocument consumes its existing
-- {doc}/_DocumentPart/{index:D6} children as a stream, without a second
-- copy of them.
--
-- durable.document_parts(doc) is the source: part 000000 is sequence 1,
-- 000001 sequence 2, …; ids that are not exactly six digits are not parts.
-- The lease and the checkpoint still live on {doc}/_DurableStream/DocumentLog.
-- Each part's text is added to the document's `text` through the handler's
-- transaction: committed with the part's acknowledgement, under the lease,
-- so exactly once.  `parts_applied` records the last part added, for
-- readers and against an operator's replay (a rewound checkpoint).
local durable = require "durable"

return {
  node_types = {
    PartedDocument = function(config)
      config:with_durable_stream_consumer {
        namespace = "DocumentLog",
        key = function(hub) return hub.address end,
        source = function(hub) return durable.document_parts(hub.address) end,
        handler = function(hub, part, tx)
          tx:update_node(hub.address, function(node)
            local doc = node.content
            if (doc.parts_applied or 0) >= part.sequence then return nil end -- a replay
            doc.text = (doc.text or "") .. (part.payload.text or "")
            doc.parts_applied = part.sequence
            return node
          end)
        end,
      }
    end,
  },
}
