# cuDNN's fused attention for the CUDA backend (exec/backend/cuda/cudnn_sdpa.h).
#
# Compiling it needs cuDNN 9's headers (cudnn.h: a CUDA toolkit's include/,
# or LOOM_CUDNN_DIR/include) and the cudnn-frontend headers (cudnn_frontend.h:
# LOOM_CUDNN_FRONTEND_DIR/include, or the nvidia-cudnn-frontend wheel that
# scripts/setup.sh installs, whose include/ lands in python3's site-packages).
# Nothing links cuDNN: the frontend loads libcudnn.so.9 at run time
# (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING), so the binary runs on nodes
# without it and falls back to the cuBLAS attention.
#
# Sets LOOM_HAVE_CUDNN_SDPA and defines the INTERFACE target loom_cudnn_frontend.
set(LOOM_CUDNN_DIR "" CACHE PATH "Prefix of a cuDNN 9 install (include/cudnn.h)")
set(LOOM_CUDNN_FRONTEND_DIR "" CACHE PATH "Prefix of the cudnn-frontend headers (include/cudnn_frontend.h)")
set(LOOM_HAVE_CUDNN_SDPA OFF)
if(LOOM_WITH_CUDA)
  set(_fe_hints "")
  if(LOOM_CUDNN_FRONTEND_DIR)
    list(APPEND _fe_hints "${LOOM_CUDNN_FRONTEND_DIR}/include" "${LOOM_CUDNN_FRONTEND_DIR}")
  endif()
  find_program(_loom_python3 python3)
  if(_loom_python3)
    execute_process(COMMAND ${_loom_python3} -c "import sysconfig; print(sysconfig.get_paths()['platlib'])"
      OUTPUT_VARIABLE _site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
    if(_rc EQUAL 0 AND _site)
      list(APPEND _fe_hints "${_site}/include")
    endif()
  endif()
  find_path(LOOM_CUDNN_FRONTEND_INCLUDE cudnn_frontend.h HINTS ${_fe_hints} NO_DEFAULT_PATH)
  find_path(LOOM_CUDNN_INCLUDE cudnn.h HINTS "${LOOM_CUDNN_DIR}/include" ${CUDAToolkit_INCLUDE_DIRS})
  if(LOOM_CUDNN_FRONTEND_INCLUDE AND LOOM_CUDNN_INCLUDE)
    file(STRINGS "${LOOM_CUDNN_INCLUDE}/cudnn_version.h" _major REGEX "^#define CUDNN_MAJOR [0-9]+")
    if(_major MATCHES "CUDNN_MAJOR ([0-9]+)" AND CMAKE_MATCH_1 GREATER_EQUAL 9)
      set(LOOM_HAVE_CUDNN_SDPA ON)
      add_library(loom_cudnn_frontend INTERFACE)
      target_include_directories(loom_cudnn_frontend SYSTEM INTERFACE "${LOOM_CUDNN_FRONTEND_INCLUDE}"
                                 "${LOOM_CUDNN_INCLUDE}")
      target_compile_definitions(loom_cudnn_frontend INTERFACE NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
                                 CUDNN_FRONTEND_SKIP_JSON_LIB)
      target_link_libraries(loom_cudnn_frontend INTERFACE ${CMAKE_DL_LIBS})
      message(STATUS "cuDNN attention: frontend ${LOOM_CUDNN_FRONTEND_INCLUDE}, cuDNN headers ${LOOM_CUDNN_INCLUDE} (libcudnn.so.9 loaded at run time)")
    else()
      message(STATUS "cuDNN attention: off (${LOOM_CUDNN_INCLUDE}/cudnn.h is older than cuDNN 9)")
    endif()
  else()
    message(STATUS "cuDNN attention: off (cudnn_frontend.h: ${LOOM_CUDNN_FRONTEND_INCLUDE}; cudnn.h: ${LOOM_CUDNN_INCLUDE}); "
                   "scripts/setup.sh installs the frontend headers (pip nvidia-cudnn-frontend)")
  endif()
endif()
