# The cuda backend (src/backend/cuda): a module (libtw_backend_cuda.so) built where CMake finds
# nvcc and the CUDA toolkit (cudart, cuBLASLt; a toolkit installed by NVIDIA's installer, such as
# /usr/local/cuda, not a Debian package). AUTO builds it when found, ON requires it, OFF leaves
# it out. The runtime API only, cudart linked statically and never the driver library (-lcuda),
# so the module loads on a machine without a driver and reports "no CUDA device: <reason>".
# Kernels are compiled for TW_CUDA_ARCHITECTURES (CMake's CUDA_ARCHITECTURES syntax): by default
# 90, Hopper's SASS plus its PTX, which the driver compiles for any later GPU (docs/cuda.md).
set(TW_WITH_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO, ON or OFF")
set_property(CACHE TW_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set(TW_CUDA_ARCHITECTURES "90" CACHE STRING
    "GPU architectures the cuda backend's kernels are compiled for (90-real: sm_90 SASS; 90: with PTX)")
set(TW_CUDA_FOUND OFF)
# Not in the sanitizer builds: their flags reach nvcc's host compiler through -Xcompiler, which
# splits -fsanitize=address,undefined at the comma, and no GPU runs the module there anyway.
if(NOT TW_WITH_CUDA STREQUAL "OFF" AND NOT TW_FUZZ AND NOT TW_SANITIZE_THREAD AND NOT TW_SANITIZE)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # CMake 3.25 knows no C++20 flag for nvcc (3.26 does); `native` needs a GPU at configure time.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_ARCHITECTURES ${TW_CUDA_ARCHITECTURES})
    set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})
    set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
    enable_language(CUDA)
    find_package(CUDAToolkit QUIET)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND TARGET CUDA::cublasLt)
    set(TW_CUDA_FOUND ON)
    message(STATUS "CUDA ${CUDAToolkit_VERSION} found (${CMAKE_CUDA_COMPILER}): building the cuda "
                   "backend for ${TW_CUDA_ARCHITECTURES}")
  elseif(TW_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TW_WITH_CUDA=ON but nvcc or the CUDA toolkit (cudart, cuBLASLt) was not "
                        "found: put nvcc on PATH or set CMAKE_CUDA_COMPILER")
  else()
    message(STATUS "nvcc or the CUDA toolkit not found: building without the cuda backend")
  endif()
endif()

if(TW_CUDA_FOUND)
  tw_backend_module(cuda)
  set(cu_dir ${CMAKE_SOURCE_DIR}/src/backend/cuda)
  file(GLOB cu_srcs CONFIGURE_DEPENDS ${cu_dir}/*.cu)
  target_sources(tw_backend_cuda PRIVATE ${cu_srcs})
  set_target_properties(tw_backend_cuda PROPERTIES
    CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON CUDA_ARCHITECTURES "${TW_CUDA_ARCHITECTURES}"
    CUDA_SEPARABLE_COMPILATION OFF LINKER_LANGUAGE CXX POSITION_INDEPENDENT_CODE ON)
  # The directory's C++ flags (-Wall ... -march ... -Werror, sanitizers) are the host compiler's:
  # nvcc takes them through -Xcompiler, and its own warnings are errors under TW_WERROR.
  get_target_property(cu_opts tw_backend_cuda COMPILE_OPTIONS)
  set(cu_wrapped "")
  foreach(o ${cu_opts})
    list(APPEND cu_wrapped "$<$<COMPILE_LANGUAGE:CXX>:${o}>" "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${o}>")
  endforeach()
  set_property(TARGET tw_backend_cuda PROPERTY COMPILE_OPTIONS ${cu_wrapped})
  target_compile_options(tw_backend_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
  if(TW_WERROR)
    target_compile_options(tw_backend_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
  endif()
  # The toolkit's headers as system headers for the C++ files (cudart's API, cuBLASLt's).
  target_include_directories(tw_backend_cuda SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(tw_backend_cuda PRIVATE CUDA::cudart_static CUDA::cublasLt)
  # cuDNN (convolution and pooling, conv.cc) has no CMake target: its header and library beside
  # the toolkit, or where CUDNN_ROOT says. Without it those ops are refused by name.
  find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(CUDNN_LIBRARY cudnn HINTS ${CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR}
               ${CUDAToolkit_LIBRARY_ROOT} PATH_SUFFIXES lib lib64)
  if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY)
    message(STATUS "cuDNN found (${CUDNN_LIBRARY}): the cuda backend runs convolutions")
    target_include_directories(tw_backend_cuda SYSTEM PRIVATE ${CUDNN_INCLUDE_DIR})
    target_link_libraries(tw_backend_cuda PRIVATE ${CUDNN_LIBRARY})
    target_compile_definitions(tw_backend_cuda PRIVATE TW_CUDA_CUDNN=1)
  else()
    message(STATUS "cuDNN not found: the cuda backend refuses convolutions and pooling")
  endif()
endif()
