-- luv_spec.lua: runs examples/luv/main.lua (a luv program driving a mesh
-- through mesh:fd() and mesh:step()) with the `durable` command, on a
-- fresh SQLite file, and checks what it printed.
local helper = require "helper"

describe("examples/luv", function()
  helper.each()

  it("runs a mesh beside luv's timer and TCP server, in one uv.run() #sqlite", function()
    if not pcall(require, "luv") then
      return pending("needs lua-luv (tests/support/setup.sh installs it)")
    end
    local store = "sqlite:" .. helper.tmpname(".db")
    local rc, out, err = helper.sh(("%s/durable lua examples/luv/main.lua %s")
      :format(helper.quote(helper.BUILD), helper.quote(store)))
    assert.equal(0, rc, err)
    for i = 1, 5 do
      assert.truthy(out:find(("tick %d: count %d\n"):format(i, i), 1, true), out)
    end
    assert.truthy(out:find("the server says count=5\n", 1, true), out)
  end)
end)
