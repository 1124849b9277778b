-- counter.lua: the plugin of the luv example.  A Counter keeps a count in
-- its node; "add" adds payload.n and answers the new count.
return {
  node_types = {
    Counter = function(config)
      config:on("add", function(hub, msg)
        return hub:update_node(hub.address, function(node)
          node.content.count = (node.content.count or 0) + msg.payload.n
          return node
        end):next(function(node) return node.content.count end)
      end)
    end,
  },
}
