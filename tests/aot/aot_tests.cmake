# SPDX-License-Identifier: Apache-2.0
# aot_tests.cmake: tests of `castor build` and of the installation
# (included by tests/CMakeLists.txt).
add_executable(aot_make_npy ${CMAKE_CURRENT_SOURCE_DIR}/aot/make_npy.c)
target_link_libraries(aot_make_npy PRIVATE castor_formats)

set(aot_dir ${CMAKE_CURRENT_SOURCE_DIR}/aot)
# executables vs castor run (bit-identical), their errors, ldd, every --emit
add_test(NAME aot_exe_small
  COMMAND sh ${aot_dir}/aot_exe.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}/samples/mnist_mlp_small.cast full)
add_test(NAME aot_exe_mnist_mlp
  COMMAND sh ${aot_dir}/aot_exe.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}/samples/mnist_mlp.cast quick)
# layers that share compiled bodies: AOT wrappers vs the JIT's buffer tables
add_test(NAME aot_exe_repeated
  COMMAND sh ${aot_dir}/aot_exe.sh ${CMAKE_BINARY_DIR} ${aot_dir}/repeated_layers.cast quick)
# an executable for the AVX512-BF16 family on an AVX2 CPU (QEMU): a clear error, not SIGILL
add_test(NAME aot_cpu_check
  COMMAND sh ${aot_dir}/aot_cpu_check.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}/samples/mnist_mlp_small.cast)
# an executable for the AMX-BF16 family: the CPU and the tile state checked at start-up
add_test(NAME aot_amx_check
  COMMAND sh ${aot_dir}/aot_amx_check.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}/samples/mnist_mlp_small.cast)
# the object-file sample (samples/aot_host.c) linked with the static runtime
add_test(NAME aot_obj_sample COMMAND sh ${aot_dir}/aot_obj.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
# cmake --install into a temporary prefix, then pkg-config and find_package
add_test(NAME aot_install COMMAND sh ${aot_dir}/aot_install.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
# CNN: samples/edge_cnn.cast built with f16 weights under 500 KB, bit-identical to the JIT
add_test(NAME aot_edge_cnn COMMAND sh ${aot_dir}/aot_edge_cnn.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(aot_exe_small aot_exe_mnist_mlp aot_exe_repeated aot_cpu_check aot_amx_check aot_obj_sample aot_install aot_edge_cnn PROPERTIES
  SKIP_RETURN_CODE 77 TIMEOUT 600
  # sanitized runtime archives need the sanitizer where the tests link them
  ENVIRONMENT "CASTOR_AOT_LIBDIR=;CASTOR_TEST_LDFLAGS=${castor_aot_link_flags}")
