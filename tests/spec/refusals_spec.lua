-- refusals_spec.lua: what the command refuses, it refuses whole: one line
-- that says why, the exit code of its kind, and the store exactly as it was.
--
-- Each case takes a dump of the store before and after the refused input
-- and compares them: for a SQLite file its bytes and every file beside it
-- (-wal, -shm, -live), for PostgreSQL the catalog of its schemas and tables
-- and the version counter that every durable write moves.  The inputs are
-- the ones a sweep of hostile inputs found taken, mangled or hung on: long
-- values quoted past the message's end, a SQLite URI, a FIFO, links planted
-- beside the database, somebody else's database, PostgreSQL's own schemas
-- as partitions, log levels that are not levels, a missing Lua directory.
local cmd = require "command"
local durable = require "durable"
local KIND, quote, read_file, spit, run = cmd.KIND, cmd.quote, cmd.read_file, cmd.spit, cmd.run
local P -- this test's namespace (cmd.store is its store)

local function sh(command)
  local p = assert(io.popen(command .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  return ok, out
end

-- Every file of a SQLite store, by name (absent ones too), as bytes.
local function sqlite_dump(file)
  local parts = {}
  for _, suffix in ipairs { "", "-wal", "-shm", "-journal", "-live" } do
    parts[#parts + 1] = suffix .. "=" .. (read_file(file .. suffix) or "(absent)")
  end
  return table.concat(parts, "\n")
end

-- The store's dump: see the top of the file.
local function dump(store)
  store = store or cmd.store
  local file = store:match("^sqlite:(.*)$")
  if file then return sqlite_dump(file) end
  local ok, out = sh(("psql %s -qtAX -c %s"):format(quote(store), quote(
    "SELECT string_agg(n.nspname || '.' || c.relname, ',' ORDER BY 1) FROM pg_class c "
    .. "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname NOT LIKE 'pg\\_%';"
    .. "SELECT last_value FROM public.durable_version")))
  assert(ok, out)
  return out
end

-- A store with one node in it, so that there is something to keep.
local function seeded()
  local code, _, err = run { "put", P .. "/doc", "Document", '{"text":"kept"}' }
  assert.equal(0, code, err)
  return dump()
end

-- The one line on stderr, which must contain each of the plain strings.
local function says(err, ...)
  assert.matches("^durable: [^\n]+\n$", err)
  for _, part in ipairs { ... } do assert.matches(part, err, 1, true) end
end

local function long(n, c) return string.rep(c or "a", n) end

describe("refused inputs (" .. KIND .. ")", function()
  before_each(function()
    local _
    _, P = cmd.begin("refusals")
  end)
  after_each(cmd.finish)

  describe("a long value", function()
    it("is quoted shortened, and the message still says why it was refused", function()
      local before = seeded()
      for _, case in ipairs {
        { { "publish", long(2000), "k", "{}" }, "too long", "(2000 bytes)" },
        { { "publish", "NS", P .. "/" .. long(1000), "{}" }, "longer than 1024 bytes" },
        { { "publish", "--id", long(3000, "b"), "NS", P .. "/doc", "{}" }, "longer than 128 bytes" },
        { { "get", "@" .. long(5000) }, "longer than 1024 bytes (5000)" },
        { { "put", P .. "/x", long(300, "T"), "{}" }, "type" },
        { { "get", "@x", "--" .. long(3000, "o") }, "unknown option", "(3002 bytes)" },
      } do
        local code, out, err = run(case[1])
        assert.equal(2, code, err)
        assert.equal("", out)
        says(err, table.unpack(case, 2))
        assert.is_true(#err < 700, err)
      end
      assert.equal(before, dump())
    end)
  end)

  describe("a store", function()
    it("named as a SQLite URI is refused, and no file is made", function()
      local dir = cmd.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir " .. quote(dir)))
      local code, _, err = run { "get", "@a/b", store = "sqlite:file:" .. dir .. "/uri.db" }
      assert.equal(2, code)
      says(err, "SQLite URIs are not taken", "sqlite:./file:")
      local _, listing = sh("ls -A " .. quote(dir))
      os.execute("rmdir " .. quote(dir))
      assert.equal("", listing)
      -- a long one, its name written with a precision (%.*s): still the
      -- whole reason, the name shortened
      code, _, err = run { "get", "@a/b", store = "sqlite:file:" .. long(3000) .. ".db" }
      assert.equal(2, code)
      says(err, "SQLite URIs are not taken", "sqlite:PATH names a file: for a file of that name write",
        "...(3008 bytes)")
    end)

    it("that cannot be reached is named without its password, however short", function()
      -- nothing listens at this socket: the connect fails and names the store
      for _, url in ipairs {
        "postgresql://u:secretpw@/x?host=/nonexistent&connect_timeout=1",
        "postgresql://u:p@/x?host=/nonexistent",
        "postgresql://u:@/x?host=/nonexistent",
        "postgresql:///x?host=/nonexistent&password=secretpw",
        "host=/nonexistent user=u password=secretpw dbname=x",
      } do
        local code, out, err = run { "get", "@a/b", store = url }
        assert.is_true(code ~= 0, url)
        says(err, "cannot connect to store")
        assert.is_nil((out .. err):find("secretpw", 1, true), err)
        assert.is_nil(err:find("u:p@", 1, true), err)
        if url:find("pw", 1, true) then says(err, "password=***") end
      end
    end)

    it("that is somebody else's SQLite database is refused, byte for byte untouched", function()
      local file = cmd.tmpname()
      os.remove(file)
      local ok, out = sh(("sqlite3 %s 'CREATE TABLE accounts (id INTEGER PRIMARY KEY, "
        .. "name TEXT); INSERT INTO accounts VALUES (1, %s)'"):format(quote(file), "\"'ann'\""))
      assert(ok, out)
      local before = sqlite_dump(file)
      for _, args in ipairs { { "get", "@a/b" }, { "put", "a/b", "T", "{}" }, { "streams" } } do
        args.store = "sqlite:" .. file
        local code, _, err = run(args)
        assert.equal(2, code, err)
        says(err, "is not a durable store", "nothing written")
      end
      assert.equal(before, sqlite_dump(file))
      -- marked as another application's: refused the same way
      assert(sh(("sqlite3 %s 'PRAGMA application_id = 42'"):format(quote(file))))
      before = sqlite_dump(file)
      local code, _, err = run { "get", "@a/b", store = "sqlite:" .. file }
      assert.equal(2, code)
      says(err, "belongs to another application (application_id 42")
      assert.equal(before, sqlite_dump(file))
    end)

    it("made by durable is marked as durable's, and an unmarked one of an earlier durable is adopted", function()
      local file = cmd.tmpname()
      os.remove(file)
      local store = "sqlite:" .. file
      assert.equal(0, (run { "put", "a/b", "T", "{}", store = store }))
      local _, id = sh(("sqlite3 %s 'PRAGMA application_id'"):format(quote(file)))
      assert.equal("1685418593\n", id) -- "dura"
      assert(sh(("sqlite3 %s 'PRAGMA application_id = 0'"):format(quote(file))))
      local code, out, err = run { "get", "@a/b", store = store }
      assert.equal(0, code, err)
      assert.matches('"path":"a/b"', out, 1, true)
      _, id = sh(("sqlite3 %s 'PRAGMA application_id'"):format(quote(file)))
      assert.equal("1685418593\n", id)
    end)

    it("of an earlier durable, grants without modes and counters in durable_meta, is brought up to date", function()
      local file = cmd.tmpname()
      os.remove(file)
      local store = "sqlite:" .. file
      assert.equal(0, (run { "put", "a/b", "T", "{}", store = store }))
      assert.equal(0, (run { "grant", "alice", "a", "read", store = store }))
      -- as a file of an earlier version had them
      local ok, out = sh(("sqlite3 %s 'ALTER TABLE durable_grants DROP COLUMN modes; "
        .. "CREATE TABLE durable_meta (key TEXT PRIMARY KEY, value INTEGER); "
        .. "INSERT INTO durable_meta VALUES (%s, 500), (%s, 900); DELETE FROM durable_commits'")
        :format(quote(file), "\"'commit'\"", "\"'version'\""))
      assert(ok, out)
      local code, put, err = run { "put", "a/c", "T", "{}", store = store }
      assert.equal(0, code, err)
      assert.equal("a/c version 901\n", put) -- versions go on from the old counter
      local _, tables = sh(("sqlite3 %s %s"):format(quote(file),
        quote("SELECT name FROM sqlite_master WHERE name = 'durable_meta'")))
      assert.equal("", tables)
      local _, grants = sh(("sqlite3 %s %s"):format(quote(file),
        quote("SELECT principal, prefix, modes FROM durable_grants")))
      assert.equal("alice|a|1\n", grants) -- a read grant, as grants were then
      code, out, err = run { "grants", store = store }
      assert.equal(0, code, err)
      assert.matches("alice", out, 1, true)
    end)

    it("whose liveness file is a planted symbolic link is refused, and the link's target is not made", function()
      local file = cmd.tmpname()
      os.remove(file)
      local store = "sqlite:" .. file
      assert.equal(0, (run { "put", "a/b", "T", "{}", store = store }))
      local target = cmd.tmpname()
      os.remove(target)
      os.remove(file .. "-live")
      assert(os.execute(("ln -s %s %s"):format(quote(target), quote(file .. "-live"))))
      local before = sqlite_dump(file)
      for _, args in ipairs { { "get", "@a/b" }, { "put", "a/c", "T", "{}" } } do
        args.store = store
        local code, _, err = run(args)
        assert.equal(1, code, err)
        says(err, "-live' is a symbolic link", "nothing written")
      end
      assert.is_nil(read_file(target))
      assert.equal(before, sqlite_dump(file))
    end)

    it("that is a symbolic link to nothing, or one planted in a sticky folder, is refused", function()
      local file, target = cmd.tmpname(), cmd.tmpname()
      os.remove(file)
      os.remove(target)
      assert(os.execute(("ln -s %s %s"):format(quote(target), quote(file))))
      local code, _, err = run { "put", "a/b", "T", "{}", store = "sqlite:" .. file }
      assert.equal(2, code)
      says(err, "is a symbolic link to nothing")
      assert.is_nil(read_file(target))
      local _, uid = sh("id -u")
      if uid ~= "0\n" then return pending("needs root: chown of the link's target") end
      assert.equal(0, (run { "put", "a/b", "T", "{}", store = "sqlite:" .. target }))
      -- a link of root's own to a file of another owner is followed (as the
      -- kernel would): a shared database reached through one's own link
      os.remove(file)
      assert(os.execute(("ln -s %s %s"):format(quote(target), quote(file))))
      assert(os.execute("chown nobody " .. quote(target)))
      assert.equal(0, (run { "get", "@a/b", store = "sqlite:" .. file }))
      -- a link that somebody else planted in a sticky, world-writable
      -- folder (a /tmp) is not
      local sticky = cmd.tmpname()
      os.remove(sticky)
      assert(os.execute(("mkdir %s && chmod 1777 %s"):format(quote(sticky), quote(sticky))))
      local planted = sticky .. "/d.db"
      assert(os.execute(("ln -s %s %s && chown -h nobody %s"):format(quote(target), quote(planted),
        quote(planted))))
      local before = sqlite_dump(target)
      code, _, err = run { "get", "@a/b", store = "sqlite:" .. planted }
      assert.equal(1, code)
      says(err, "is a symbolic link owned by uid", "in a sticky, world-writable folder")
      assert.equal(before, sqlite_dump(target))
      os.remove(planted)
      os.remove(sticky)
    end)

    it("that is a FIFO is refused at once", function()
      local fifo = cmd.tmpname()
      os.remove(fifo)
      assert(os.execute("mkfifo " .. quote(fifo)))
      local code, _, err = run { "get", "@a/b", store = "sqlite:" .. fifo }
      assert.equal(2, code)
      says(err, "is not a regular file (a FIFO)")
    end)
  end)

  describe("a partition", function()
    it("that is one of PostgreSQL's schemas or durable's own is refused", function()
      local before = seeded()
      for _, partition in ipairs { "information_schema", "public", "pg_catalog" } do
        for _, args in ipairs {
          { "put", partition .. "/doc", "Document", "{}" },
          { "publish", "NS", partition .. "/doc", "{}" },
          { "get", "@" .. partition .. "/doc" },
        } do
          local code, _, err = run(args)
          assert.equal(2, code, err)
          says(err, "'" .. partition .. "/")
        end
      end
      assert.equal(before, dump())
    end)
  end)

  describe("a command refused for its arguments", function()
    it("never creates the store it names", function()
      local file = cmd.tmpname()
      os.remove(file)
      for _, args in ipairs {
        { "put", "a/b", "T\1", "{}" },
        { "put", "a/b", "T", "[[[" },
        { "get", "@a//b" },
        { "read", "NS", "a/b", "--after", "-5" },
        { "publish", "NS", "a/b", "null" },
        { "publish", "NS", "a/b", '{"i":9223372036854775808}' },
        { "publish", "NS", "a/b", "   " },
      } do
        args.store = "sqlite:" .. file
        local code, _, err = run(args)
        assert.equal(2, code, err)
        assert.equal("(absent)", sqlite_dump(file):match("^=([^\n]*)"), table.concat(args, " "))
      end
    end)
  end)

  describe("DURABLE_LOG", function()
    it("that is not a level is refused, before anything is opened; a level in any case is taken", function()
      local before = seeded()
      for _, value in ipairs { "bogus", "verbose", "1" } do
        local code, out, err = run { "get", "@" .. P .. "/doc", env = { DURABLE_LOG = value } }
        assert.equal(2, code)
        assert.equal("", out)
        says(err, "$DURABLE_LOG: '" .. value .. "' is not a level")
      end
      assert.equal(before, dump())
      for _, value in ipairs { "DEBUG", "Warn", "info", "error" } do
        local code, _, err = run { "get", "@" .. P .. "/doc", env = { DURABLE_LOG = value } }
        assert.equal(0, code, err)
      end
    end)
  end)

  describe("search", function()
    it("takes type:T, as doc/cli.md says, across namespaces", function()
      for i = 1, 3 do
        assert.equal(0, (run { "put", P .. "/s" .. i .. "/doc", "RefusalsDoc", "{}" }))
      end
      local code, out, err = run { "search", "type:RefusalsDoc" }
      assert.equal(0, code, err)
      local n = 0
      for line in out:gmatch("[^\n]+") do
        if line:find(P, 1, true) then n = n + 1 end
      end
      assert.equal(3, n)
      local before = dump()
      code, _, err = run { "search", "type:" }
      assert.equal(2, code)
      says(err, "type: needs a NodeType")
      code, _, err = run { "search", "kind:x" }
      assert.equal(2, code)
      says(err, "none of namespace:NS, path:P, type:T")
      assert.equal(before, dump())
    end)
  end)

  describe("durable run and durable lua", function()
    it("refuse a FIFO, a directory or a missing file with one line, at once", function()
      local before = seeded()
      local fifo = cmd.tmpname()
      os.remove(fifo)
      assert(os.execute("mkfifo " .. quote(fifo)))
      local started = os.time()
      for _, case in ipairs {
        { { "run", fifo }, "plugin '" .. fifo .. "' is not a regular file (a FIFO)" },
        { { "lua", fifo }, "script '" .. fifo .. "' is not a regular file (a FIFO)" },
        { { "run", "/" }, "is not a regular file (a directory)" },
        { { "run", "./nothing-here.lua" }, "cannot read plugin './nothing-here.lua'" },
      } do
        local code, _, err = run(case[1])
        assert.equal(1, code, err)
        says(err, case[2])
      end
      assert.is_true(os.time() - started < 10)
      assert.equal(before, dump())
      -- the Lua module too: durable.open with such a plugin raises at once
      local ok, message = pcall(durable.open, { store = "sqlite::memory:", plugins = { fifo } })
      assert.is_false(ok)
      assert.matches("plugin " .. fifo:gsub("%p", "%%%0") .. " is not a regular file %(a FIFO%)", message)
      ok, message = pcall(durable.open, { store = "sqlite::memory:", plugins = { "/" } })
      assert.is_false(ok)
      assert.matches("is not a regular file %(a directory%)", message)
    end)

    it("say in one line that the Lua directory is missing, not in a traceback", function()
      local before = seeded()
      local code, _, err = run { "run", "plugins/document_log.lua", env = { DURABLE_LUA_DIR = "/nonexistent" } }
      assert.equal(1, code)
      says(err, "durable/init.lua) is not in '/nonexistent' (from $DURABLE_LUA_DIR)")
      assert.equal(before, dump())
    end)
  end)
end)
