# What `cmake --install` (and `make install PREFIX=...`) puts under the prefix: the public
# headers, libtensorwire.so (SONAME-versioned), libtensorwire_onnx.a (ONNX import),
# tensorwire-server, the tensorwire CLI, the torch backend module, a CMake package
# (find_package(tensorwire CONFIG), targets tensorwire::tensorwire and tensorwire::onnx),
# tensorwire.pc and tensorwire-onnx.pc, and a systemd unit with an example server configuration. The Python package's
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
# ONNX import (tensorwire/onnx.h): libtensorwire_onnx.a, static as in the build (the root
# CMakeLists.txt says why), so a consumer links it with libtensorwire.so, libonnx_proto and
# protobuf (target tensorwire::onnx, tensorwire-onnx.pc). Nothing else to version: its ABI is
# libtensorwire's, checked by the same package version.
if(TARGET tensorwire_onnx)
  set(TW_INSTALL_ONNX ON)
  install(TARGETS tensorwire_onnx ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
else()
  set(TW_INSTALL_ONNX OFF)
endif()
foreach(m ${TW_BACKEND_MODULES})
  # Where backend/module_loader.cc looks first: tensorwire/ beside the loaded libtensorwire.so.
  # INSTALL_RPATH_USE_LINK_PATH keeps a runtime found outside the system's directories.
  set_target_properties(tw_backend_${m} PROPERTIES
    INSTALL_RPATH "$ORIGIN/.." INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS tw_backend_${m} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/tensorwire)
endforeach()

# The CMake package. The target is written here rather than exported (install(EXPORT)): the
# library links the layers' object libraries PUBLIC, whose usage requirements (src/ includes,
# OpenSSL, oneDNN, Gloo, prometheus-cpp) are for the tests and must not reach a consumer; the
# installed interface is the headers, the library and C++20. The public headers include only the
# standard library, so the one dependency is the thread library. tensorwire::onnx (where
# libtensorwire_onnx.a was installed) adds ONNX's libonnx_proto and protobuf, found in the
# consumer as the build finds them (find_package(ONNX CONFIG), find_package(Protobuf)).
set(TW_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tensorwire)
set(TW_LIBRARY_FILE
  ${CMAKE_SHARED_LIBRARY_PREFIX}tensorwire${CMAKE_SHARED_LIBRARY_SUFFIX}.${PROJECT_VERSION})
set(TW_LIBRARY_SONAME
  ${CMAKE_SHARED_LIBRARY_PREFIX}tensorwire${CMAKE_SHARED_LIBRARY_SUFFIX}.${TW_SOVERSION})
set(TW_ONNX_LIBRARY_FILE
  ${CMAKE_STATIC_LIBRARY_PREFIX}tensorwire_onnx${CMAKE_STATIC_LIBRARY_SUFFIX})
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
set(tw_configured tensorwire.pc tensorwire-server.service)
if(TW_INSTALL_ONNX)
  # tensorwire-onnx.pc: Requires tensorwire and protobuf (both have a .pc); ONNX ships none, so
  # libonnx_proto is named in Libs, with its directory where that is not the linker's own.
  get_target_property(tw_onnx_proto onnx_proto LOCATION)
  get_filename_component(tw_onnx_proto_dir "${tw_onnx_proto}" DIRECTORY)
  set(TW_ONNX_PROTO_LIBS "-lonnx_proto")
  if(NOT tw_onnx_proto_dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    set(TW_ONNX_PROTO_LIBS "-L${tw_onnx_proto_dir} -lonnx_proto")
  endif()
  list(APPEND tw_configured tensorwire-onnx.pc)
endif()
foreach(f ${tw_configured})
  configure_file(${CMAKE_SOURCE_DIR}/packaging/${f}.in ${CMAKE_BINARY_DIR}/install/${f}.in @ONLY)
  install(CODE "configure_file(\"${CMAKE_BINARY_DIR}/install/${f}.in\" \
\"${CMAKE_BINARY_DIR}/install/${f}\" @ONLY)")
endforeach()
install(FILES ${CMAKE_BINARY_DIR}/install/tensorwire.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(TW_INSTALL_ONNX)
  install(FILES ${CMAKE_BINARY_DIR}/install/tensorwire-onnx.pc
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
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
