# Runs a job that must fail, and fails unless it does so promptly and loudly.
#   cmake -DCOMMAND="prog|arg|..." -DMAX_SECONDS=45 -DEXPECT=<regex> -P expect_job_failure.cmake
# Passes when COMMAND exits with a non-zero code in less than MAX_SECONDS and
# its combined stdout+stderr matches EXPECT. A hang (killed at MAX_SECONDS),
# exit code 0 or a silent failure fails.
foreach(v COMMAND MAX_SECONDS EXPECT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "expect_job_failure.cmake: -D${v}=... is required")
  endif()
endforeach()
string(REPLACE "|" ";" _cmd "${COMMAND}")

string(TIMESTAMP _t0 "%s" UTC)
execute_process(COMMAND ${_cmd} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out
                TIMEOUT ${MAX_SECONDS})
string(TIMESTAMP _t1 "%s" UTC)
math(EXPR _elapsed_s "${_t1} - ${_t0}")

message("---- output of: ${_cmd}\n${_out}---- exit: ${_rc}, elapsed: ${_elapsed_s} s")
if(NOT _rc MATCHES "^-?[0-9]+$")
  message(FATAL_ERROR "the job did not end by itself within ${MAX_SECONDS} s (${_rc}): a dead or stuck rank hangs it")
endif()
if(_rc EQUAL 0)
  message(FATAL_ERROR "the job exited with code 0: the failure of a rank went unnoticed")
endif()
if(NOT _elapsed_s LESS MAX_SECONDS)
  message(FATAL_ERROR "the job took ${_elapsed_s} s, not less than ${MAX_SECONDS} s")
endif()
if(NOT _out MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output does not explain the failure (no match for '${EXPECT}')")
endif()
message("job failed as expected: exit code ${_rc} after ${_elapsed_s} s")
