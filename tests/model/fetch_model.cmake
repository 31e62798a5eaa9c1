cmake_minimum_required(VERSION 3.18)
# Runs examples/smollm2/fetch_model.sh; writes the model path to OUT, and the bad-input files the
# CLI tests use. A failed fetch fails this test with the script's message.
execute_process(COMMAND bash ${SCRIPT} OUTPUT_VARIABLE path ERROR_VARIABLE err RESULT_VARIABLE rc
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0 OR NOT EXISTS "${path}")
  message(FATAL_ERROR "fetching the SmolLM2 model failed (exit ${rc}):\n${err}")
endif()
file(WRITE ${OUT} "${path}")
message(STATUS "model: ${path}")
# A text file with the wrong magic, and the model cut after 2 MiB (metadata intact, tensor data not).
file(WRITE ${WORK}/not_a_model.gguf "this is not a GGUF file\n")
execute_process(COMMAND head -c 2097152 "${path}" OUTPUT_FILE ${WORK}/truncated.gguf RESULT_VARIABLE rc2)
if(NOT rc2 EQUAL 0)
  message(FATAL_ERROR "could not write ${WORK}/truncated.gguf")
endif()
