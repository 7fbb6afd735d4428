# Install and export (included from the top-level CMakeLists.txt after every library is defined).
#   cmake --install build --prefix PREFIX
# puts the static libraries in PREFIX/lib, the headers in PREFIX/include/manyadd, the tools in PREFIX/bin
# as manyadd-<tool> (train and evaluate are too generic as names on a PATH), and
# PREFIX/lib/cmake/manyadd/ so that another project writes
#   find_package(manyadd 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE manyadd::learn)   # or manyadd::construct, manyadd::proofs
# examples/cpp/ is such a project; tests/test_install.sh installs into a temporary prefix and builds it.
include(CMakePackageConfigHelpers)

set(manyadd_libraries manyadd_core manyadd_kernels manyadd_construct manyadd_proofs manyadd_learn)
foreach(lib IN LISTS manyadd_libraries)
  string(REPLACE "manyadd_" "" short ${lib})
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${short})
endforeach()
# The warning flags are a private, compile-time-only dependency of the libraries; a static library's
# private link dependencies are still named in its export, so this interface target is exported too
# (it adds no flag to a consumer: the libraries link it PRIVATE).
set_target_properties(manyadd_warnings PROPERTIES EXPORT_NAME warnings)

install(TARGETS ${manyadd_libraries} manyadd_warnings
        EXPORT manyaddTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
foreach(dir core kernels construct proofs-check learn)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
endforeach()

set(manyadd_tools export_qkv verify_construction train evaluate dump_attention compare_attention dump_batches
                  format_ids grid_png)
foreach(tool IN LISTS manyadd_tools)
  install(PROGRAMS $<TARGET_FILE:${tool}> DESTINATION ${CMAKE_INSTALL_BINDIR} RENAME manyadd-${tool})
endforeach()

set(manyadd_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/manyadd)
install(EXPORT manyaddTargets NAMESPACE manyadd:: DESTINATION ${manyadd_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/manyaddConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/manyaddConfig.cmake
                              INSTALL_DESTINATION ${manyadd_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/manyaddConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/manyaddConfig.cmake ${PROJECT_BINARY_DIR}/manyaddConfigVersion.cmake
        DESTINATION ${manyadd_cmake_dir})
