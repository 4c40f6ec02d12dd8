# FindNCCL.cmake — NCCL ships no CMake package. Looks next to the CUDA toolkit first (where this
# project's machines have it), then NCCL_ROOT / NCCL_HOME and the system paths.
# Provides NCCL_FOUND, NCCL_VERSION and the imported target NCCL::NCCL.
find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl
  HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib $ENV{NCCL_ROOT} $ENV{NCCL_HOME}
  PATH_SUFFIXES lib lib64)
if(NCCL_INCLUDE_DIR)
  file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h _major REGEX "^#define NCCL_MAJOR")
  file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h _minor REGEX "^#define NCCL_MINOR")
  string(REGEX REPLACE ".* ([0-9]+).*" "\\1" _major "${_major}")
  string(REGEX REPLACE ".* ([0-9]+).*" "\\1" _minor "${_minor}")
  set(NCCL_VERSION "${_major}.${_minor}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
                                  VERSION_VAR NCCL_VERSION)
if(NCCL_FOUND AND NOT TARGET NCCL::NCCL)
  add_library(NCCL::NCCL UNKNOWN IMPORTED)
  set_target_properties(NCCL::NCCL PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                                              INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
endif()
