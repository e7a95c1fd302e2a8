# SPDX-License-Identifier: Apache-2.0
# castor_aot.cmake: ahead-of-time compilation (`castor build`) and the
# installation (`cmake --install`). Included by the top-level CMakeLists.txt
# after the libraries and tools are defined.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# ---- castor build ----

# main() of the executables castor build links: the model's object file +
# this archive + libcastor_formats.a (.npy) + libcastor_runtime.a +
# libcastor_util.a (no LLVM, no zlib).
add_library(castor_aot_main STATIC ${CMAKE_SOURCE_DIR}/runtime/aot/aot_main.c)
target_link_libraries(castor_aot_main PUBLIC castor_runtime castor_formats)

# Where castor build finds those archives: installed, relative to the castor
# executable; in a build tree, here. Sanitized archives need the sanitizer
# at link time too.
file(RELATIVE_PATH castor_aot_reldir /prefix/${CMAKE_INSTALL_BINDIR} /prefix/${CMAKE_INSTALL_LIBDIR}/castor)
set(castor_aot_link_flags "")
if(CASTOR_SANITIZE OR CASTOR_FUZZ)
  set(castor_aot_link_flags "-fsanitize=address,undefined")
endif()
target_sources(castor_cli PRIVATE ${CMAKE_SOURCE_DIR}/tools/castor_build.c)
target_compile_definitions(castor_cli PRIVATE
  CASTOR_AOT_RELDIR="${castor_aot_reldir}"
  CASTOR_AOT_BUILD_LIBDIR="${CMAKE_BINARY_DIR}"
  CASTOR_AOT_LINK_FLAGS="${castor_aot_link_flags}")
add_dependencies(castor_cli castor_aot_main castor_formats castor_runtime castor_util)

# ---- installable libcastor: shared (only CASTOR_API symbols exported, the
# rest is -fvisibility=hidden) and static (every layer in one archive) ----

file(GLOB castor_api_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/api/*.c ${CMAKE_SOURCE_DIR}/api/check/*.c)
add_library(castor_shared SHARED ${castor_api_srcs})
target_include_directories(castor_shared
  PUBLIC $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  PRIVATE ${CMAKE_SOURCE_DIR} ${LLVM_INCLUDE_DIRS})
target_link_libraries(castor_shared PRIVATE castor_frontend castor_passes castor_codegen castor_runtime castor_formats)
set_target_properties(castor_shared PROPERTIES
  OUTPUT_NAME castor VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
if(NOT CASTOR_SANITIZE AND NOT CASTOR_FUZZ) # sanitizer runtimes are linked into executables only
  target_link_options(castor_shared PRIVATE -Wl,--no-undefined)
endif()

add_library(castor_static STATIC
  $<TARGET_OBJECTS:castor> $<TARGET_OBJECTS:castor_frontend> $<TARGET_OBJECTS:castor_passes>
  $<TARGET_OBJECTS:castor_codegen> $<TARGET_OBJECTS:castor_runtime> $<TARGET_OBJECTS:castor_formats>
  $<TARGET_OBJECTS:castor_train> $<TARGET_OBJECTS:castor_ir> $<TARGET_OBJECTS:castor_onnx_pb>
  $<TARGET_OBJECTS:castor_util>)
set_target_properties(castor_static PROPERTIES OUTPUT_NAME castor LINKER_LANGUAGE C
  ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)

# ---- install ----

set(castor_llvm_libs "-L${LLVM_LIBRARY_DIR} -lLLVM-${LLVM_VERSION_MAJOR}")
file(RELATIVE_PATH castor_pc_to_prefix /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
file(RELATIVE_PATH castor_config_to_prefix /prefix/${CMAKE_INSTALL_LIBDIR}/cmake/castor /prefix)
configure_file(${CMAKE_SOURCE_DIR}/cmake/castor.pc.in ${CMAKE_BINARY_DIR}/install/castor.pc @ONLY)
configure_file(${CMAKE_SOURCE_DIR}/cmake/castor-runtime.pc.in ${CMAKE_BINARY_DIR}/install/castor-runtime.pc @ONLY)
configure_file(${CMAKE_SOURCE_DIR}/cmake/castorConfig.cmake.in ${CMAKE_BINARY_DIR}/install/castorConfig.cmake @ONLY)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/install/castorConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)

install(TARGETS castor_cli castor-opt RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS castor_shared castor_static
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/castor.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_BINARY_DIR}/install/castor.pc ${CMAKE_BINARY_DIR}/install/castor-runtime.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(FILES ${CMAKE_BINARY_DIR}/install/castorConfig.cmake ${CMAKE_BINARY_DIR}/install/castorConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/castor)
# what castor build links into executables and objects
install(TARGETS castor_aot_main castor_formats castor_runtime castor_util ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}/castor)
