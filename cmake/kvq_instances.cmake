# kvq_add_instances: compile an engine's kvq configurations from one list.
#
#   kvq_add_instances(<target>
#     CONFIGS <entry>...            # NAME|DTYPE|HEAD_DIM|PAGE|K_FORMAT|V_FORMAT
#     [OPERATIONS <op>...]          # append decode prefill dequantize (default: all four)
#     [NAMESPACE <ns>]              # C++ namespace of the generated names (default: the target name)
#     [HEADER <file>])              # generated header's name (default: kvq_instances.hpp)
#
# Entry fields: NAME a C++ identifier (the configuration's alias and its files' names); DTYPE
# bf16 or fp16; HEAD_DIM 64, 128 or 256; PAGE 16, 32, 64 or 128; K_FORMAT, V_FORMAT none, int8,
# int4, int2 (groups of 32), int4g<G>, int2g<G> (groups of G), or any C++ spelling starting with
# kvq:: (kvq::Int4<16>). A bad combination is a compile-time error of the generated files.
#   kvq_add_instances(engine_kvq NAMESPACE engine CONFIGS
#     "bf16_d128_p64_int2|bf16|128|64|int2|int2"
#     "bf16_d128_p64_k4v2|bf16|128|64|int4|int2")
#
# Adds to <target> (any target with CUDA enabled; the kernels are compiled for the target's
# CUDA_ARCHITECTURES, and an sm_90a entry there is all it takes for the Hopper wgmma prefill):
#   <NAME>_<op>.cu   one per configuration and operation: KVQ_INSTANTIATE_<OP>(<ns>::<NAME>)
#   kvq_ops.cu       one kvq::OpsTable per configuration (kvq/runtime/handle_impl.cuh)
#   <HEADER>         (PUBLIC include directory; plain C++, no CUDA header) the aliases,
#                    <ns>::Instances (a kvq::ConfigList of exactly the compiled configurations),
#                    <ns>::kOperations, <ns>::supports(key) and <ns>::make_handle(key, &handle).
# and links kvq::kvq and the CUDA runtime (as the target's CUDA_RUNTIME_LIBRARY says) PUBLIC, so
# a plain C++ target linking <target> can include <HEADER> and run every operation through a
# kvq::Handle (kvq/runtime/handle.hpp). The list is the only place a configuration is named: what
# an engine dispatches over is what was compiled.

function(_kvq_instances_format spelling out)
  if(spelling MATCHES "^kvq::")
    set(cxx "${spelling}")
  elseif(spelling STREQUAL "none")
    set(cxx "kvq::NoQuant")
  elseif(spelling STREQUAL "int8")
    set(cxx "kvq::Int8")
  elseif(spelling MATCHES "^int([24])$")
    set(cxx "kvq::Int${CMAKE_MATCH_1}<32>")
  elseif(spelling MATCHES "^int([24])g([0-9]+)$")
    set(cxx "kvq::Int${CMAKE_MATCH_1}<${CMAKE_MATCH_2}>")
  else()
    message(FATAL_ERROR "kvq_add_instances: unknown format '${spelling}' (none, int8, int4, int2, int4g<G>, int2g<G> "
                        "or a kvq:: spelling)")
  endif()
  set(${out} "${cxx}" PARENT_SCOPE)
endfunction()

function(kvq_add_instances target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "NAMESPACE;HEADER" "CONFIGS;OPERATIONS")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kvq_add_instances: unexpected arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT TARGET ${target})
    message(FATAL_ERROR "kvq_add_instances: '${target}' is not a target")
  endif()
  if(NOT ARG_CONFIGS)
    message(FATAL_ERROR "kvq_add_instances(${target}): CONFIGS is empty")
  endif()
  get_property(languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(NOT "CUDA" IN_LIST languages)
    message(FATAL_ERROR "kvq_add_instances(${target}): enable CUDA first (project(... CUDA) or enable_language(CUDA))")
  endif()
  if(NOT ARG_NAMESPACE)
    string(MAKE_C_IDENTIFIER "${target}" ARG_NAMESPACE)
  endif()
  if(NOT ARG_NAMESPACE MATCHES "^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*$")
    message(FATAL_ERROR "kvq_add_instances(${target}): NAMESPACE '${ARG_NAMESPACE}' is not a C++ namespace name")
  endif()
  if(NOT ARG_HEADER)
    set(ARG_HEADER kvq_instances.hpp)
  endif()
  if(NOT ARG_OPERATIONS)
    set(ARG_OPERATIONS append decode prefill dequantize)
  endif()

  # The operations: their bit in kvq::Operation, the implementation header, the instantiation macro.
  set(ops "")
  set(op_bits "")
  foreach(op ${ARG_OPERATIONS})
    if(op STREQUAL "append")
      list(APPEND op_bits "kvq::kOpAppend")
    elseif(op STREQUAL "decode")
      list(APPEND op_bits "kvq::kOpDecode")
    elseif(op STREQUAL "prefill")
      list(APPEND op_bits "kvq::kOpPrefill")
    elseif(op STREQUAL "dequantize")
      list(APPEND op_bits "kvq::kOpDequantize")
    elseif(op STREQUAL "rollback")
      continue()  # not per configuration: every table has it
    else()
      message(FATAL_ERROR "kvq_add_instances(${target}): unknown operation '${op}' (append, decode, prefill, dequantize, rollback)")
    endif()
    list(APPEND ops ${op})
  endforeach()
  list(REMOVE_DUPLICATES ops)
  list(REMOVE_DUPLICATES op_bits)
  if(op_bits)
    list(JOIN op_bits " | " op_mask)
  else()
    set(op_mask "0u")
  endif()
  set(impl_append "kvq/append/append_impl.cuh")
  set(impl_decode "kvq/decode/decode_impl.cuh")
  set(impl_prefill "kvq/prefill/prefill_impl.cuh")
  set(impl_dequantize "kvq/dequant/dequantize_impl.cuh")

  set(dir "${CMAKE_CURRENT_BINARY_DIR}/kvq_instances/${target}")
  set(generated "Generated by kvq_add_instances(${target}) from its CONFIGS list: edit the list, not this file.")
  set(aliases "")
  set(names "")
  set(keys "")
  set(tables "")
  set(sources "")
  foreach(entry ${ARG_CONFIGS})
    string(REPLACE "|" ";" fields "${entry}")
    list(LENGTH fields n)
    if(NOT n EQUAL 6)
      message(FATAL_ERROR "kvq_add_instances(${target}): '${entry}' is not NAME|DTYPE|HEAD_DIM|PAGE|K_FORMAT|V_FORMAT")
    endif()
    list(GET fields 0 name)
    list(GET fields 1 dtype)
    list(GET fields 2 d)
    list(GET fields 3 p)
    list(GET fields 4 kq)
    list(GET fields 5 vq)
    if(NOT name MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
      message(FATAL_ERROR "kvq_add_instances(${target}): configuration name '${name}' is not a C++ identifier")
    endif()
    if(name IN_LIST names)
      message(FATAL_ERROR "kvq_add_instances(${target}): configuration name '${name}' appears twice")
    endif()
    if(dtype MATCHES "^(kvq::)?(bf16|fp16)$")
      set(dtype "kvq::${CMAKE_MATCH_2}")
    else()
      message(FATAL_ERROR "kvq_add_instances(${target}): ${name}: dtype '${dtype}' is not bf16 or fp16")
    endif()
    if(NOT d MATCHES "^[0-9]+$" OR NOT p MATCHES "^[0-9]+$")
      message(FATAL_ERROR "kvq_add_instances(${target}): ${name}: head dim '${d}' and page '${p}' must be numbers")
    endif()
    _kvq_instances_format("${kq}" kq)
    _kvq_instances_format("${vq}" vq)
    set(cfg "kvq::CacheConfig<${dtype}, ${d}, ${p}, ${kq}, ${vq}>")
    if(cfg IN_LIST keys)
      message(FATAL_ERROR "kvq_add_instances(${target}): ${name} is the same configuration as another entry (${cfg})")
    endif()
    list(APPEND names ${name})
    list(APPEND keys "${cfg}")
    string(APPEND aliases "using ${name} = ${cfg};\n")
    string(APPEND tables "KVQ_INSTANTIATE_OPS(${ARG_NAMESPACE}::${name}, ${ARG_NAMESPACE}::kOperations);\n")
    foreach(op ${ops})
      string(TOUPPER "${op}" OP)
      set(file "${dir}/${name}_${op}.cu")
      file(CONFIGURE OUTPUT "${file}" CONTENT "// ${generated}
// The ${op} kernels of ${ARG_NAMESPACE}::${name}.
#include <${impl_${op}}>

#include \"${ARG_HEADER}\"

KVQ_INSTANTIATE_${OP}(${ARG_NAMESPACE}::${name});
")
      list(APPEND sources "${file}")
    endforeach()
  endforeach()
  list(JOIN names ", " list_items)

  file(CONFIGURE OUTPUT "${dir}/include/${ARG_HEADER}" CONTENT "// ${generated}
//
// The kvq configurations compiled into ${target}, for any C++ translation unit (no CUDA header):
//   ${ARG_NAMESPACE}::Instances         exactly those configurations (kvq::ConfigList)
//   ${ARG_NAMESPACE}::kOperations       the operations compiled for each (kvq::Operation bits)
//   ${ARG_NAMESPACE}::supports(key)     whether a runtime key is one of them
//   ${ARG_NAMESPACE}::make_handle(key, &handle)
//                     its kvq::Handle (kvq/runtime/handle.hpp); kvq::Status::kNotInstantiated for
//                     any other key, never a fallback
#pragma once

#include <kvq/runtime/handle.hpp>

namespace ${ARG_NAMESPACE} {

${aliases}
using Instances = kvq::ConfigList<${list_items}>;
constexpr unsigned kOperations = ${op_mask};

inline bool supports(const kvq::ConfigKey& key) { return kvq::contains(Instances{}, key); }

inline kvq::Status make_handle(const kvq::ConfigKey& key, kvq::Handle* handle) {
  return kvq::make_handle<kOperations>(Instances{}, key, handle);
}

}  // namespace ${ARG_NAMESPACE}
")
  file(CONFIGURE OUTPUT "${dir}/kvq_ops.cu" CONTENT "// ${generated}
// One kvq::OpsTable per configuration of ${ARG_NAMESPACE}::Instances.
#include <kvq/runtime/handle_impl.cuh>

#include \"${ARG_HEADER}\"

${tables}")
  list(APPEND sources "${dir}/kvq_ops.cu")

  target_sources(${target} PRIVATE ${sources})
  target_include_directories(${target} PUBLIC "$<BUILD_INTERFACE:${dir}/include>")
  target_compile_features(${target} PRIVATE cuda_std_17)

  # A plain C++ target that links <target> needs the CUDA runtime on its link line.
  get_target_property(runtime ${target} CUDA_RUNTIME_LIBRARY)
  if(NOT runtime)
    set(runtime "${CMAKE_CUDA_RUNTIME_LIBRARY}")
  endif()
  string(TOLOWER "${runtime}" runtime)
  set(cudart "")
  if(runtime STREQUAL "shared")
    set(cudart CUDA::cudart)
  elseif(NOT runtime STREQUAL "none")
    set(cudart CUDA::cudart_static)
  endif()
  if(cudart AND NOT TARGET ${cudart})
    find_package(CUDAToolkit REQUIRED)
  endif()
  target_link_libraries(${target} PUBLIC kvq::kvq ${cudart})
endfunction()
