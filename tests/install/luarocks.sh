#!/usr/bin/env bash
# luarocks.sh: `luarocks make` of durable-scm-1.rockspec, as doc/operations.md
# ("Installing with LuaRocks") says, and the stock lua5.4 uses what it installed.
#
#   bash tests/install/luarocks.sh SOURCE_DIR
#
# Copies the source tree as a clean clone has it (git's tracked and
# untracked-but-not-ignored files: no build/, no build-luarocks/) into a
# temporary folder, runs `luarocks --lua-version 5.4 make --tree TREE` there
# (a Release build of durable.core by the project's CMake), checks the rock
# installs every file of lua/durable/ (a file added there and not to the
# rockspec fails here), then, with `luarocks path` of that tree and from
# another folder, has lua5.4 `require "durable"` from the tree, open a mesh
# on a temporary SQLite file, publish an item and read it back.
#
# Exit 77 (skipped) when luarocks or lua5.4 is not installed
# (tests/support/setup.sh installs both).
set -uo pipefail
src=$(cd "$1" && pwd)
for tool in luarocks lua5.4; do
  if ! command -v "$tool" >/dev/null; then
    echo "luarocks: skipped, $tool is not installed (apt-get install luarocks)"
    exit 77
  fi
done
work=$(mktemp -d "${TMPDIR:-/tmp}/durable-luarocks.XXXXXX")
trap 'rm -rf "$work"' EXIT
clone=$work/durable
tree=$work/tree
fail=0

# ---- a clean clone, with this tree's changes ---------------------------------
mkdir -p "$clone"
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$src" && git ls-files -z -c -o --exclude-standard |
    while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done |
    tar --null -T - -cf -) | tar -xf - -C "$clone" ||
    { echo "FAIL: could not copy the source tree"; exit 1; }
else
  tar -C "$src" --exclude=./build --exclude='./build-*' -cf - . | tar -xf - -C "$clone" ||
    { echo "FAIL: could not copy the source tree"; exit 1; }
fi
[[ -e $clone/durable-scm-1.rockspec ]] || { echo "FAIL: no durable-scm-1.rockspec at the top"; exit 1; }

# ---- luarocks make -----------------------------------------------------------
started=$SECONDS
if ! (cd "$clone" && luarocks --lua-version 5.4 make --tree "$tree") >"$work/make.log" 2>&1; then
  echo "FAIL: luarocks --lua-version 5.4 make --tree TREE failed:"
  grep -Ev '^\[ *[0-9]+%\] (Building|Linking|Built target)' "$work/make.log" |
    tail -n 60 | sed 's/^/  | /'
  exit 1
fi
echo "luarocks make: ok ($((SECONDS - started))s)"
if ! (cd "$clone" && luarocks --lua-version 5.4 lint durable-scm-1.rockspec) >"$work/lint.log" 2>&1; then
  echo "FAIL: luarocks lint durable-scm-1.rockspec:"
  sed 's/^/  | /' "$work/lint.log"
  fail=1
fi

# every module of lua/durable/, and the C half
for f in "$src"/lua/durable/*.lua; do
  name=$(basename "$f" .lua)
  if [[ $name == init ]]; then want=durable.lua; else want=durable/$name.lua; fi
  [[ -e $tree/share/lua/5.4/$want ]] ||
    { echo "FAIL: lua/durable/$name.lua is not installed as share/lua/5.4/$want (add it to the rockspec's install.lua)"; fail=1; }
done
[[ -e $tree/lib/lua/5.4/durable/core.so ]] ||
  { echo "FAIL: durable.core is not installed as lib/lua/5.4/durable/core.so"; fail=1; }

# ---- the stock lua5.4 with that tree's paths ---------------------------------
cat >"$work/use.lua" <<'EOF'
local tree, db = arg[1], arg[2]
local durable = require "durable"
for _, m in ipairs { { "durable", package.path }, { "durable.core", package.cpath } } do
  local file = assert(package.searchpath(m[1], m[2]))
  assert(file:sub(1, #tree + 1) == tree .. "/", m[1] .. " was found at " .. file .. ", not in the tree")
end
local mesh = assert(durable.open { store = "sqlite:" .. db })
-- the stream's owner, so that the publish warns of nothing
assert(mesh:put_node { path = "Space/notes", node_type = "Notebook", content = {} }:wait())
local client = mesh:hub("client/luarocks")
local stream = { namespace = "Notes", key = "Space/notes" }
local seq = assert(client:publish_durable(stream, { ["$type"] = "Note", text = "from the rock" }):wait())
assert(seq == 1, "the first publish's sequence is " .. tostring(seq))
local got
local sub = client:read_durable(stream, 0, function(item) got = got or item end)
assert(mesh:run_until(function() return got ~= nil end, 10000))
sub:close()
assert(got.sequence == 1 and got.payload.text == "from the rock", "read back " .. tostring(got.raw))
mesh:close()
print("lua5.4: published and read back " .. got.raw)
EOF
paths=$(luarocks --lua-version 5.4 --tree "$tree" path) ||
  { echo "FAIL: luarocks path"; exit 1; }
mkdir -p "$work/elsewhere"
if ! out=$(cd "$work/elsewhere" && eval "$paths" &&
  lua5.4 "$work/use.lua" "$tree" "$work/elsewhere/rock.db" 2>&1); then
  echo "FAIL: lua5.4 with the tree's paths:"
  printf '%s\n' "$out" | sed 's/^/  | /'
  fail=1
else
  echo "$out"
fi
((fail)) || echo "luarocks: ok"
exit "$fail"
