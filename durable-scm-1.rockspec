-- durable-scm-1.rockspec: the Lua 5.4 module `durable` for LuaRocks.
--
--   luarocks --lua-version 5.4 make --tree TREE      # in a clone of durable
--   eval "$(luarocks --lua-version 5.4 --tree TREE path)"
--   lua5.4 -e 'local durable = require "durable"'
--
-- The C half, `durable.core`, is built by the project's own CMake (only the
-- target durable_lua_module: libdurable linked in statically, PIC, and
-- libuv, jansson, sqlite3, libpq, libmicrohttpd dynamically; liblua is not
-- linked, the interpreter provides it) into build-luarocks/ at the top of the
-- clone, and installed as durable/core.so; lua/durable/*.lua are installed
-- as durable.* (init.lua as `durable` itself).  On Debian 12 the build needs
-- cmake, pkg-config, a C compiler and liblua5.4-dev, libuv1-dev,
-- libjansson-dev, libsqlite3-dev, libpq-dev and libmicrohttpd-dev
-- (doc/operations.md, "Installing with LuaRocks").  tests/install/luarocks.sh
-- (ctest: install_luarocks) installs it into a temporary tree and uses it;
-- it also fails when a file of lua/durable/ is missing from `install.lua`.
rockspec_format = "3.0"
package = "durable"
version = "scm-1"

source = {
  -- `luarocks make` in a clone builds what is there and fetches nothing;
  -- this is where `luarocks build` would clone it from.
  url = "git+https://localhost/durable.git",
}

description = {
  summary = "Durable streams on SQLite and PostgreSQL, in C with Lua plugins",
  detailed = [[
An append-only, per-stream ordered sequence of items that survives process,
host and hub restarts, consumed by one leased consumer (or consumer group) at
a time that resumes after its last acknowledged item; hubs are addressable
actors on libuv whose NodeTypes are Lua plugins.  This rock is the Lua 5.4
module `durable` (with its C half `durable.core`, which carries libdurable).
]],
  license = "MIT",
  labels = { "streams", "queue", "sqlite", "postgresql", "libuv" },
}

dependencies = {
  "lua >= 5.4, < 5.5",
}

-- Checked before the build, so that a missing -dev package is named.
external_dependencies = {
  LIBUV = { header = "uv.h" },
  JANSSON = { header = "jansson.h" },
  SQLITE3 = { header = "sqlite3.h" },
  LIBPQ = { library = "pq" },
  MICROHTTPD = { header = "microhttpd.h" },
}

build = {
  type = "command",
  build_command = [[
cmake -S . -B build-luarocks -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF &&
cmake --build build-luarocks --target durable_lua_module --parallel "$(getconf _NPROCESSORS_ONLN)"
]],
  install = {
    lua = {
      ["durable"] = "lua/durable/init.lua",
      ["durable.completion"] = "lua/durable/completion.lua",
      ["durable.plugin"] = "lua/durable/plugin.lua",
      ["durable.run"] = "lua/durable/run.lua",
      ["durable.streams"] = "lua/durable/streams.lua",
      ["durable.transaction"] = "lua/durable/transaction.lua",
    },
    lib = {
      ["durable.core"] = "build-luarocks/lua/durable/core.so",
    },
  },
}
