cmake_minimum_required(VERSION 3.18)
# Runs EXE with ARGS (%MODEL% and %WORK% substituted) and checks that it fails cleanly: exit status
# 1 (not a signal, not 0) and a message on stderr matching EXPECT.
file(READ ${MODEL_PATH_FILE} model)
string(REPLACE "%MODEL%" "${model}" args "${ARGS}")
string(REPLACE "%WORK%" "${WORK}" args "${args}")
execute_process(COMMAND ${EXE} ${args} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message(STATUS "exit status: ${rc}\nstderr: ${err}")
if(NOT rc STREQUAL "1")
  message(FATAL_ERROR "expected exit status 1, got '${rc}'")
endif()
if(NOT err MATCHES "smollm2: error: .*${EXPECT}")
  message(FATAL_ERROR "stderr does not match '${EXPECT}'")
endif()
