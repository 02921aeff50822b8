# Installing GPU Lab like any desktop application, and packing it as a Debian package (issue 8).
#
#   cmake --install build --prefix /usr/local     bin/gpulab, bin/gpulab-cli, the desktop entry,
#                                                 the icons, the AppStream metainfo, the man pages
#   cd build && cpack                              gpulab_<version>_<arch>.deb (the CPack DEB generator)
#
# Included at the end of the top-level CMakeLists.txt, after every target exists.
#
# Layout (GNUInstallDirs; <id> is the application id io.github.gpulab.GpuLab, used as the desktop
# entry's, the icon's and the metainfo's name so that desktops and software centres tie them up):
#   bin/gpulab, bin/gpulab-cli
#   share/applications/<id>.desktop          share/metainfo/<id>.metainfo.xml
#   share/icons/hicolor/{16x16..256x256}/apps/<id>.png, share/icons/hicolor/scalable/apps/<id>.svg
#   share/man/man1/{gpulab,gpulab-cli}.1.gz  share/doc/gpulab/{copyright,changelog.Debian.gz}
#   lib/<triplet>/gpulab/libgpulab-engine.so  when the engine is a shared library
#   lib/<triplet>/gpulab/libgpulab-cuda.so    when the CUDA backend module (target gpulab_cuda) exists
#   lib/python3/dist-packages/gpulab/         GPU Lab's torch (target gpulab_python), package python3-gpulab
#
# RPATH: the project's shared libraries (the engine, when it is one) and the CUDA module live in a
# private folder, lib/<triplet>/gpulab, not on the system's library path. The programs reach it
# through a relative RUNPATH ($ORIGIN/../lib/<triplet>/gpulab), so any prefix works; the module sits beside the engine
# library, where the engine's loader looks for it, with RUNPATH $ORIGIN. The build tree's RUNPATH
# (for example OpenBLAS's openblas-pthread folder, which pkg-config names) is dropped on install, so
# an installed program finds libopenblas.so.0 through Debian's BLAS alternatives like any other.
#
# The CUDA backend: CUDA's libraries must never be hard dependencies of the package (most learners
# have no GPU, and in Debian the CUDA libraries are in non-free). When the engine builds its CUDA
# backend as the dlopen'ed module target `gpulab_cuda` (libgpulab-cuda.so), that module goes into a
# second package, gpulab-cuda, which depends only on gpulab and is not scanned by dpkg-shlibdeps;
# gpulab suggests it. A build that links CUDA into the programs themselves is refused by cpack.

include(GNUInstallDirs)

set(GPULAB_APP_ID "io.github.gpulab.GpuLab")
set(GPULAB_HOMEPAGE "https://github.com/gpulab/gpulab" CACHE STRING "Project home page, for the package metadata")
set(GPULAB_PACKAGE_MAINTAINER "GPU Lab developers <gpulab@users.noreply.github.com>"
    CACHE STRING "Maintainer field of the Debian package (Name <email>)")
# The private folder of the project's shared libraries and the CUDA module, relative to the prefix:
# lib/<multiarch triplet>/gpulab where the system has one (Debian's place for a package's private,
# architecture-dependent libraries). Off the linker's search path, it needs no ldconfig -- CPack adds
# ldconfig calls to the maintainer scripts for libraries right under lib/ (lintian:
# maintscript-calls-ldconfig).
if(CMAKE_LIBRARY_ARCHITECTURE)
  set(GPULAB_INSTALL_MODULEDIR "lib/${CMAKE_LIBRARY_ARCHITECTURE}/gpulab")
else()
  set(GPULAB_INSTALL_MODULEDIR "${CMAKE_INSTALL_LIBDIR}/gpulab")
endif()

# --- the programs, their shared libraries, the CUDA module -----------------------------------------
install(TARGETS gpulab gpulab-cli
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT runtime)

file(RELATIVE_PATH _gpulab_bin_to_private "/${CMAKE_INSTALL_BINDIR}" "/${GPULAB_INSTALL_MODULEDIR}")
set(_gpulab_private_libs OFF)
foreach(lib IN ITEMS gpulab_engine gpulab_labs gpulab_course gpulab_player)
  if(TARGET ${lib})
    get_target_property(_type ${lib} TYPE)
    if(_type STREQUAL "SHARED_LIBRARY")
      # NAMELINK_SKIP: no development symlink for a versioned library (nothing outside GPU Lab
      # links against it); an unversioned one is installed as it is.
      install(TARGETS ${lib}
        LIBRARY DESTINATION "${GPULAB_INSTALL_MODULEDIR}" COMPONENT runtime NAMELINK_SKIP)
      set(_gpulab_private_libs ON)
    endif()
  endif()
endforeach()
if(TARGET gpulab_cuda)
  set_target_properties(gpulab_cuda PROPERTIES INSTALL_RPATH "$ORIGIN")
  install(TARGETS gpulab_cuda
    LIBRARY DESTINATION "${GPULAB_INSTALL_MODULEDIR}" COMPONENT cuda)
  set(_gpulab_private_libs ON)
endif()
if(_gpulab_private_libs)
  set_target_properties(gpulab gpulab-cli PROPERTIES INSTALL_RPATH "$ORIGIN/${_gpulab_bin_to_private}")
endif()

# --- GPU Lab's torch (python/), where it is built: its own package, python3-gpulab ------------------
# Debian's place for Python 3 modules: lib/python3/dist-packages (every python3 version reads it). The
# extension reaches the engine library in the private folder through a relative RUNPATH.
if(TARGET gpulab_python)
  set(GPULAB_INSTALL_PYTHONDIR "lib/python3/dist-packages" CACHE STRING "Where the gpulab Python package is installed, relative to the prefix")
  file(RELATIVE_PATH _gpulab_python_to_private "/${GPULAB_INSTALL_PYTHONDIR}/gpulab" "/${GPULAB_INSTALL_MODULEDIR}")
  set_target_properties(gpulab_python PROPERTIES INSTALL_RPATH "$ORIGIN/${_gpulab_python_to_private}")
  install(TARGETS gpulab_python LIBRARY DESTINATION "${GPULAB_INSTALL_PYTHONDIR}/gpulab" COMPONENT python)
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/python/gpulab/" DESTINATION "${GPULAB_INSTALL_PYTHONDIR}/gpulab" COMPONENT python
    FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
endif()

# --- desktop integration ---------------------------------------------------------------------------
install(FILES "${PROJECT_SOURCE_DIR}/resources/linux/${GPULAB_APP_ID}.desktop"
  DESTINATION "${CMAKE_INSTALL_DATADIR}/applications" COMPONENT runtime)
install(FILES "${PROJECT_SOURCE_DIR}/resources/linux/${GPULAB_APP_ID}.metainfo.xml"
  DESTINATION "${CMAKE_INSTALL_DATADIR}/metainfo" COMPONENT runtime)
foreach(size IN ITEMS 16 32 48 64 128 256)
  install(FILES "${PROJECT_SOURCE_DIR}/resources/icons/${size}x${size}/${GPULAB_APP_ID}.png"
    DESTINATION "${CMAKE_INSTALL_DATADIR}/icons/hicolor/${size}x${size}/apps" COMPONENT runtime)
endforeach()
install(FILES "${PROJECT_SOURCE_DIR}/resources/icons/${GPULAB_APP_ID}.svg"
  DESTINATION "${CMAKE_INSTALL_DATADIR}/icons/hicolor/scalable/apps" COMPONENT runtime)

# --- documentation ---------------------------------------------------------------------------------
# Man pages and the Debian changelog are installed gzip-compressed (-n: no name or time stamp, so
# the package is reproducible), as Debian policy asks; man-db reads them either way.
find_program(GPULAB_GZIP gzip)
set(_gpulab_pkgdir "${PROJECT_BINARY_DIR}/packaging")
# Installs `src` into `destination`, gzip-compressed when gzip is there.
function(gpulab_install_gzipped src destination)
  get_filename_component(name "${src}" NAME)
  if(NOT GPULAB_GZIP)
    install(FILES "${src}" DESTINATION "${destination}" COMPONENT runtime)
    return()
  endif()
  set(gz "${_gpulab_pkgdir}/${name}.gz")
  add_custom_command(OUTPUT "${gz}"
    COMMAND "${GPULAB_GZIP}" -9n -c "${src}" > "${gz}"
    DEPENDS "${src}"
    COMMENT "Compressing ${name}"
    VERBATIM)
  set_property(GLOBAL APPEND PROPERTY GPULAB_GZ_OUTPUTS "${gz}")
  install(FILES "${gz}" DESTINATION "${destination}" COMPONENT runtime)
endfunction()
foreach(page IN ITEMS gpulab.1 gpulab-cli.1)
  gpulab_install_gzipped("${PROJECT_SOURCE_DIR}/docs/${page}" "${CMAKE_INSTALL_MANDIR}/man1")
endforeach()

# Debian's copyright file (machine-readable format) and changelog, in share/doc/gpulab.
file(WRITE "${_gpulab_pkgdir}/copyright"
"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: GPU Lab
Source: ${GPULAB_HOMEPAGE}

Files: *
Copyright: 2026 The GPU Lab developers
License: GPL-3.0-or-later
 This program is free software: you can redistribute it and/or modify
 it under the terms of the GNU General Public License as published by
 the Free Software Foundation, either version 3 of the License, or
 (at your option) any later version.
 .
 This program is distributed in the hope that it will be useful,
 but WITHOUT ANY WARRANTY; without even the implied warranty of
 MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
 GNU General Public License for more details.
 .
 On Debian systems, the complete text of the GNU General Public License
 version 3 can be found in `/usr/share/common-licenses/GPL-3'.
")
install(FILES "${_gpulab_pkgdir}/copyright" DESTINATION "${CMAKE_INSTALL_DATADIR}/doc/gpulab" COMPONENT runtime)
# The package's changelog: one entry per upstream release (the release notes are the AppStream
# metainfo's <releases>); the date is the release's, so the file does not change between builds.
set(GPULAB_RELEASE_DATE "Mon, 23 Nov 2026 12:00:00 +0000")
file(WRITE "${_gpulab_pkgdir}/changelog.Debian"
"gpulab (${PROJECT_VERSION}-1) unstable; urgency=medium

  * First release, packaged with CPack (cmake/packaging.cmake).

 -- ${GPULAB_PACKAGE_MAINTAINER}  ${GPULAB_RELEASE_DATE}
")
gpulab_install_gzipped("${_gpulab_pkgdir}/changelog.Debian" "${CMAKE_INSTALL_DATADIR}/doc/gpulab")
get_property(_gpulab_gz_outputs GLOBAL PROPERTY GPULAB_GZ_OUTPUTS)
if(_gpulab_gz_outputs)
  add_custom_target(gpulab_docs ALL DEPENDS ${_gpulab_gz_outputs})
endif()
# The CUDA and Python packages carry the same two files, as every Debian package must.
function(gpulab_install_package_docs package component)
  install(FILES "${_gpulab_pkgdir}/copyright" DESTINATION "${CMAKE_INSTALL_DATADIR}/doc/${package}" COMPONENT ${component})
  if(GPULAB_GZIP)
    install(FILES "${_gpulab_pkgdir}/changelog.Debian.gz" DESTINATION "${CMAKE_INSTALL_DATADIR}/doc/${package}" COMPONENT ${component})
  endif()
endfunction()
if(TARGET gpulab_python)
  gpulab_install_package_docs(python3-gpulab python)
endif()
if(TARGET gpulab_cuda)
  gpulab_install_package_docs(gpulab-cuda cuda)
endif()

# --- CPack: the Debian package ---------------------------------------------------------------------
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "gpulab")
set(CPACK_PACKAGE_VENDOR "The GPU Lab developers")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "${GPULAB_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_HOMEPAGE_URL "${GPULAB_HOMEPAGE}")
# Each package's description below starts with its own synopsis line. CPack would prepend
# CPACK_PACKAGE_DESCRIPTION_SUMMARY to every one of them unless it is CPack's own default, so it
# is set to that default (it shows in no Debian field).
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${CMAKE_PROJECT_NAME} built using CMake")
set(CPACK_RESOURCE_FILE_LICENSE "${PROJECT_SOURCE_DIR}/LICENSE")
set(CPACK_PACKAGE_INSTALL_DIRECTORY "gpulab")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGE_CHECKSUM "SHA256")
set(CPACK_OUTPUT_FILE_PREFIX "${PROJECT_BINARY_DIR}/packages")

# One package per component: gpulab (programs, desktop files, docs) and, with the CUDA module, gpulab-cuda.
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME "gpulab")
set(CPACK_DEBIAN_FILE_NAME "DEB-DEFAULT")  # gpulab_0.1.0-1_amd64.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE "1")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${GPULAB_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION "education")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "${GPULAB_HOMEPAGE}")
# Depends: computed by dpkg-shlibdeps from the programs' shared libraries (Qt 6, QCustomPlot,
# OpenBLAS, zlib, libstdc++, libc); it finds the package's own libraries through their RUNPATH.
# Qt loads its platform plugin at run time, which no scan sees; Debian's libqt6gui6 (a dependency
# the scan finds) carries the xcb and offscreen plugins.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
# The Fashion-MNIST lessons read Debian's data set; everything else runs without it.
# qt6-wayland: the native Wayland platform plugin (without it Qt runs through XWayland).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_RECOMMENDS "dataset-fashion-mnist, qt6-wayland")
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION
"interactive lessons on GPU acceleration for deep learning
GPU Lab walks a learner through lessons on GPU acceleration for deep
learning: device setup and CPU fallback, the rule that all tensors of an
operation live on one device, GPU-aware training and evaluation loops,
where GPU memory goes, running out of it and recovering, sharing a GPU,
mixed precision (float16, bfloat16, the GradScaler), convolutions and
cuDNN, the profiler, vectorising, synchronisation and transfers, feeding
the GPU with DataLoader workers, streams, when a GPU is faster than the
CPU, several GPUs (DataParallel, DDP) and CUDA graphs. Every lesson runs
for real on GPU Lab's own engine, which speaks PyTorch's vocabulary, while
loss, memory and throughput are plotted live; without an NVIDIA GPU the
lessons run on the CPU and on a clearly labelled emulated GPU.
.
This package contains the desktop application (gpulab) and the command-line
runner of the same labs and lessons (gpulab-cli). It runs on the CPU
(OpenBLAS); the CUDA backend, where it is built, is the package gpulab-cuda.")

if(TARGET gpulab_cuda)
  list(APPEND CPACK_COMPONENTS_ALL cuda)
  set(CPACK_DEBIAN_CUDA_PACKAGE_NAME "gpulab-cuda")
  set(CPACK_DEBIAN_CUDA_PACKAGE_SECTION "contrib/education")
  # Not scanned: the module needs the CUDA runtime, cuBLAS and cuDNN, which come from NVIDIA's
  # repositories or Debian's non-free packages under varying names. Without them GPU Lab runs on the
  # CPU and says why, so they are documented, never depended on.
  set(CPACK_DEBIAN_CUDA_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS "gpulab (= ${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE})")
  set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS "gpulab-cuda")
  set(CPACK_DEBIAN_CUDA_DESCRIPTION
"CUDA backend for GPU Lab
The module that runs GPU Lab's lessons on an NVIDIA GPU: CUDA kernels, cuBLAS
and cuDNN. It needs the CUDA runtime, cuBLAS and cuDNN libraries and an
NVIDIA driver; without them GPU Lab runs on the CPU and says why.")
elseif(GPULAB_HAS_CUDA)
  # A CUDA build that links cudart, cuBLAS and cuDNN into the programs themselves: a package made
  # from it would need them installed. Package a CPU-only build until the backend is a module.
  set(CPACK_PRE_BUILD_SCRIPTS "${PROJECT_BINARY_DIR}/packaging/refuse_cuda_linked.cmake")
  file(WRITE "${PROJECT_BINARY_DIR}/packaging/refuse_cuda_linked.cmake"
    "message(FATAL_ERROR \"This build links the CUDA libraries into gpulab and gpulab-cli, so its \"\n"
    "  \"package would depend on them. Package a CPU-only build (-DGPULAB_CUDA=OFF) until the CUDA \"\n"
    "  \"backend is the module target gpulab_cuda.\")\n")
endif()

if(TARGET gpulab_python)
  list(APPEND CPACK_COMPONENTS_ALL python)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME "python3-gpulab")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION "python")
  # Not scanned: the extension's one library of its own, the engine, is gpulab's (private, not on the
  # linker's path, so dpkg-shlibdeps cannot resolve it from this package). The rest it links are the
  # C and C++ runtimes, at the versions dpkg-shlibdeps gives the extension on Debian 12. It is built
  # for one Python 3 version: the one it depends on.
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
      "gpulab (= ${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE}), ${GPULAB_PYTHON_DEPENDS}, libc6 (>= 2.32), libgcc-s1 (>= 3.3.1), libstdc++6 (>= 11)")
  # Byte-compiled on install, cleaned before removal (py3compile, py3clean), as Debian's Python packages.
  # CPack names control files by their file name: copied as postinst and prerm.
  foreach(script IN ITEMS postinst prerm)
    configure_file("${PROJECT_SOURCE_DIR}/resources/debian/python3-gpulab.${script}" "${_gpulab_pkgdir}/python/${script}" COPYONLY
                   FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
  endforeach()
  set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_EXTRA "${_gpulab_pkgdir}/python/postinst;${_gpulab_pkgdir}/python/prerm")
  set(CPACK_DEBIAN_PYTHON_DESCRIPTION
"PyTorch's Python API on GPU Lab's engine
The gpulab Python package: PyTorch code runs on it as written (import it as
torch; gpulab-cli run SCRIPT.py does that for a script): tensors, autograd,
nn.Module subclassed in Python, the layers and losses, optimizers,
DataLoader, torch.cuda's memory calls, streams and CUDA graphs, autocast and
the GradScaler, the profiler -- on the CPU, on GPU Lab's emulated GPU, or on a
real GPU with gpulab-cuda.")
endif()

include(CPack)

# --- the install test (tests/install/deb_install_test.sh) -------------------------------------------
# Installs the .deb into a fresh Debian 12 root and runs the programs there. It needs root (chroot,
# debootstrap) and the network (deb.debian.org), so it is kept out of every default ctest run by a
# configuration of its own:   ctest --test-dir build -C install -L install --output-on-failure
add_test(NAME deb_install
  COMMAND "${PROJECT_SOURCE_DIR}/tests/install/deb_install_test.sh" "${PROJECT_BINARY_DIR}"
  CONFIGURATIONS install)
set_tests_properties(deb_install PROPERTIES LABELS "install" TIMEOUT 1800 RUN_SERIAL ON)
