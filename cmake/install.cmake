# What `cmake --install` puts under the prefix (docs/install.md):
#   include/handgrad*.h                      the public API
#   lib/libhandgrad.so.X.Y, libhandgrad.a    the library, shared and static
#   lib/libhandgrad_cuda.so                  the CUDA module, in CUDA builds
#   bin/handgrad                             the command
#   lib/pkgconfig/handgrad.pc                pkg-config handgrad [--static]
#   lib/cmake/handgrad/                      find_package(handgrad [COMPONENTS static])
include(CMakePackageConfigHelpers)

install(FILES ${PROJECT_SOURCE_DIR}/include/handgrad.h ${PROJECT_SOURCE_DIR}/include/handgrad_data.h
              ${PROJECT_SOURCE_DIR}/include/handgrad_dist.h ${PROJECT_SOURCE_DIR}/include/handgrad_ext.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS handgrad_shared EXPORT handgradTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set_target_properties(handgrad PROPERTIES EXPORT_NAME handgrad_static)
install(TARGETS handgrad EXPORT handgradStaticTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS handgrad_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(HG_HAVE_CUDA)
  install(TARGETS handgrad_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

set(HG_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/handgrad)
install(EXPORT handgradTargets NAMESPACE handgrad:: DESTINATION ${HG_CMAKE_DIR})
install(EXPORT handgradStaticTargets NAMESPACE handgrad:: DESTINATION ${HG_CMAKE_DIR})
# the static library's dependencies, found again by the package config
set(HG_STATIC_NEEDS_MPI ${MPI_C_FOUND})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/handgradConfig.cmake.in
  ${CMAKE_BINARY_DIR}/handgradConfig.cmake INSTALL_DESTINATION ${HG_CMAKE_DIR})
# 0.x: a minor version may change the API, so only the same minor version is compatible
write_basic_package_version_file(${CMAKE_BINARY_DIR}/handgradConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/handgradConfig.cmake ${CMAKE_BINARY_DIR}/handgradConfigVersion.cmake
        DESTINATION ${HG_CMAKE_DIR})

# pkg-config: -lhandgrad takes the shared library; --static adds what libhandgrad.a needs.
set(HG_PC_LIBS_PRIVATE "${OpenMP_C_FLAGS} -L$<TARGET_LINKER_FILE_DIR:DNNL::dnnl> -ldnnl -lmvec -lm")
foreach(lib ${CMAKE_DL_LIBS})
  string(APPEND HG_PC_LIBS_PRIVATE " -l${lib}")
endforeach()
if(MPI_C_FOUND)
  list(JOIN MPI_C_LIBRARIES " " HG_PC_MPI)
  string(APPEND HG_PC_LIBS_PRIVATE " ${HG_PC_MPI}")
endif()
string(REPLACE ";" " " HG_PC_LIBS_PRIVATE "${HG_PC_LIBS_PRIVATE}")
# the prefix is found relative to the .pc file, so an install moved elsewhere still works
file(RELATIVE_PATH HG_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
configure_file(${CMAKE_CURRENT_LIST_DIR}/handgrad.pc.in ${CMAKE_BINARY_DIR}/handgrad.pc.gen @ONLY)
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/handgrad.pc INPUT ${CMAKE_BINARY_DIR}/handgrad.pc.gen)
install(FILES ${CMAKE_BINARY_DIR}/handgrad.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
