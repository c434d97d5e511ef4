# `cmake --install`: the libraries, their public headers, the CMake package (moestatConfig.cmake
# with the components cuda, http and llama_cpp) and pkg-config's moestat.pc. The synthetic workload,
# the CLI and the Python module are not part of it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MOESTAT_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/moestat)

# One export set per component, so that loading the package needs CUDA (or llama.cpp) only when
# the component that links it is asked for (http needs nothing more, and stays a component so
# that only a program serving metrics links the endpoint).
install(TARGETS moestat moestat_core moestat_record_cpu moestat_io moestat_plan moestat_report
                moestat_online moestat_routes
        EXPORT moestatTargets FILE_SET HEADERS)
install(EXPORT moestatTargets NAMESPACE moestat:: DESTINATION ${MOESTAT_CMAKE_INSTALL_DIR})
set(MOESTAT_BUILT_COMPONENTS "")
if(TARGET moestat_record_cuda)
  list(APPEND MOESTAT_BUILT_COMPONENTS cuda)
  install(TARGETS moestat_cuda_support EXPORT moestatCudaTargets)
  install(TARGETS moestat_record_cuda moestat_routes_cuda EXPORT moestatCudaTargets
          FILE_SET HEADERS)
  install(EXPORT moestatCudaTargets NAMESPACE moestat:: DESTINATION ${MOESTAT_CMAKE_INSTALL_DIR})
endif()

# llama_cpp links llama.cpp's shared libraries where this build found them (MOESTAT_LLAMA_CPP_DIR).
if(TARGET moestat_llama_cpp)
  list(APPEND MOESTAT_BUILT_COMPONENTS llama_cpp)
  install(TARGETS moestat_llama_cpp EXPORT moestatLlamaCppTargets FILE_SET HEADERS)
  install(EXPORT moestatLlamaCppTargets NAMESPACE moestat:: DESTINATION ${MOESTAT_CMAKE_INSTALL_DIR})
endif()

if(TARGET moestat_online_http)
  list(APPEND MOESTAT_BUILT_COMPONENTS http)
  install(TARGETS moestat_online_http EXPORT moestatHttpTargets FILE_SET HEADERS)
  install(EXPORT moestatHttpTargets NAMESPACE moestat:: DESTINATION ${MOESTAT_CMAKE_INSTALL_DIR})
endif()

# Static libraries carry their private dependencies to the program that links them.
if(BUILD_SHARED_LIBS)
  set(MOESTAT_STATIC_LIBRARIES OFF)
else()
  set(MOESTAT_STATIC_LIBRARIES ON)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/moestatConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/moestatConfig.cmake
                              INSTALL_DESTINATION ${MOESTAT_CMAKE_INSTALL_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/moestatConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/moestatConfig.cmake
              ${PROJECT_BINARY_DIR}/moestatConfigVersion.cmake
        DESTINATION ${MOESTAT_CMAKE_INSTALL_DIR})

# pkg-config: prefix relative to the .pc file, so `cmake --install --prefix` may move the tree.
file(RELATIVE_PATH MOESTAT_PC_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" MOESTAT_PC_PREFIX "${MOESTAT_PC_PREFIX}")
if(MOESTAT_STATIC_LIBRARIES)
  set(MOESTAT_PC_REQUIRES "fmt libzip librsvg-2.0 cairo")
  set(MOESTAT_PC_REQUIRES_PRIVATE "")
else()
  set(MOESTAT_PC_REQUIRES "fmt")
  set(MOESTAT_PC_REQUIRES_PRIVATE "libzip librsvg-2.0 cairo")
endif()
# fmt's header-only mode is a define every user of the headers must share.
if(MOESTAT_FMT_HEADER_ONLY)
  set(MOESTAT_PC_FMT_CFLAGS " -DFMT_HEADER_ONLY=1")
else()
  set(MOESTAT_PC_FMT_CFLAGS "")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/moestat.pc.in ${PROJECT_BINARY_DIR}/moestat.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/moestat.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
