# Picks the Python interpreter the extension is built for and the Python tests run with: an explicit
# -DPython_EXECUTABLE wins; otherwise the first of (active virtualenv, python3 on PATH, /usr/bin/python3)
# that can import torch, because the package is useless to an interpreter without it (on Debian the
# python3 on PATH may be a pyenv build without torch while /usr/bin/python3 has python3-torch).
include_guard()

if(NOT Python_EXECUTABLE)
  set(_tnn_py_candidates)
  if(DEFINED ENV{VIRTUAL_ENV})
    list(APPEND _tnn_py_candidates "$ENV{VIRTUAL_ENV}/bin/python3")
  endif()
  find_program(_tnn_path_python3 NAMES python3 NO_CACHE)
  if(_tnn_path_python3)
    list(APPEND _tnn_py_candidates "${_tnn_path_python3}")
  endif()
  list(APPEND _tnn_py_candidates /usr/bin/python3)
  foreach(_tnn_py IN LISTS _tnn_py_candidates)
    if(EXISTS "${_tnn_py}")
      execute_process(COMMAND "${_tnn_py}" -c "import torch"
                      RESULT_VARIABLE _tnn_py_rv OUTPUT_QUIET ERROR_QUIET)
      if(_tnn_py_rv EQUAL 0)
        set(Python_EXECUTABLE "${_tnn_py}" CACHE FILEPATH "Python interpreter for tinycudann (one with torch)")
        break()
      endif()
    endif()
  endforeach()
  if(NOT Python_EXECUTABLE)
    message(WARNING "tinycudann: no Python interpreter with torch found; building for the default one "
                    "(pass -DPython_EXECUTABLE=/path/to/python to choose)")
  endif()
endif()

find_package(Python 3.8 REQUIRED COMPONENTS Interpreter Development.Module)
message(STATUS "tinycudann: Python ${Python_VERSION} at ${Python_EXECUTABLE}")
# Where the in-tree build assembles the importable package (tinycudann/ with _C next to the .py files).
set(TNN_PYTHON_PACKAGE_ROOT "${CMAKE_BINARY_DIR}/python" CACHE INTERNAL "")
