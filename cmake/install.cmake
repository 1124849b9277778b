# cmake/install.cmake: what `cmake --install` puts where, and the .deb.
#
# Installed the way libuv, SQLite and luv install on Debian, so that an
# embedder finds durable with the tools it already uses:
#
#   include/durable.h                       the one public header
#   LIBDIR/libdurable.so.0 (.so, .a)        shared (SONAME .so.0) and static
#   LIBDIR/pkgconfig/durable.pc             pkg-config --cflags --libs durable
#   LIBDIR/cmake/durable/                   find_package(durable) -> durable::durable
#   bin/durable                             the command
#   LIBDIR/lua/5.4/durable/core.so          where the stock lua5.4 looks (cpath)
#   share/lua/5.4/durable/*.lua             ... and package.path
#   share/durable/plugins/*.lua             `durable run document_log` finds them
#   share/man/man1/durable.1.gz             generated from --help (doc/)
#   share/bash-completion/completions/durable
#   share/doc/durable/                      README.md, doc/*.md, lua/README.md,
#                                           examples/, copyright, changelog.gz
#
# The CMake package exports only the shared library: the static one needs
# its private dependencies spelled out (pkg-config --static does that), and
# an embedder of the shared one needs only libuv, whose headers durable.h
# includes.  CPack turns the same install into durable_VERSION_ARCH.deb.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DURABLE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/durable)

# durable.pc finds the prefix from where it lies: one ".." per folder of
# LIBDIR/pkgconfig (lib/pkgconfig, or lib/x86_64-linux-gnu/pkgconfig).
string(REGEX REPLACE "[^/]+" ".." DURABLE_PC_UP "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
configure_file(src/durable.pc.in ${CMAKE_BINARY_DIR}/durable.pc @ONLY)
install(TARGETS durable ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS durable_shared EXPORT durableTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES src/include/durable.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_BINARY_DIR}/durable.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(EXPORT durableTargets NAMESPACE durable::
  FILE durableTargets.cmake DESTINATION ${DURABLE_CMAKE_DIR})
configure_package_config_file(cmake/durableConfig.cmake.in
  ${CMAKE_BINARY_DIR}/durableConfig.cmake
  INSTALL_DESTINATION ${DURABLE_CMAKE_DIR})
# 0.x: a minor release may break (semantic versioning before 1.0).
write_basic_package_version_file(${CMAKE_BINARY_DIR}/durableConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/durableConfig.cmake
  ${CMAKE_BINARY_DIR}/durableConfigVersion.cmake
  DESTINATION ${DURABLE_CMAKE_DIR})

install(TARGETS durable-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS durable_lua_module
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/lua/5.4/durable)
install(DIRECTORY lua/durable DESTINATION ${CMAKE_INSTALL_DATADIR}/lua/5.4
  FILES_MATCHING PATTERN "*.lua" PATTERN "_meta" EXCLUDE)
install(DIRECTORY plugins/ DESTINATION ${CMAKE_INSTALL_DATADIR}/durable/plugins
  FILES_MATCHING PATTERN "*.lua")
install(FILES src/cli/completion.bash
  DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
  RENAME durable)

# ---- the documentation: DOCDIR, share/doc/durable --------------------------
# Laid out as in the source tree, so that the pages' links to each other
# (README.md -> doc/operations.md -> ../lua/README.md) hold there too.  The
# copyright file is LICENSE in Debian's machine-readable format (policy
# 12.5), and changelog.gz the one entry a native package needs (12.7); both
# are made here, from LICENSE and the version.
set(DURABLE_PACKAGE_CONTACT "durable maintainers <durable@example.org>" CACHE STRING
  "The .deb's Maintainer (and its changelog's signature): whoever publishes the package puts their own")
file(READ LICENSE durable_license)
if(NOT durable_license MATCHES "Copyright \\(c\\) ([^\n]+)\n")
  message(FATAL_ERROR "LICENSE: no line `Copyright (c) YEAR HOLDER`")
endif()
set(DURABLE_COPYRIGHT "${CMAKE_MATCH_1}")
string(FIND "${durable_license}" "Permission is hereby granted" durable_at)
if(durable_at LESS 0)
  message(FATAL_ERROR "LICENSE: not the MIT (Expat) text cmake/debian/copyright.in says it is")
endif()
string(SUBSTRING "${durable_license}" ${durable_at} -1 durable_license)
string(STRIP "${durable_license}" durable_license)
# a DEP-5 text field: every line indented, an empty one written " ."
string(REGEX REPLACE "\n\n" "\n.\n" durable_license "${durable_license}")
string(REGEX REPLACE "\n" "\n " DURABLE_LICENSE_TEXT " ${durable_license}")
configure_file(cmake/debian/copyright.in ${CMAKE_BINARY_DIR}/debian/copyright @ONLY)
# The entry's date is the configure's (SOURCE_DATE_EPOCH when it is set).
string(TIMESTAMP DURABLE_CHANGELOG_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file(cmake/debian/changelog.in ${CMAKE_BINARY_DIR}/debian/changelog @ONLY)
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/debian/changelog.gz
  COMMAND gzip -9 -n -k -f ${CMAKE_BINARY_DIR}/debian/changelog
  DEPENDS ${CMAKE_BINARY_DIR}/debian/changelog
  COMMENT "Compressing the package's changelog" VERBATIM)
add_custom_target(durable_changelog ALL DEPENDS ${CMAKE_BINARY_DIR}/debian/changelog.gz)

install(FILES README.md ${CMAKE_BINARY_DIR}/debian/copyright
  ${CMAKE_BINARY_DIR}/debian/changelog.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY doc/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/doc
  FILES_MATCHING PATTERN "*.md")
install(FILES lua/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR}/lua)
install(DIRECTORY examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples
  PATTERN "build" EXCLUDE PATTERN "build-*" EXCLUDE PATTERN "*.db*" EXCLUDE)

# ---- the Debian package: cpack -G DEB --config build/CPackConfig.cmake ------
# Everything above, under /usr, as durable_VERSION_ARCH.deb, and its
# detached debugging symbols as durable-dbgsym_VERSION_ARCH.ddeb (the
# package's binaries are stripped; the .ddeb's files, under
# /usr/lib/debug/.build-id, are what gdb loads for them).  Its
# dependencies are what dpkg-shlibdeps reads from the binaries (libuv1,
# libjansson4, libsqlite3-0, libpq5, liblua5.4-0 and libc6, at the versions
# they were built against), plus lua5.4 for `require "durable"` from the
# stock interpreter, which is only recommended.  It declares libdurable.so.0
# (shlibs: a program linked against it depends on this exact version, since
# a 0.x minor release may break it under the same SONAME) and has ldconfig
# run by its trigger.  `lintian` on it reports no error (tests/install/deb.sh).
set(CPACK_PACKAGE_NAME durable)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# (the synopsis may start neither with the package's name nor an article)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "runtime for durable streams on SQLite and PostgreSQL, with Lua plugins")
set(CPACK_PACKAGE_DESCRIPTION [=[
durable keeps append-only, per-stream ordered sequences of items that
survive process and host restarts, each consumed by one leased consumer
(or consumer group) at a time, which resumes after the last item it
acknowledged. Consumers run in hubs, addressable actors on libuv whose
NodeTypes are Lua plugins: in one process on a SQLite file, or in many
processes on one PostgreSQL database.

This package holds libdurable (shared and static, durable.h, pkg-config
and CMake files), the durable command and its manual page, the Lua 5.4
module durable, the plugins, and the documentation and examples in
/usr/share/doc/durable.
]=])
set(CPACK_PACKAGE_CONTACT "${DURABLE_PACKAGE_CONTACT}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY "=")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/cmake/debian/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_DEBUGINFO_PACKAGE ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libuv1-dev")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "lua5.4, bash-completion")
include(CPack)
