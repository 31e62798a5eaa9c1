# Install kvq from the build tree into a fresh prefix, then configure and build the CUDA consumer
# (tests/consume/cuda: kvq_add_instances for sm_90a, sm_90, sm_80 + sm_90a) that only knows
# find_package(kvq), and check it:
#   - without a GPU, from ptxas's report of each build: the sm_90a builds hold the warp-specialized
#     wgmma prefill kernel and the probe that tells the runtime so (its shared-memory marker), the
#     sm_90 build holds no sm_90a code and a probe without the marker;
#   - by running each consumer: the handle's checks, and on a GPU the prefill kernel its plan
#     selects (skipped with a message where there is no GPU).
# Arguments: KVQ_SOURCE, KVQ_BUILD, WORK, GENERATOR, CXX, CUDA (compilers of the kvq build).
cmake_minimum_required(VERSION 3.18)  # policies of the if(IN_LIST) checks below
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${KVQ_BUILD} --prefix ${WORK}/prefix RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${KVQ_SOURCE}/tests/consume/cuda -B ${WORK}/build -G ${GENERATOR}
                        -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_CXX_COMPILER=${CXX}
                        -DCMAKE_CUDA_COMPILER=${CUDA} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "consumer configure failed: ${rc}")
endif()

# ptxas -v lines: "Compiling entry function '<name>' for '<arch>'" then, for that function,
# "Used N registers, ... [M bytes smem, ...]". Returns "<arch>|<smem>" per function whose mangled
# name contains `pattern`.
function(kernels_compiled log pattern out)
  string(REPLACE ";" "," log "${log}")
  string(REPLACE "[" "(" log "${log}")  # a list element with an unbalanced bracket would not split
  string(REPLACE "]" ")" log "${log}")
  string(REPLACE "\n" ";" lines "${log}")
  set(found "")
  set(current "")
  foreach(line ${lines})
    if(line MATCHES "Compiling entry function '([^']+)' for '([a-z_0-9]+)'")
      set(current "")
      set(name "${CMAKE_MATCH_1}")
      set(arch "${CMAKE_MATCH_2}")
      string(FIND "${name}" "${pattern}" at)
      if(at GREATER -1)
        set(current "${arch}")
      endif()
    elseif(current AND line MATCHES "Used [0-9]+ registers")
      set(smem 0)
      if(line MATCHES " ([0-9]+) bytes smem")
        set(smem ${CMAKE_MATCH_1})
      endif()
      list(APPEND found "${current}|${smem}")
      set(current "")
    endif()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

set(probe "wgmma_probe_kernel")
set(ws "prefill_ws_kernel")
foreach(variant 90a 90 80_90a)
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build --target engine_${variant}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc)
    message(FATAL_ERROR "consumer build of engine_${variant} failed: ${rc}\n${out}\n${err}")
  endif()
  kernels_compiled("${out}\n${err}" ${probe} probes)
  kernels_compiled("${out}\n${err}" ${ws} ws_kernels)
  message(STATUS "engine_${variant}: wgmma probe compiled as ${probes}; warp-specialized prefill as ${ws_kernels}")
  if(variant STREQUAL "90")
    if(NOT probes STREQUAL "sm_90|0")
      message(FATAL_ERROR "engine_90 (90-real): expected the probe only as sm_90 code without the marker, got '${probes}'")
    endif()
    if(ws_kernels MATCHES "sm_90a")
      message(FATAL_ERROR "engine_90 (90-real) holds sm_90a code: ${ws_kernels}")
    endif()
  else()
    if(NOT "sm_90a|32" IN_LIST probes)
      message(FATAL_ERROR "engine_${variant}: the probe's sm_90a code lacks its 32-byte marker: '${probes}'")
    endif()
    if(NOT ws_kernels MATCHES "sm_90a")
      message(FATAL_ERROR "engine_${variant}: no sm_90a code of the warp-specialized prefill kernel: '${ws_kernels}'")
    endif()
    if(variant STREQUAL "80_90a" AND NOT "sm_80|0" IN_LIST probes)
      message(FATAL_ERROR "engine_80_90a: expected the probe as sm_80 code without the marker too, got '${probes}'")
    endif()
  endif()
endforeach()

execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "consumer build failed: ${rc}")
endif()
foreach(variant 90a 90 80_90a)
  message(STATUS "---- consumer_${variant}")
  execute_process(COMMAND ${WORK}/build/consumer_${variant} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "consumer_${variant} failed: ${rc}")
  endif()
endforeach()
