#!/usr/bin/env python3
"""Static instruction budget of a kernel without a GPU: the loops of one function of a cuobjdump
SASS listing, largest first, each with its instruction count and its opcode mix.

usage: bench/sass_loops.py LISTING.sass FUNCTION_SUBSTRING [--loops N] [--top K]

Make the listing from an object built for one architecture, e.g. the decode benchmark's INT2
translation unit (bench/NOTES.md used these counts for every records-kernel change):
  nvcc -O3 -DNDEBUG -std=c++17 --generate-code=arch=compute_90,code=sm_90 -Ibench -Iinclude \\
      -c build/bench/decode_int2.cu -o /tmp/k.o
  cuobjdump -sass /tmp/k.o > /tmp/k.sass   # cuobjdump: CUDA toolkit, or pip nvidia-cuda-cuobjdump
  bench/sass_loops.py /tmp/k.sass 'decode_records_kernel' --loops 3
A loop is the span from a backward branch's target to the branch; nested spans are listed too.
For the records kernel the third-largest span of the single-row-tile instantiation is one
macro-iteration (4 tiles for INT2 at D 128): 1678 instructions at 008b17b with the softcap and
rescale paths, which rarely run; NOTES' common-path figure (1256, 314 a tile) comes from a copy of
the headers with `capped` set to false and the rescale branch removed.
Static counts: a path taken rarely (the rescale, the softcap) counts as much as the common one."""
import argparse
import collections
import re

ap = argparse.ArgumentParser()
ap.add_argument("listing")
ap.add_argument("function")
ap.add_argument("--loops", type=int, default=3, help="loops to list, largest first")
ap.add_argument("--top", type=int, default=20, help="opcodes to list per loop")
args = ap.parse_args()

functions, current = {}, None
for line in open(args.listing):
    m = re.search(r"Function : (\S+)", line)
    if m:
        current = m.group(1)
        functions[current] = []
        continue
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
    if current and m:
        functions[current].append((int(m.group(1), 16), m.group(2).strip()))

for name, ins in functions.items():
    if args.function not in name:
        continue
    print(f"{name}: {len(ins)} instructions")
    loops = []
    for addr, text in ins:
        m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", text)
        if m and int(m.group(1), 16) < addr:
            loops.append((int(m.group(1), 16), addr))
    for start, end in sorted(loops, key=lambda x: x[0] - x[1])[: args.loops]:
        body = [t for a, t in ins if start <= a <= end]
        ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split(" ")[0] for t in body)
        mix = ", ".join(f"{op} {n}" for op, n in ops.most_common(args.top))
        print(f"  loop {start:#x}-{end:#x}: {len(body)} instructions: {mix}")
