# Note [CUDA module build id]
#
# The engine and its CUDA module hand each other C++ objects (engine/runtime/cuda_module.h: a Backend&
# and a CachingAllocator& whose virtual functions are called across, Availability, strings, vectors),
# and the module links the engine's library and calls into it. That holds only when both were compiled
# from the same declarations by the same compiler: a module from another build calls the wrong slot of
# a vtable. A hand-written id ("0.1.0/abi9") let exactly that through once Backend gained where,
# indexSelect and indexAdd. So the id is derived:
#
#   <project version>/abi<kModuleAbiVersion>/<first 16 hex digits of a SHA-256>
#
# over the text of every engine header the two sides compile with, and the toolchain (the C++ compiler's
# id and version, the CUDA compiler's, the C++ standard). The headers are found by following
# `#include "engine/..."` from both sides' sources -- the engine's loader (cuda_runtime_loader.cpp) and
# every source of the module -- rather than from a list: a type that crosses the boundary is defined in
# a header one side includes, so it is in the set, and a header that gains an include brings the new one
# in with nobody keeping a list. That is more than the types the table names (the kernels' functors,
# dispatch.h, ...), on purpose: a header hashed needlessly costs recompiling the two files that include
# the id, a header missed lets another build's module in. Includes are followed whatever #if they stand
# under (a superset again). The module's own headers (*.cuh, and any under a cuda/ folder: its kernels'
# launch helpers, its device contexts) are followed but not hashed: the engine never compiles them, so
# nothing they define reaches the engine's side, and hashing them would rebuild the loader and relink the
# engine at every kernel edit.
#
# The build regenerates the id whenever one of those files changes -- a custom command whose depfile
# names every file it read, so an edited header never leaves a stale id, and a new include is tracked
# from the next build on -- and rewrites the generated header only when the id changes. The loader and
# the module include that one header; the loader refuses a module whose id differs and names both.
#
# Limits: text is hashed, not meaning (a comment changes the id; that costs refusing a module from a
# build that differed by a comment). A definition on the command line that changed a layout (NDEBUG,
# say) would not be seen, so the build type is not part of the id either; the engine's headers have no
# such #if (theirs are __CUDACC__ and __CUDA_ARCH__, which differ between the module's .cu files and
# everything else by design).
#
# This file is used three ways:
#   include() it, then gpulab_add_cuda_module_build_id(...)     the build's rule (engine/CMakeLists.txt)
#   cmake -DINPUTS=... -DOUTPUT=... -DDEPFILE=... -P <this>    that rule's command
#   include() it from a -P script, for its functions           tests/cuda_module_build_id_test.cmake

# A -P script starts with every policy unset; the functions keep the policies they are defined under.
cmake_policy(VERSION 3.24)

# The files reached from `roots` (paths relative to `sourceDir`, the tree that holds engine/) through
# `#include "engine/..."`: `outHashed` gets the headers whose text is in the id, sorted; `outFollowed`
# every file read, roots included (what the depfile names).
function(gpulab_cuda_module_headers sourceDir outHashed outFollowed)
  set(todo ${ARGN})
  set(followed "")
  while(todo)
    list(POP_FRONT todo file)
    if(file IN_LIST followed)
      continue()
    endif()
    if(NOT EXISTS "${sourceDir}/${file}")
      message(FATAL_ERROR "cuda_module_build_id: ${file} (a root, or named by an #include) is not under ${sourceDir}")
    endif()
    list(APPEND followed ${file})
    file(STRINGS "${sourceDir}/${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"engine/[^\"]+\"")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"(engine/[^\"]+)\".*" "\\1" included "${line}")
      list(APPEND todo ${included})
    endforeach()
  endwhile()
  set(hashed ${followed})
  list(REMOVE_ITEM hashed ${ARGN})                      # the roots are sources, not interface
  list(FILTER hashed EXCLUDE REGEX "(\\.cuh$|/cuda/)")  # the module's own (see the note)
  list(SORT hashed)
  set(${outHashed} ${hashed} PARENT_SCOPE)
  set(${outFollowed} ${followed} PARENT_SCOPE)
endfunction()

# The build id of the tree `sourceDir` built with `toolchain` (a text naming the compilers and the
# standard), from `roots` (see gpulab_cuda_module_headers): sets `outId`, and `outHashed` and
# `outFollowed` as that function does.
function(gpulab_cuda_module_build_id sourceDir version toolchain outId outHashed outFollowed)
  gpulab_cuda_module_headers("${sourceDir}" hashed followed ${ARGN})
  if(NOT "engine/runtime/cuda_module.h" IN_LIST hashed)
    message(FATAL_ERROR "cuda_module_build_id: engine/runtime/cuda_module.h is not reached from the roots (${ARGN}); "
                        "they must be the loader's and the module's sources")
  endif()
  file(STRINGS "${sourceDir}/engine/runtime/cuda_module.h" abiLine REGEX "constexpr int kModuleAbiVersion = [0-9]+")
  if(NOT abiLine MATCHES "kModuleAbiVersion = ([0-9]+)")
    message(FATAL_ERROR "cuda_module_build_id: no `kModuleAbiVersion = <n>;` in ${sourceDir}/engine/runtime/cuda_module.h")
  endif()
  set(abi ${CMAKE_MATCH_1})
  # Each header by its path and its text's digest, so a header moved or renamed changes the id as well.
  set(text "${toolchain}\n")
  foreach(header IN LISTS hashed)
    file(SHA256 "${sourceDir}/${header}" digest)
    string(APPEND text "${header} ${digest}\n")
  endforeach()
  string(SHA256 digest "${text}")
  string(SUBSTRING "${digest}" 0 16 digest)
  set(${outId} "${version}/abi${abi}/${digest}" PARENT_SCOPE)
  set(${outHashed} ${hashed} PARENT_SCOPE)
  set(${outFollowed} ${followed} PARENT_SCOPE)
endfunction()

# Writes the id header OUTPUT (only when its text changes: what includes it is not recompiled for
# nothing) and, with DEPFILE, a depfile that makes OUTPUT depend on every file in FOLLOWED (relative to
# SOURCE_DIR).
function(gpulab_write_cuda_module_build_id)
  cmake_parse_arguments(W "" "OUTPUT;DEPFILE;ID;TOOLCHAIN;SOURCE_DIR" "HASHED;FOLLOWED" ${ARGN})
  list(LENGTH W_HASHED count)
  set(text "#pragma once\n")
  string(APPEND text "// Generated by cmake/cuda_module_build_id.cmake (Note [CUDA module build id] there); do not edit.\n")
  string(APPEND text "// The engine's loader and its CUDA module include this one file: the loader refuses a module\n")
  string(APPEND text "// whose id is not this. Derived from ${W_TOOLCHAIN} and these ${count} headers:\n")
  foreach(header IN LISTS W_HASHED)
    string(APPEND text "//   ${header}\n")
  endforeach()
  string(APPEND text "namespace gpulab::cuda {\n")
  string(APPEND text "inline constexpr const char* kModuleBuildId = \"${W_ID}\";\n")
  string(APPEND text "}  // namespace gpulab::cuda\n")
  set(old "")
  if(EXISTS "${W_OUTPUT}")
    file(READ "${W_OUTPUT}" old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE "${W_OUTPUT}" "${text}")
  endif()
  if(W_DEPFILE)
    set(deps "")
    foreach(file IN LISTS W_FOLLOWED)
      string(REPLACE " " "\\ " file "${W_SOURCE_DIR}/${file}")
      string(APPEND deps " \\\n  ${file}")
    endforeach()
    string(REPLACE " " "\\ " target "${W_OUTPUT}")
    file(WRITE "${W_DEPFILE}" "${target}:${deps}\n")
  endif()
endfunction()

# The build's rule: a target `name` that keeps DIRECTORY/gpulab/cuda_module_build_id.h up to date from
# ROOTS (the loader's and the module's sources, relative to the project's root). Targets that include
# the header add DIRECTORY to their include path and depend on `name`. DIRECTORY also gets
# cuda_module_build_id_inputs.cmake, what the command reads (the tests read it too).
function(gpulab_add_cuda_module_build_id name)
  cmake_parse_arguments(ID "" "DIRECTORY" "ROOTS" ${ARGN})
  # Besides the headers, what decides a type's layout and a virtual function's slot: the compilers
  # (their ABI) and the standard the headers are compiled as.
  get_target_property(features gpulab_options INTERFACE_COMPILE_FEATURES)
  set(toolchain "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} (${features})")
  if(CMAKE_CUDA_COMPILER_ID)
    string(APPEND toolchain ", ${CMAKE_CUDA_COMPILER_ID} ${CMAKE_CUDA_COMPILER_VERSION}")
  endif()
  set(inputs ${ID_DIRECTORY}/cuda_module_build_id_inputs.cmake)
  file(CONFIGURE OUTPUT ${inputs} CONTENT [[
# Written by gpulab_add_cuda_module_build_id (cmake/cuda_module_build_id.cmake) at configure time.
set(GPULAB_ID_SOURCE_DIR [==[@PROJECT_SOURCE_DIR@]==])
set(GPULAB_ID_VERSION [==[@PROJECT_VERSION@]==])
set(GPULAB_ID_TOOLCHAIN [==[@toolchain@]==])
set(GPULAB_ID_ROOTS [==[@ID_ROOTS@]==])
]] @ONLY)
  set(header ${ID_DIRECTORY}/gpulab/cuda_module_build_id.h)
  set(depfile ${ID_DIRECTORY}/cuda_module_build_id.d)
  list(TRANSFORM ID_ROOTS PREPEND ${PROJECT_SOURCE_DIR}/ OUTPUT_VARIABLE rootFiles)
  add_custom_command(OUTPUT ${header}
    COMMAND ${CMAKE_COMMAND} -DINPUTS=${inputs} -DOUTPUT=${header} -DDEPFILE=${depfile} -P ${CMAKE_CURRENT_FUNCTION_LIST_FILE}
    DEPENDS ${CMAKE_CURRENT_FUNCTION_LIST_FILE} ${inputs} ${rootFiles}
    DEPFILE ${depfile}
    COMMENT "Deriving the CUDA module's build id from the engine's headers"
    VERBATIM)
  add_custom_target(${name} DEPENDS ${header})
endfunction()

# The rule's command.
if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  foreach(var INPUTS OUTPUT DEPFILE)
    if(NOT DEFINED ${var})
      message(FATAL_ERROR "cuda_module_build_id.cmake -P needs -D${var}=...")
    endif()
  endforeach()
  include(${INPUTS})
  gpulab_cuda_module_build_id("${GPULAB_ID_SOURCE_DIR}" "${GPULAB_ID_VERSION}" "${GPULAB_ID_TOOLCHAIN}" id hashed followed ${GPULAB_ID_ROOTS})
  gpulab_write_cuda_module_build_id(OUTPUT ${OUTPUT} DEPFILE ${DEPFILE} ID ${id} TOOLCHAIN "${GPULAB_ID_TOOLCHAIN}"
                                    SOURCE_DIR ${GPULAB_ID_SOURCE_DIR} HASHED ${hashed} FOLLOWED ${followed})
endif()
