# The CUDA module's build id (Note [CUDA module build id], cmake/cuda_module_build_id.cmake), computed
# by that script's own functions on copies of the engine's sources:
#
#   -DMODE=check    (ctest's cuda_module_build_id) the copies give the build's id; a change to any hashed
#                   header, to a header newly included, or to the toolchain gives another; a change to
#                   the module's own headers does not.
#   -DMODE=foreign  (a build step of tests/CMakeLists.txt) the copies with one line added to
#                   engine/kernels/backend.h, and OUTPUT, their id header: what another build of GPU Lab,
#                   one whose Backend differs, compiles its module with (tests/foreign_cuda_module.cpp).
#
# Both read INPUTS (<build>/generated/cuda_module_build_id_inputs.cmake: the roots, the toolchain, the
# version the build's id is derived from) and copy into SCRATCH.
cmake_minimum_required(VERSION 3.24)
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/cuda_module_build_id.cmake)
foreach(var MODE INPUTS SCRATCH)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "cuda_module_build_id_test.cmake needs -D${var}=...")
  endif()
endforeach()
include(${INPUTS})

# Writes `text` to `path` unless it holds that already (a file rewritten for nothing recompiles what
# includes it).
function(write_if_different path text)
  set(old "")
  if(EXISTS "${path}")
    file(READ "${path}" old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE "${path}" "${text}")
  endif()
endfunction()

# Copies every file the id is derived from (the roots and the headers they reach) under `tree`.
function(copy_sources tree)
  file(REMOVE_RECURSE ${tree})
  gpulab_cuda_module_headers("${GPULAB_ID_SOURCE_DIR}" hashed followed ${GPULAB_ID_ROOTS})
  foreach(file IN LISTS followed)
    get_filename_component(folder "${tree}/${file}" DIRECTORY)
    file(MAKE_DIRECTORY "${folder}")
    file(COPY_FILE "${GPULAB_ID_SOURCE_DIR}/${file}" "${tree}/${file}")
  endforeach()
endfunction()

function(id_of tree outId)
  gpulab_cuda_module_build_id("${tree}" "${GPULAB_ID_VERSION}" "${GPULAB_ID_TOOLCHAIN}" id hashed followed ${GPULAB_ID_ROOTS})
  set(${outId} ${id} PARENT_SCOPE)
endfunction()

function(append_line file line)
  file(READ "${file}" text)
  file(WRITE "${file}" "${text}${line}\n")
endfunction()

if(MODE STREQUAL "foreign")
  if(NOT DEFINED OUTPUT OR NOT DEFINED DEPFILE)
    message(FATAL_ERROR "MODE=foreign needs -DOUTPUT=<id header> -DDEPFILE=<depfile>")
  endif()
  # Copied in place with the change, each file written only when it differs: the module compiled from
  # them is rebuilt when the engine's headers change, not at every build.
  gpulab_cuda_module_headers("${GPULAB_ID_SOURCE_DIR}" hashed followed ${GPULAB_ID_ROOTS})
  foreach(file IN LISTS followed)
    file(READ "${GPULAB_ID_SOURCE_DIR}/${file}" text)
    if(file STREQUAL "engine/kernels/backend.h")
      string(APPEND text "// Another build of GPU Lab: its Backend is not this one.\n")
    endif()
    write_if_different("${SCRATCH}/${file}" "${text}")
  endforeach()
  gpulab_cuda_module_build_id("${SCRATCH}" "${GPULAB_ID_VERSION}" "${GPULAB_ID_TOOLCHAIN}" id hashed followedCopies ${GPULAB_ID_ROOTS})
  gpulab_write_cuda_module_build_id(OUTPUT ${OUTPUT} DEPFILE ${DEPFILE} ID ${id} TOOLCHAIN "${GPULAB_ID_TOOLCHAIN}"
                                    SOURCE_DIR ${GPULAB_ID_SOURCE_DIR} HASHED ${hashed} FOLLOWED ${followed})
  return()
endif()

if(NOT MODE STREQUAL "check")
  message(FATAL_ERROR "MODE is check or foreign, not '${MODE}'")
endif()
if(NOT DEFINED BUILD_ID_HEADER)
  message(FATAL_ERROR "MODE=check needs -DBUILD_ID_HEADER=<the build's gpulab/cuda_module_build_id.h>")
endif()
set(failures "")
# expect(<what it checks> <an if() condition>...)
macro(expect what)
  if(${ARGN})
    message(STATUS "ok: ${what}")
  else()
    list(APPEND failures "${what}")
    message(STATUS "FAILED: ${what}")
  endif()
endmacro()

# The build's id is this computation's, and a copy of the sources gives it too: the id is the files'
# text, not where they are.
file(STRINGS "${BUILD_ID_HEADER}" line REGEX "kModuleBuildId = ")
string(REGEX REPLACE ".*kModuleBuildId = \"([^\"]+)\".*" "\\1" built "${line}")
id_of("${GPULAB_ID_SOURCE_DIR}" here)
expect("the source tree's id (${here}) is the build's (${built}; rebuild if a header changed since)" here STREQUAL built)
string(REPLACE "." "\\." version "${GPULAB_ID_VERSION}")
string(REPEAT "[0-9a-f]" 16 hex)
expect("the id is <version>/abi<n>/<16 hex digits>" here MATCHES "^${version}/abi[0-9]+/${hex}$")
set(tree ${SCRATCH}/tree)
copy_sources(${tree})
id_of(${tree} copy)
expect("a copy of the sources has the same id" copy STREQUAL here)

# Any hashed header, changed by one line, changes the id -- each one in turn, the types the table hands
# over among them.
gpulab_cuda_module_headers("${tree}" hashed followed ${GPULAB_ID_ROOTS})
foreach(needed engine/runtime/cuda_module.h engine/kernels/backend.h engine/memory/caching_allocator.h
               engine/memory/raw_allocator.h engine/runtime/cuda_runtime.h engine/core/tensor.h)
  expect("${needed} is hashed" needed IN_LIST hashed)
endforeach()
set(unchanged "")
foreach(header IN LISTS hashed)
  file(READ "${tree}/${header}" original)
  append_line("${tree}/${header}" "// changed")
  id_of(${tree} changed)
  file(WRITE "${tree}/${header}" "${original}")
  if(changed STREQUAL here)
    list(APPEND unchanged ${header})
  endif()
endforeach()
list(LENGTH hashed count)
expect("a one-line change to each of the ${count} hashed headers changes the id (not: ${unchanged})" NOT unchanged)
id_of(${tree} restored)
expect("the headers restored, the id is the first again" restored STREQUAL here)

# The module's own headers are not hashed: they change at every kernel edit and never reach the engine.
append_line("${tree}/engine/kernels/cuda/launch.cuh" "// changed")
id_of(${tree} kernelEdit)
expect("a change to the module's own launch.cuh leaves the id" kernelEdit STREQUAL here)

# A header that gains an include brings the new header into the id, with no list to update.
append_line("${tree}/engine/core/tensor.h" "#include \"engine/core/added_for_the_test.h\"")
file(WRITE "${tree}/engine/core/added_for_the_test.h" "#pragma once\nstruct AddedForTheTest { int a; };\n")
id_of(${tree} withNew)
file(WRITE "${tree}/engine/core/added_for_the_test.h" "#pragma once\nstruct AddedForTheTest { int a, b; };\n")
id_of(${tree} newChanged)
expect("a change to a header newly included changes the id" NOT newChanged STREQUAL withNew)
gpulab_cuda_module_headers("${tree}" hashed followed ${GPULAB_ID_ROOTS})
set(added engine/core/added_for_the_test.h)
expect("the depfile's list has the newly included header" added IN_LIST followed)

# Another compiler gives another id.
gpulab_cuda_module_build_id("${GPULAB_ID_SOURCE_DIR}" "${GPULAB_ID_VERSION}" "${GPULAB_ID_TOOLCHAIN}, another compiler"
                            otherCompiler hashed followed ${GPULAB_ID_ROOTS})
expect("another toolchain changes the id" NOT otherCompiler STREQUAL here)

# What the build writes: the id, and a depfile naming every file read.
gpulab_cuda_module_headers("${GPULAB_ID_SOURCE_DIR}" hashed followed ${GPULAB_ID_ROOTS})
gpulab_write_cuda_module_build_id(OUTPUT ${SCRATCH}/out/id.h DEPFILE ${SCRATCH}/out/id.d ID ${here}
                                  TOOLCHAIN "${GPULAB_ID_TOOLCHAIN}" SOURCE_DIR ${GPULAB_ID_SOURCE_DIR}
                                  HASHED ${hashed} FOLLOWED ${followed})
file(READ ${SCRATCH}/out/id.h written)
string(FIND "${written}" "kModuleBuildId = \"${here}\";" at)
expect("the header written holds the id" NOT at EQUAL -1)
file(READ ${SCRATCH}/out/id.d depfile)
set(missing "")
foreach(file IN LISTS followed)
  string(FIND "${depfile}" "${GPULAB_ID_SOURCE_DIR}/${file}" at)
  if(at EQUAL -1)
    list(APPEND missing ${file})
  endif()
endforeach()
expect("the depfile names every file read (not: ${missing})" NOT missing)

file(REMOVE_RECURSE ${tree})
if(failures)
  list(JOIN failures "\n  " text)
  message(FATAL_ERROR "cuda_module_build_id: failed:\n  ${text}")
endif()
message(STATUS "cuda_module_build_id: all checks passed")
