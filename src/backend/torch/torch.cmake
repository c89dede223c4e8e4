# The LibTorch backend (src/backend/torch): AUTO builds it when CMake finds libtorch (Debian's
# libtorch-dev, which scripts/bootstrap.sh installs), ON requires it, OFF leaves it out. Only the
# backend's own files see torch headers (as system headers: they are not warning-clean).
set(TW_WITH_TORCH AUTO CACHE STRING "Build the LibTorch backend: AUTO, ON or OFF")
set_property(CACHE TW_WITH_TORCH PROPERTY STRINGS AUTO ON OFF)
set(TW_TORCH_FOUND OFF)
if(NOT TW_WITH_TORCH STREQUAL "OFF")
  find_package(Torch CONFIG QUIET)
  if(Torch_FOUND)
    set(TW_TORCH_FOUND ON)
    message(STATUS "LibTorch found: building the torch backend")
  elseif(TW_WITH_TORCH STREQUAL "ON")
    message(FATAL_ERROR "TW_WITH_TORCH=ON but libtorch was not found (apt-get install libtorch-dev)")
  else()
    message(STATUS "LibTorch not found: building without the torch backend")
  endif()
endif()

if(TW_TORCH_FOUND)
  # Loading libtorch costs about a second (hundreds of shared libraries and ATen's op
  # registrations), which every process that never uses torch, such as each test's server,
  # would otherwise pay at startup.
  tw_backend_module(torch)
  target_link_libraries(tw_backend_torch PRIVATE torch)
endif()
