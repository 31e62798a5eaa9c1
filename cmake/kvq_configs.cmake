# The representative instantiation set compiled in this repository (tests, benchmarks).
# Every value of every template axis appears at least once; the full cross product does not.
# Each entry: NAME|DTYPE|HEAD_DIM|PAGE|K_FORMAT|V_FORMAT (C++ spellings).
set(KVQ_CONFIGS
  # every format at head dim 128, page 64 (the headline shape)
  "bf16_d128_p64_none|kvq::bf16|128|64|kvq::NoQuant|kvq::NoQuant"
  "bf16_d128_p64_int8|kvq::bf16|128|64|kvq::Int8|kvq::Int8"
  "bf16_d128_p64_int4|kvq::bf16|128|64|kvq::Int4<32>|kvq::Int4<32>"
  "bf16_d128_p64_int2|kvq::bf16|128|64|kvq::Int2<32>|kvq::Int2<32>"
  "bf16_d128_p64_k4v2|kvq::bf16|128|64|kvq::Int4<32>|kvq::Int2<32>"
  # every format at head dims 64 and 256
  "bf16_d64_p64_none|kvq::bf16|64|64|kvq::NoQuant|kvq::NoQuant"
  "bf16_d64_p64_int8|kvq::bf16|64|64|kvq::Int8|kvq::Int8"
  "bf16_d64_p64_int4|kvq::bf16|64|64|kvq::Int4<32>|kvq::Int4<32>"
  "bf16_d64_p64_int2|kvq::bf16|64|64|kvq::Int2<32>|kvq::Int2<32>"
  "bf16_d64_p64_k4v2|kvq::bf16|64|64|kvq::Int4<32>|kvq::Int2<32>"
  "bf16_d256_p64_none|kvq::bf16|256|64|kvq::NoQuant|kvq::NoQuant"
  "bf16_d256_p64_int8|kvq::bf16|256|64|kvq::Int8|kvq::Int8"
  "bf16_d256_p64_int4|kvq::bf16|256|64|kvq::Int4<32>|kvq::Int4<32>"
  "bf16_d256_p64_int2|kvq::bf16|256|64|kvq::Int2<32>|kvq::Int2<32>"
  "bf16_d256_p64_k4v2|kvq::bf16|256|64|kvq::Int4<32>|kvq::Int2<32>"
  # every format at page 16 (head dims 64 / 128 / 256 across them)
  "bf16_d128_p16_none|kvq::bf16|128|16|kvq::NoQuant|kvq::NoQuant"
  "bf16_d64_p16_int8|kvq::bf16|64|16|kvq::Int8|kvq::Int8"
  "bf16_d256_p16_int4|kvq::bf16|256|16|kvq::Int4<16>|kvq::Int4<32>"
  "bf16_d128_p16_int2|kvq::bf16|128|16|kvq::Int2<16>|kvq::Int2<32>"
  "bf16_d64_p16_k4v2|kvq::bf16|64|16|kvq::Int4<16>|kvq::Int2<32>"
  # pages 32 and 128, other group sizes
  "bf16_d128_p32_int2|kvq::bf16|128|32|kvq::Int2<32>|kvq::Int2<32>"
  "bf16_d128_p128_int2_g64|kvq::bf16|128|128|kvq::Int2<64>|kvq::Int2<64>"
  "bf16_d256_p128_k4v2|kvq::bf16|256|128|kvq::Int4<32>|kvq::Int2<32>"
  "bf16_d64_p32_int2_g16|kvq::bf16|64|32|kvq::Int2<16>|kvq::Int2<16>"
  # key groups that are not a multiple of 16 tokens (and values of fewer channels than a packed
  # word): the element-wise decode kernel serves these, not the tensor-core records kernel
  "bf16_d128_p64_int2_k8|kvq::bf16|128|64|kvq::Int2<8>|kvq::Int2<32>"
  "fp16_d64_p32_int4_k8v4|kvq::fp16|64|32|kvq::Int4<8>|kvq::Int2<4>"
  # fp16 models
  "fp16_d128_p64_none|kvq::fp16|128|64|kvq::NoQuant|kvq::NoQuant"
  "fp16_d128_p64_int2|kvq::fp16|128|64|kvq::Int2<32>|kvq::Int2<32>"
  "fp16_d64_p32_k4v2|kvq::fp16|64|32|kvq::Int4<32>|kvq::Int2<32>"
  "fp16_d256_p16_int8|kvq::fp16|256|16|kvq::Int8|kvq::Int8"
)

# kvq_config_fields(<entry> <prefix>): splits an entry into <prefix>_NAME, _DTYPE, _D, _P, _KQ, _VQ.
function(kvq_config_fields entry prefix)
  string(REPLACE "|" ";" fields "${entry}")
  list(GET fields 0 name)
  list(GET fields 1 dtype)
  list(GET fields 2 d)
  list(GET fields 3 p)
  list(GET fields 4 kq)
  list(GET fields 5 vq)
  set(${prefix}_NAME ${name} PARENT_SCOPE)
  set(${prefix}_DTYPE ${dtype} PARENT_SCOPE)
  set(${prefix}_D ${d} PARENT_SCOPE)
  set(${prefix}_P ${p} PARENT_SCOPE)
  set(${prefix}_KQ ${kq} PARENT_SCOPE)
  set(${prefix}_VQ ${vq} PARENT_SCOPE)
endfunction()

# Developer builds may compile a subset: the configurations whose NAME matches this regular
# expression (e.g. "d128_p64_(int2|k4v2)"). Empty: all of them.
set(KVQ_CONFIG_FILTER "" CACHE STRING "Regex over configuration names: build only those (empty: all)")
if(KVQ_CONFIG_FILTER)
  list(FILTER KVQ_CONFIGS INCLUDE REGEX "^[^|]*(${KVQ_CONFIG_FILTER})[^|]*[|]")
  message(STATUS "kvq: configurations matching '${KVQ_CONFIG_FILTER}': ${KVQ_CONFIGS}")
endif()
