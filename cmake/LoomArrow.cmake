# Apache Arrow's C++ Parquet reader, for `loom preprocess --input X.parquet`.
#
# Arrow C++ is not packaged in Debian 12. It is taken, in this order, from:
#   1. LOOM_ARROW_DIR: a prefix with include/{arrow,parquet} and
#      libarrow.so* / libparquet.so* (in it or in its lib/);
#   2. Arrow's own CMake packages (Apache's apt repository, conda, a source
#      build): find_package(Arrow) + find_package(Parquet);
#   3. pyarrow's PyPI wheel, which ships Arrow's C++ headers and shared
#      libraries (pyarrow.get_include() / get_library_dirs()); scripts/setup.sh
#      installs it with pip.
# Without any of them Loom builds without Parquet input and says how to get it.
#
# Defines the target loom_parquet (INTERFACE) and LOOM_HAVE_PARQUET. Only the
# plugin libloom_parquet.so (exec/data/parquet_reader.h) and tests link it.
# Off in sanitizer and fuzzing builds: prebuilt Arrow libraries are not
# instrumented, and std::string/vector objects crossing into them would make
# AddressSanitizer's container annotations report false overflows.
if(LOOM_SANITIZE OR LOOM_FUZZ)
  set(_loom_arrow_default OFF)
else()
  set(_loom_arrow_default ON)
endif()
option(LOOM_WITH_ARROW "Read Parquet input with Apache Arrow's C++ library when found" ${_loom_arrow_default})
set(LOOM_ARROW_DIR "" CACHE PATH "Prefix of an Arrow C++ install (include/, libarrow.so, libparquet.so)")
set(LOOM_HAVE_PARQUET OFF)

function(_loom_arrow_from_dirs include_dir lib_dir)
  file(GLOB _arrow_libs "${lib_dir}/libarrow.so*")
  file(GLOB _parquet_libs "${lib_dir}/libparquet.so*")
  if(NOT EXISTS "${include_dir}/parquet/arrow/reader.h" OR NOT _arrow_libs OR NOT _parquet_libs)
    return()
  endif()
  # The shortest name is the SONAME link (libarrow.so or libarrow.so.2600).
  list(SORT _arrow_libs)
  list(SORT _parquet_libs)
  list(GET _arrow_libs 0 _arrow)
  list(GET _parquet_libs 0 _parquet)
  add_library(loom_parquet INTERFACE)
  target_include_directories(loom_parquet SYSTEM INTERFACE "${include_dir}")
  target_link_libraries(loom_parquet INTERFACE "${_parquet}" "${_arrow}")
  set(LOOM_HAVE_PARQUET ON PARENT_SCOPE)
  set(LOOM_ARROW_FROM "${lib_dir}" PARENT_SCOPE)
endfunction()

if(LOOM_WITH_ARROW)
  if(LOOM_ARROW_DIR)
    _loom_arrow_from_dirs("${LOOM_ARROW_DIR}/include" "${LOOM_ARROW_DIR}/lib")
    if(NOT LOOM_HAVE_PARQUET)
      _loom_arrow_from_dirs("${LOOM_ARROW_DIR}/include" "${LOOM_ARROW_DIR}")
    endif()
    if(NOT LOOM_HAVE_PARQUET)
      message(FATAL_ERROR "LOOM_ARROW_DIR=${LOOM_ARROW_DIR} has no include/parquet/arrow/reader.h with libarrow.so*/libparquet.so*")
    endif()
  endif()
  if(NOT LOOM_HAVE_PARQUET)
    find_package(Arrow CONFIG QUIET)
    find_package(Parquet CONFIG QUIET)
    if(TARGET Arrow::arrow_shared AND TARGET Parquet::parquet_shared)
      add_library(loom_parquet INTERFACE)
      target_link_libraries(loom_parquet INTERFACE Parquet::parquet_shared Arrow::arrow_shared)
      set(LOOM_HAVE_PARQUET ON)
      set(LOOM_ARROW_FROM "Arrow ${Arrow_VERSION} CMake package")
    endif()
  endif()
  if(NOT LOOM_HAVE_PARQUET)
    find_package(Python3 QUIET COMPONENTS Interpreter)
    if(Python3_Interpreter_FOUND)
      execute_process(
        COMMAND "${Python3_EXECUTABLE}" -c "import pyarrow; print(pyarrow.get_include()); print(pyarrow.get_library_dirs()[0])"
        OUTPUT_VARIABLE _pa OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _pa_rc ERROR_QUIET)
      if(_pa_rc EQUAL 0)
        string(REPLACE "\n" ";" _pa "${_pa}")
        list(GET _pa 0 _pa_include)
        list(GET _pa 1 _pa_lib)
        _loom_arrow_from_dirs("${_pa_include}" "${_pa_lib}")
      endif()
    endif()
  endif()
  if(NOT LOOM_HAVE_PARQUET)
    message(STATUS "Arrow C++ not found: Parquet input disabled (python3 -m pip install pyarrow, or -DLOOM_ARROW_DIR=...)")
  endif()
endif()
