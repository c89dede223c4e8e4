# What `cmake --install` (and `make install PREFIX=...`) puts under the prefix: the public
# headers, libtensorwire.so (SONAME-versioned), tensorwire-server, the tensorwire CLI, the torch
# backend module, a CMake package (find_package(tensorwire CONFIG), target tensorwire::tensorwire),
# tensorwire.pc, and a systemd unit with an example server configuration. The Python package's
# rules are in python/CMakeLists.txt (component "python", not part of a plain install).
# Included by the root CMakeLists.txt once every target exists; tests/install checks the result.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The ABI version. While the major version is 0 any minor release may break the ABI, so the
# SONAME carries major.minor (libtensorwire.so.0.1) and the CMake package accepts only the same
# minor version; from 1.0 on, the major version alone.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(TW_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  set(tw_compatibility SameMinorVersion)
else()
  set(TW_SOVERSION ${PROJECT_VERSION_MAJOR})
  set(tw_compatibility SameMajorVersion)
endif()
set_target_properties(tensorwire PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${TW_SOVERSION})

# Installed programs find the library relative to themselves (bin/../lib), so that a prefix
# anywhere runs without LD_LIBRARY_PATH; the torch module (lib/tensorwire/) finds it one level up.
# libtensorwire.so itself needs no RPATH: everything it links is in the system's directories.
file(RELATIVE_PATH tw_bin_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
set_target_properties(tensorwire-server tensorwire-cli PROPERTIES
  INSTALL_RPATH "$ORIGIN/${tw_bin_to_lib}")

install(TARGETS tensorwire LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS tensorwire-server tensorwire-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/tensorwire
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
if(TW_TORCH_FOUND)
  # Where backend/torch_loader.cc looks first: tensorwire/ beside the loaded libtensorwire.so.
  # INSTALL_RPATH_USE_LINK_PATH keeps a libtorch found outside the system's directories.
  set_target_properties(tw_backend_torch PROPERTIES
    INSTALL_RPATH "$ORIGIN/.." INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS tw_backend_torch LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/tensorwire)
endif()

# The CMake package. The target is written here rather than exported (install(EXPORT)): the
# library links the layers' object libraries PUBLIC, whose usage requirements (src/ includes,
# OpenSSL, oneDNN, Gloo, prometheus-cpp) are for the tests and must not reach a consumer; the
# installed interface is the headers, the library and C++20. The public headers include only the
# standard library, so the one dependency is the thread library.
set(TW_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tensorwire)
set(TW_LIBRARY_FILE
  ${CMAKE_SHARED_LIBRARY_PREFIX}tensorwire${CMAKE_SHARED_LIBRARY_SUFFIX}.${PROJECT_VERSION})
set(TW_LIBRARY_SONAME
  ${CMAKE_SHARED_LIBRARY_PREFIX}tensorwire${CMAKE_SHARED_LIBRARY_SUFFIX}.${TW_SOVERSION})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/tensorwireConfig.cmake.in
  ${CMAKE_BINARY_DIR}/install/tensorwireConfig.cmake
  INSTALL_DESTINATION ${TW_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/install/tensorwireConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ${tw_compatibility})
install(FILES ${CMAKE_BINARY_DIR}/install/tensorwireConfig.cmake
              ${CMAKE_BINARY_DIR}/install/tensorwireConfigVersion.cmake
  DESTINATION ${TW_CMAKE_DIR})

# Files that name absolute paths under the prefix (tensorwire.pc, the systemd unit) are made at
# install time, so that `cmake --install --prefix P` writes P into them, not the configured prefix.
# Configuring here fills everything else and turns @TW_PREFIX@ into @CMAKE_INSTALL_PREFIX@, which
# the install step then replaces.
set(TW_PREFIX "@CMAKE_INSTALL_PREFIX@")
foreach(f tensorwire.pc tensorwire-server.service)
  configure_file(${CMAKE_SOURCE_DIR}/packaging/${f}.in ${CMAKE_BINARY_DIR}/install/${f}.in @ONLY)
  install(CODE "configure_file(\"${CMAKE_BINARY_DIR}/install/${f}.in\" \
\"${CMAKE_BINARY_DIR}/install/${f}\" @ONLY)")
endforeach()
install(FILES ${CMAKE_BINARY_DIR}/install/tensorwire.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
# systemd reads units from <prefix>/lib/systemd/system for /usr and /usr/local (not a multiarch
# directory); the example configuration goes to share/tensorwire, to be copied to /etc/tensorwire.
install(FILES ${CMAKE_BINARY_DIR}/install/tensorwire-server.service
  DESTINATION lib/systemd/system)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/tensorwire-server.conf
  DESTINATION ${CMAKE_INSTALL_DATADIR}/tensorwire)
# The user guides (the unit's Documentation= names remote.md there).
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}
  FILES_MATCHING PATTERN "*.md")

# The test of all of the above (tests/install/install_test.py): installs this build into a
# temporary prefix and builds and runs examples/cpp against it, with find_package and with
# pkg-config. It installs what the build made, so it runs after a full build, as ctest does. Not
# in a sanitizer build: programs built without the sanitizers cannot load a sanitised library.
if(TW_BUILD_TESTS AND NOT TW_SANITIZE)
  add_test(NAME install_cmake_pkgconfig
    COMMAND ${TW_PYTHON} ${CMAKE_SOURCE_DIR}/tests/install/install_test.py ${CMAKE_BINARY_DIR}
            ${CMAKE_SOURCE_DIR})
  set_tests_properties(install_cmake_pkgconfig PROPERTIES TIMEOUT 300)
endif()
