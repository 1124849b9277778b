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
#   share/man/man1/durable.1                generated from --help (doc/)
#   share/bash-completion/completions/durable
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

# ---- the Debian package: cpack -G DEB --config build/CPackConfig.cmake ------
# Everything above, under /usr, as durable_VERSION_ARCH.deb.  Its
# dependencies are what dpkg-shlibdeps reads from the binaries (libuv1,
# libjansson4, libsqlite3-0, libpq5, liblua5.4-0 and libc6, at the versions
# they were built against), plus lua5.4 for `require "durable"` from the
# stock interpreter, which is only recommended.
set(CPACK_PACKAGE_NAME durable)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "durable streams on SQLite and PostgreSQL, in C with Lua plugins")
set(CPACK_PACKAGE_CONTACT "durable maintainers <durable@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libuv1-dev")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "lua5.4, bash-completion")
set(CPACK_STRIP_FILES OFF)
include(CPack)
