#!/bin/bash
# bench/trace/make_trace.sh - builds kvq_trace, the decode benchmark with per-CTA timestamps (a
# diagnostic for bench/NOTES.md; nothing of it enters the library, its tests or CI).
#
# usage: bench/trace/make_trace.sh BUILD_DIR OUT_DIR [FORMAT ...]     (formats: int2 int4 ...)
#   BUILD_DIR: a configured build with -DKVQ_BUILD_BENCH=ON whose kvq_bench_decode was built (the
#              generated bench/decode_<format>.cu and bench_util.cu.o are taken from it);
#   OUT_DIR:   where kvq_trace goes (run it like kvq_bench_decode, on the device, with
#              LD_LIBRARY_PATH holding libbenchmark's .so; TRACE_DUMP=DIR for per-CTA files).
# It copies include/ and bench/*.cuh to OUT_DIR/src, inserts the stamps of trace.h at fixed
# anchors of the decode kernels (it stops if an anchor moved) and driver.inc into the bench, and
# compiles for sm_90a.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
formats=("${@:-int2 int4}")
src=$out/src
rm -rf "$src" && mkdir -p "$src/bench" && cp -r "$repo/include" "$src/" && cp "$repo"/bench/*.cuh "$src/bench/"
python3 - "$src" "$here" <<'EOF'
import sys
src, here = sys.argv[1], sys.argv[2]
def patch(path, pairs):
    s = open(path).read()
    for a, b in pairs:
        if s.count(a) != 1:
            sys.exit(f"make_trace: anchor not found once in {path}: {a!r}")
        s = s.replace(a, b)
    open(path, 'w').write(s)
R = src + '/include/kvq/'
patch(R + 'decode/records_kernel.cuh', [
    ('  __shared__ int bad, bad_page;\n', '  __shared__ int bad, bad_page;\n  KvqTraceScope kvq_scope_(KVQ_REG_REC);\n'),
    ('  resolve_sequence_for_cta(v, a, plan, b, P, s, bad);\n', '  resolve_sequence_for_cta(v, a, plan, b, P, s, bad);\n  KVQ_T(KVQ_REG_REC, 5);\n'),
    ('  const int active_nt =', '  KVQ_T(KVQ_REG_REC, 6);\n  const int active_nt ='),
    ('    for (int e = 0; e < 8; ++e) koff[e / 4][e % 4] = cw[e];\n', '    for (int e = 0; e < 8; ++e) koff[e / 4][e % 4] = cw[e];\n    KVQ_T(KVQ_REG_REC, 7);\n'),
    ('  wait_prior_grids();  // (every path waits for the transition grid before exiting)\n',
     '  wait_prior_grids();  // (every path waits for the transition grid before exiting)\n  KVQ_T(KVQ_REG_REC, 1);\n'),
    ('  __syncthreads();  // every warp is done with its ring: the epilogue reuses the space\n',
     '  __syncthreads();  // every warp is done with its ring: the epilogue reuses the space\n  KVQ_T(KVQ_REG_REC, 2);\n'),
])
for f, reg in [('decode/tail_kernel.cuh', 'KVQ_REG_TAIL'), ('decode/merge_kernel.cuh', 'KVQ_REG_MERGE'),
               ('attention/transition.cuh', 'KVQ_REG_TRANS')]:
    s = open(R + f).read()
    i = s.index('__global__')
    j = s.index('{\n', i)
    open(R + f, 'w').write(s[:j + 2] + f'  KvqTraceScope kvq_scope_({reg});\n' + s[j + 2:])
nl = chr(10)
patch(src + '/bench/decode_bench.cuh', [
    ('    state.counters["splits"] = plan.max_splits;\n',
     '    state.counters["splits"] = plan.max_splits;\n'
     '    trace_report(std::to_string(Cfg::record_bytes) + "B/b" + std::to_string(batch) + "/ctx" + std::to_string(context) +\n'
     '                     "/q" + std::to_string(q_len),\n'
     '                 [&] { kvq::decode<Cfg>(v, a, plan, ws.ptr, plan.workspace_bytes, out.ptr, c.flags.ptr, nullptr); },\n'
     '                 plan.max_splits * batch * H, plan.tail_ctas);\n'),
    ('template <class Cfg>\nstruct DecodeCase {', open(here + '/driver.inc').read() + nl + 'template <class Cfg>\nstruct DecodeCase {'),
    ('#include <string>\n', '#include <string>\n#include <array>\n#include <algorithm>\n#include <cstdio>\n#include <cstdlib>\n#include <functional>\n'),
])
EOF
objs=()
for f in ${formats[@]}; do
  nvcc -O3 -DNDEBUG -DKVQ_ENABLE_WGMMA=1 --generate-code=arch=compute_90a,code=[sm_90a] -std=c++17 \
      -I"$src/bench" -I"$src/include" -include "$here/trace.h" -c "$build/bench/decode_$f.cu" -o "$out/decode_$f.o"
  objs+=("$out/decode_$f.o")
done
g++ -O3 -o "$out/kvq_trace" "${objs[@]}" "$build/bench/CMakeFiles/kvq_bench_decode.dir/bench_util.cu.o" \
    /usr/lib/x86_64-linux-gnu/libbenchmark_main.a /usr/lib/x86_64-linux-gnu/libbenchmark.so.1.7.1 \
    -L/usr/local/cuda/targets/x86_64-linux/lib -lcudadevrt -lcudart_static -lrt -lpthread -ldl
echo "make_trace: $out/kvq_trace (${formats[*]})"
