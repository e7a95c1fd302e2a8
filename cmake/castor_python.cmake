# castor_python.cmake: the Python module (python/castor, docs/python.md), a
# ctypes layer over libcastor.so (castor_shared). Included by the top-level
# CMakeLists.txt after castor_aot.cmake.
#
# Build tree: build/python/castor is the package with a _config.py that
# names build/lib, so `PYTHONPATH=build/python python3 -c "import castor"`
# finds the library just built. Install: the package goes to
# CASTOR_PYTHON_SITEDIR under the prefix, with a _config.py naming the
# library's directory relative to it.

set(castor_py_files __init__.py _lib.py _core.py _train.py)
foreach(f ${castor_py_files})
  configure_file(${CMAKE_SOURCE_DIR}/python/castor/${f} ${CMAKE_BINARY_DIR}/python/castor/${f} COPYONLY)
endforeach()
file(WRITE ${CMAKE_BINARY_DIR}/python/castor/_config.py
  "# written by CMake (cmake/castor_python.cmake): where this build's libcastor is\nLIBDIR = \"${CMAKE_BINARY_DIR}/lib\"\nSONAME = \"libcastor.so.${PROJECT_VERSION_MAJOR}\"\n")

# Where cmake --install puts the package, relative to the prefix: a
# directory on Debian's python3 sys.path for /usr (lib/python3/dist-packages)
# and /usr/local (lib/python3.X/dist-packages); else site-packages, to be
# put on PYTHONPATH.
find_program(CASTOR_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(NOT CASTOR_PYTHON3)
  find_program(CASTOR_PYTHON3 python3)
endif()
if(NOT DEFINED CASTOR_PYTHON_SITEDIR)
  set(castor_sitedir "lib/python3/site-packages")
  if(CASTOR_PYTHON3)
    execute_process(COMMAND ${CASTOR_PYTHON3} -c
      "import sys, sysconfig\nv = '%d.%d' % sys.version_info[:2]\ns = sysconfig.get_scheme_names()\nif sys.argv[1] == '/usr' and 'deb_system' in s: print('lib/python3/dist-packages')\nelif 'posix_local' in s: print('lib/python%s/dist-packages' % v)\nelse: print('lib/python%s/site-packages' % v)"
      ${CMAKE_INSTALL_PREFIX}
      OUTPUT_VARIABLE castor_sitedir OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE castor_py_rc)
    if(NOT castor_py_rc EQUAL 0)
      set(castor_sitedir "lib/python3/site-packages")
    endif()
  endif()
  set(CASTOR_PYTHON_SITEDIR ${castor_sitedir} CACHE STRING
    "Where cmake --install puts the castor Python package, relative to the install prefix")
endif()
file(RELATIVE_PATH castor_py_libdir /prefix/${CASTOR_PYTHON_SITEDIR}/castor /prefix/${CMAKE_INSTALL_LIBDIR})
file(WRITE ${CMAKE_BINARY_DIR}/install/python/_config.py
  "# written by CMake (cmake/castor_python.cmake): libcastor's directory, relative to this package\nLIBDIR = \"${castor_py_libdir}\"\nSONAME = \"libcastor.so.${PROJECT_VERSION_MAJOR}\"\n")
list(TRANSFORM castor_py_files PREPEND ${CMAKE_SOURCE_DIR}/python/castor/)
install(FILES ${castor_py_files} ${CMAKE_BINARY_DIR}/install/python/_config.py
  DESTINATION ${CASTOR_PYTHON_SITEDIR}/castor)
