# The CUDA architectures of the build (docs/gpu.md, "GPU architectures"). Included by CMakeLists.txt
# before enable_language(CUDA); tnn_resolve_cuda_architectures() runs after it (the GPUs of this
# machine are known then) and sets, in the caller's scope:
#   CMAKE_CUDA_ARCHITECTURES  the list every CUDA target compiles for, in CMake's spelling
#   TNN_CUDA_WGMMA            ON when FullyFusedMLP's wgmma kernels are compiled (see below)
# The list, first match wins:
#   1. CMAKE_CUDA_ARCHITECTURES or the CUDAARCHS environment variable, when given: CMake's own (native,
#      all and all-major expanded as CMake expands them);
#   2. TNN_CUDA_ARCHITECTURES when it is a list ("80;90a", "89-real", ...);
#   3. otherwise (TNN_CUDA_ARCHITECTURES empty, the default, or "native"): the GPUs of this machine as
#      CMake's native detection finds them, each as machine code (sm_90 as 90a: the wgmma kernels),
#      plus PTX of the newest one so that later GPUs still run (the driver compiles it at first load);
#   4. no GPU found (and TNN_CUDA_ARCHITECTURES not "native", which then fails): TNN_CUDA_PORTABLE_ARCHITECTURES.
# Every entry must be sm_80 or newer (kCudaMinArchitecture, src/gpu/arch_list.h): the kernels use
# mma.sync with bf16 and cp.async.

# Machine code for Ampere (A100, 80; RTX 30xx / A10 / A40, 86; Jetson Orin, 87, runs the 80 / 86 code),
# Ada (89), Hopper (90a, with the wgmma kernels), datacenter Blackwell (100; B300, 103, runs it) and
# Blackwell GeForce / workstation (120; DGX Spark, 121, runs it); PTX of 80 for the rest of sm_80..sm_12x
# (Jetson Thor, 110) and PTX of 120 for GPUs after it.
set(TNN_CUDA_PORTABLE_ARCHITECTURES "80;86-real;89-real;90a-real;100-real;120")

if(DEFINED CMAKE_CUDA_ARCHITECTURES OR NOT "$ENV{CUDAARCHS}" STREQUAL "")
  set(_tnn_cuda_archs_from_cmake ON)
else()
  set(_tnn_cuda_archs_from_cmake OFF)
  # enable_language(CUDA) checks the compiler with this and, as a normal variable, does not cache a
  # default of its own (which would read as "given" at the next configure).
  set(CMAKE_CUDA_ARCHITECTURES 80-real)
endif()

function(tnn_resolve_cuda_architectures)
  set(_native "${CMAKE_CUDA_ARCHITECTURES_NATIVE}")  # "90-real;86-real", empty without a GPU
  list(TRANSFORM _native REPLACE "-real$" "")
  if(_tnn_cuda_archs_from_cmake)
    set(_source "CMAKE_CUDA_ARCHITECTURES")
    set(_archs "${CMAKE_CUDA_ARCHITECTURES}")
    if(_archs STREQUAL "native")
      list(TRANSFORM _native APPEND "-real" OUTPUT_VARIABLE _archs)
    elseif(_archs STREQUAL "all")
      set(_archs "${CMAKE_CUDA_ARCHITECTURES_ALL}")
    elseif(_archs STREQUAL "all-major")
      set(_archs "${CMAKE_CUDA_ARCHITECTURES_ALL_MAJOR}")
    endif()
  elseif(TNN_CUDA_ARCHITECTURES STREQUAL "" OR TNN_CUDA_ARCHITECTURES STREQUAL "native")
    set(_archs "")
    set(_newest 0)
    foreach(_arch IN LISTS _native)
      if(_arch LESS 80)
        message(WARNING "tiny-rdna4-nn: the GPU of compute capability ${_arch} here is older than the sm_80 its "
                        "CUDA kernels need: not built for")
        continue()
      endif()
      if(_arch EQUAL 90)
        list(APPEND _archs "90a-real")
      else()
        list(APPEND _archs "${_arch}-real")
      endif()
      if(_arch GREATER _newest)
        set(_newest ${_arch})
      endif()
    endforeach()
    if(_archs)
      list(REMOVE_DUPLICATES _archs)
      list(APPEND _archs "${_newest}-virtual")
      set(_source "the GPUs of this machine")
    elseif(TNN_CUDA_ARCHITECTURES STREQUAL "native")
      message(FATAL_ERROR "TNN_CUDA_ARCHITECTURES=native: no GPU of sm_80 or newer found here (CMake's detection: "
                          "'${CMAKE_CUDA_ARCHITECTURES_NATIVE}'); name the architectures, e.g. "
                          "-DTNN_CUDA_ARCHITECTURES=\"${TNN_CUDA_PORTABLE_ARCHITECTURES}\"")
    else()
      set(_archs "${TNN_CUDA_PORTABLE_ARCHITECTURES}")
      set(_source "no GPU here: the portable default")
    endif()
  else()
    set(_source "TNN_CUDA_ARCHITECTURES")
    set(_archs "${TNN_CUDA_ARCHITECTURES}")
  endif()

  set(_wgmma_code OFF)  # sm_90a machine code
  set(_sm90_code OFF)   # plain sm_90 machine code
  foreach(_arch IN LISTS _archs)
    if(NOT _arch MATCHES "^([0-9]+)([af]?)(-real|-virtual)?$")
      message(FATAL_ERROR "${_source}: '${_arch}' is not a CUDA architecture in CMake's spelling (e.g. 80, 90a, "
                          "86-real, 120-virtual); the list was '${_archs}'")
    endif()
    if(CMAKE_MATCH_1 LESS 80)
      message(FATAL_ERROR "${_source}: '${_arch}': tiny-rdna4-nn's CUDA kernels need sm_80 or newer (mma.sync with "
                          "bf16, cp.async); the list was '${_archs}'")
    endif()
    if(_arch MATCHES "^90a(-real)?$")
      set(_wgmma_code ON)
    elseif(_arch MATCHES "^90(-real)?$")
      set(_sm90_code ON)
    endif()
  endforeach()
  # FullyFusedMLP's wgmma backward kernels are compiled where sm_90a machine code is the only machine
  # code for sm_90 devices ("90a" or "90a-real"; PTX such as "90-virtual" may be there too, the driver
  # prefers machine code): a device then runs them exactly when its compute capability is 9.0, which
  # the library checks at run time (wgmma_backward_available); every other device, and every build
  # without sm_90a, runs the mma.sync kernels.
  if(_wgmma_code AND NOT _sm90_code)
    set(TNN_CUDA_WGMMA ON PARENT_SCOPE)
  else()
    set(TNN_CUDA_WGMMA OFF PARENT_SCOPE)
  endif()
  message(STATUS "tiny-rdna4-nn: CUDA architectures ${_archs} (${_source})")
  set(CMAKE_CUDA_ARCHITECTURES "${_archs}" PARENT_SCOPE)
endfunction()
