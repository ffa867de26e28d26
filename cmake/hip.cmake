# The HIP backend (TNN_HIP=ON): every GPU source (*.cu, the same files the CUDA build compiles) is
# compiled by clang as HIP for AMD RDNA targets (default gfx1201 and gfx1100, wave32) and linked
# into tnn with libamdhip64. Included by CMakeLists.txt after the tnn target and TNN_GPU_SOURCES exist.
#
# Why custom commands and not CMake's HIP language: CMake 3.25 requires a ROCm root holding
# lib/cmake/hip-lang and amd_comgr's CMake package, which Debian 12's libamdhip64-dev does not lay
# out that way. clang -x hip needs none of it: the HIP headers come from --rocm-path, the device
# libraries from --rocm-device-lib-path (a folder made in the build dir, scripts/hip_device_libs.sh).
# The CPU sources, tests and tools stay with the C++ compiler of the build.

set(TNN_HIP_ARCHITECTURES "gfx1201;gfx1100" CACHE STRING "AMD targets to compile device code for (wave32 RDNA: gfx11xx, gfx12xx)")
option(TNN_HIP_WERROR "Compile the HIP sources with -Werror" OFF)
set(TNN_HIP_CLANG "" CACHE FILEPATH "clang++ that compiles HIP (default: clang++-19, or ROCm's clang++ under TNN_HIP_ROCM_PATH)")
set(TNN_HIP_ROCM_PATH "" CACHE PATH "Root holding include/hip/hip_runtime.h (default: /usr for Debian's packages, else /opt/rocm)")

if(NOT TNN_HIP_ROCM_PATH)
  find_path(_tnn_hip_include hip/hip_runtime.h PATHS /opt/rocm/include /usr/include NO_DEFAULT_PATH)
  if(NOT _tnn_hip_include)
    message(FATAL_ERROR "TNN_HIP: hip/hip_runtime.h not found: run scripts/install_deps.sh hip (Debian) or install ROCm")
  endif()
  get_filename_component(_tnn_hip_root "${_tnn_hip_include}" DIRECTORY)
  set(TNN_HIP_ROCM_PATH "${_tnn_hip_root}" CACHE PATH "" FORCE)
endif()
if(NOT TNN_HIP_CLANG)
  # ROCm's own clang where ROCm is installed, else Debian's clang-19.
  find_program(_tnn_hip_clang NAMES clang++ PATHS "${TNN_HIP_ROCM_PATH}/llvm/bin" NO_DEFAULT_PATH)
  if(NOT _tnn_hip_clang)
    find_program(_tnn_hip_clang NAMES clang++-19 PATHS /usr/lib/llvm-19/bin)
  endif()
  if(NOT _tnn_hip_clang)
    message(FATAL_ERROR "TNN_HIP: no ROCm clang in ${TNN_HIP_ROCM_PATH}/llvm/bin and no clang++-19 (scripts/install_deps.sh hip)")
  endif()
  set(TNN_HIP_CLANG "${_tnn_hip_clang}" CACHE FILEPATH "" FORCE)
endif()
get_filename_component(_tnn_hip_clang_real "${TNN_HIP_CLANG}" REALPATH)
get_filename_component(_tnn_hip_llvm_bin "${_tnn_hip_clang_real}" DIRECTORY)
find_program(TNN_HIP_LLVM_DIS NAMES llvm-dis llvm-dis-19 PATHS "${_tnn_hip_llvm_bin}" NO_DEFAULT_PATH)
find_program(TNN_HIP_LLVM_AS NAMES llvm-as llvm-as-19 PATHS "${_tnn_hip_llvm_bin}" NO_DEFAULT_PATH)
find_library(TNN_HIP_RUNTIME NAMES amdhip64 PATHS "${TNN_HIP_ROCM_PATH}/lib" REQUIRED)
find_path(TNN_HIP_BITCODE_DIR NAMES ocml.bc
          PATHS "${TNN_HIP_ROCM_PATH}/amdgcn/bitcode" "${TNN_HIP_ROCM_PATH}/lib/x86_64-linux-gnu/amdgcn/bitcode"
                "${TNN_HIP_ROCM_PATH}/lib/amdgcn/bitcode" NO_DEFAULT_PATH)
if(NOT TNN_HIP_BITCODE_DIR OR NOT TNN_HIP_LLVM_DIS OR NOT TNN_HIP_LLVM_AS)
  message(FATAL_ERROR "TNN_HIP: need the ROCm device libraries (ocml.bc; Debian: rocm-device-libs) and llvm-dis/llvm-as "
                      "next to ${TNN_HIP_CLANG} (Debian: llvm-19); run scripts/install_deps.sh hip")
endif()
execute_process(COMMAND "${TNN_HIP_CLANG}" --version OUTPUT_VARIABLE _tnn_hip_clang_version OUTPUT_STRIP_TRAILING_WHITESPACE)
string(REGEX MATCH "[^\n]*" _tnn_hip_clang_version "${_tnn_hip_clang_version}")
message(STATUS "TNN_HIP: ${TNN_HIP_CLANG} (${_tnn_hip_clang_version}), targets ${TNN_HIP_ARCHITECTURES}, ROCm ${TNN_HIP_ROCM_PATH}")

# ---- Device libraries: the system's, plus the ISA-version library of each target they lack.
set(TNN_HIP_DEVICE_LIB_DIR "${CMAKE_BINARY_DIR}/hip-device-libs")
set(_tnn_hip_dl_stamp "${TNN_HIP_DEVICE_LIB_DIR}/.stamp")
add_custom_command(
  OUTPUT "${_tnn_hip_dl_stamp}"
  COMMAND "${CMAKE_SOURCE_DIR}/scripts/hip_device_libs.sh" "${TNN_HIP_BITCODE_DIR}" "${TNN_HIP_DEVICE_LIB_DIR}"
          "${TNN_HIP_LLVM_DIS}" "${TNN_HIP_LLVM_AS}" ${TNN_HIP_ARCHITECTURES}
  COMMAND "${CMAKE_COMMAND}" -E touch "${_tnn_hip_dl_stamp}"
  DEPENDS "${CMAKE_SOURCE_DIR}/scripts/hip_device_libs.sh"
  COMMENT "HIP device libraries for ${TNN_HIP_ARCHITECTURES}"
  VERBATIM)

# ---- One object per GPU source, compiled by clang as HIP for every target.
# -include hip/hip_runtime.h: what nvcc does with cuda_runtime.h, so that a .cu file may use the
# runtime's device functions before it includes gpu/gpu.h, in both builds alike.
# -Wno-cuda-compat: clang's notes on what nvcc would reject (e.g. "#pragma unroll (N)") are for
# nvcc to report; the CUDA build compiles the same files.
set(_tnn_hip_flags -x hip -std=c++17 -fPIC --rocm-path=${TNN_HIP_ROCM_PATH}
    --rocm-device-lib-path=${TNN_HIP_DEVICE_LIB_DIR} -include hip/hip_runtime.h
    -Wall -Wextra -Wno-unused-parameter -Wno-cuda-compat)
foreach(arch IN LISTS TNN_HIP_ARCHITECTURES)
  list(APPEND _tnn_hip_flags --offload-arch=${arch})
endforeach()
if(TNN_HIP_WERROR)
  list(APPEND _tnn_hip_flags -Werror)
endif()
if(CMAKE_BUILD_TYPE STREQUAL "Debug")
  list(APPEND _tnn_hip_flags -O0 -g)
elseif(CMAKE_BUILD_TYPE STREQUAL "RelWithDebInfo")
  list(APPEND _tnn_hip_flags -O2 -g -DNDEBUG)
else()
  list(APPEND _tnn_hip_flags -O3 -DNDEBUG)
endif()
list(APPEND _tnn_hip_flags -DTNN_WITH_GPU=1 -DTNN_WITH_HIP=1 "-DTNN_VERSION=\"${PROJECT_VERSION}\""
     -I${CMAKE_SOURCE_DIR}/include -I${CMAKE_SOURCE_DIR}/src)
get_target_property(_tnn_json_includes nlohmann_json::nlohmann_json INTERFACE_INCLUDE_DIRECTORIES)
foreach(dir IN LISTS _tnn_json_includes)
  if(NOT dir STREQUAL "/usr/include")  # already searched; naming it breaks libstdc++'s #include_next
    list(APPEND _tnn_hip_flags -isystem ${dir})
  endif()
endforeach()

# ---- hipBLASLt: BlasLtMLP's GPU backend (src/gpu/blaslt.h), from ROCm's CMake package (ROCm 6.3+).
# Debian ships none; without it BlasLtMLP runs on the CPU only and its GPU calls say so (docs/amd.md).
# AUTO uses it where found, ON requires it, OFF leaves it out.
set(TNN_HIPBLASLT AUTO CACHE STRING "BlasLtMLP on the GPU through ROCm's hipBLASLt: AUTO, ON or OFF")
set_property(CACHE TNN_HIPBLASLT PROPERTY STRINGS AUTO ON OFF)
set(TNN_HIP_HAS_HIPBLASLT OFF)
if(NOT TNN_HIPBLASLT STREQUAL "OFF")
  find_package(hipblaslt CONFIG QUIET HINTS "${TNN_HIP_ROCM_PATH}" "${TNN_HIP_ROCM_PATH}/lib/cmake/hipblaslt")
  if(hipblaslt_FOUND AND TARGET roc::hipblaslt)
    set(TNN_HIP_HAS_HIPBLASLT ON)
    # Its imported target may name HIP's own targets (hip::host) without defining them.
    get_target_property(_tnn_hipblaslt_links roc::hipblaslt INTERFACE_LINK_LIBRARIES)
    foreach(lib IN LISTS _tnn_hipblaslt_links)
      if(lib MATCHES "^hip::" AND NOT TARGET "${lib}")
        find_package(hip CONFIG REQUIRED HINTS "${TNN_HIP_ROCM_PATH}")
        break()
      endif()
    endforeach()
    list(APPEND _tnn_hip_flags -DTNN_WITH_HIPBLASLT=1)
    get_target_property(_tnn_hipblaslt_includes roc::hipblaslt INTERFACE_INCLUDE_DIRECTORIES)
    foreach(dir IN LISTS _tnn_hipblaslt_includes)
      if(dir AND NOT dir STREQUAL "/usr/include")
        list(APPEND _tnn_hip_flags -isystem ${dir})
      endif()
    endforeach()
    message(STATUS "TNN_HIP: hipBLASLt ${hipblaslt_VERSION} (${hipblaslt_DIR}): BlasLtMLP runs on the GPU")
  elseif(TNN_HIPBLASLT STREQUAL "ON")
    message(FATAL_ERROR "TNN_HIPBLASLT=ON: ROCm's hipblaslt CMake package was not found under ${TNN_HIP_ROCM_PATH} "
                        "(install ROCm's hipblaslt-dev, or set TNN_HIPBLASLT=AUTO for a build whose BlasLtMLP runs on the CPU only)")
  else()
    message(STATUS "TNN_HIP: no hipBLASLt (ROCm's hipblaslt package): BlasLtMLP runs on the CPU only in this build")
  endif()
endif()

set(TNN_HIP_OBJECTS "")
foreach(src IN LISTS TNN_GPU_SOURCES)
  file(RELATIVE_PATH rel "${CMAKE_SOURCE_DIR}" "${src}")
  set(obj "${CMAKE_BINARY_DIR}/hip-objects/${rel}.o")
  set(extra "")
  if(rel IN_LIST TNN_EXACT_FP_SOURCES)  # CMakeLists.txt: no FMA contraction in these
    set(extra -ffp-contract=off)
  endif()
  get_filename_component(obj_dir "${obj}" DIRECTORY)
  file(MAKE_DIRECTORY "${obj_dir}")
  add_custom_command(
    OUTPUT "${obj}"
    COMMAND "${TNN_HIP_CLANG}" ${_tnn_hip_flags} ${extra} -MD -MF "${obj}.d" -c "${src}" -o "${obj}"
    DEPENDS "${src}" "${_tnn_hip_dl_stamp}"
    DEPFILE "${obj}.d"
    COMMENT "HIP ${rel}"
    VERBATIM)
  list(APPEND TNN_HIP_OBJECTS "${obj}")
endforeach()
set_source_files_properties(${TNN_HIP_OBJECTS} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
# Builds only the HIP objects (CI's compile check and the ISA audit need nothing else).
add_custom_target(tnn_hip_objects DEPENDS ${TNN_HIP_OBJECTS})

target_sources(tnn PRIVATE ${TNN_HIP_OBJECTS})
target_compile_definitions(tnn PUBLIC TNN_WITH_GPU=1 TNN_WITH_HIP=1)
# The C++ compiler sees the HIP runtime API only (host code); hip_runtime.h needs the platform named.
target_compile_definitions(tnn PUBLIC __HIP_PLATFORM_AMD__=1)
if(NOT TNN_HIP_ROCM_PATH STREQUAL "/usr")  # -isystem /usr/include would break GCC's #include_next
  target_include_directories(tnn SYSTEM PUBLIC "${TNN_HIP_ROCM_PATH}/include")
endif()
target_link_libraries(tnn PUBLIC "${TNN_HIP_RUNTIME}")
if(TNN_HIP_HAS_HIPBLASLT)
  target_link_libraries(tnn PUBLIC roc::hipblaslt)
endif()
# The RDNA4 port's RocWMMAWidth64MLP (src/networks/network.cpp) needs gfx12 code in the build.
if(TNN_HIP_ARCHITECTURES MATCHES "gfx12")
  target_compile_definitions(tnn PRIVATE TNN_HIP_GFX12=1)
endif()
