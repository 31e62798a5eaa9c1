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
--blocks N lists instead the function's basic blocks of at least N instructions in address order
(a block ends at a branch, exit or reconvergence point and starts at a branch target), each with
its HMMA, LOP3, MUFU.EX2, copy (LDGSTS) and spill (STL / LDL) counts: what ptxas can schedule
together, e.g. whether a loop step is one block or is split by a rare branch (bench/NOTES.md,
decode v14).
For the records kernel the third-largest span of the single-row-tile instantiation is one
macro-iteration (4 tiles for INT2 at D 128): 1678 instructions at 008b17b with the softcap and
rescale paths, which rarely run; NOTES' common-path figure (1256, 314 a tile) comes from a copy of
the headers with `capped` set to false and the rescale branch removed.
Static counts: a path taken rarely (the rescale, the softcap) counts as much as the common one."""
import argparse
import collections
import re

from sass_listing import branch_target, opcode, read_functions

ap = argparse.ArgumentParser()
ap.add_argument("listing")
ap.add_argument("function")
ap.add_argument("--loops", type=int, default=3, help="loops to list, largest first")
ap.add_argument("--top", type=int, default=20, help="opcodes to list per loop")
ap.add_argument("--blocks", type=int, help="list the basic blocks of at least this many instructions instead")
args = ap.parse_args()

functions = {name: [(x["addr"], x["text"]) for x in ins] for name, ins in read_functions(args.listing).items()}


def blocks(ins):
    """Basic blocks of a function's instructions [(address, text)], in address order."""
    targets = {int(m.group(1), 16) for _, t in ins for m in [re.search(r"\b(?:BRA|BSSY|CALL\S*)\b.*?(0x[0-9a-f]+)", t)] if m}
    out, cur = [], []
    for addr, text in ins:
        if addr in targets and cur:
            out.append(cur)
            cur = []
        cur.append((addr, text))
        if opcode(text).split(".")[0] in ("BRA", "EXIT", "RET", "BSYNC", "WARPSYNC", "BAR"):
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


for name, ins in functions.items():
    if args.function not in name:
        continue
    print(f"{name}: {len(ins)} instructions")
    if args.blocks is not None:
        for b in blocks(ins):
            if len(b) < args.blocks:
                continue
            ops = collections.Counter(opcode(t) for _, t in b)
            count = lambda prefix: sum(n for op, n in ops.items() if op.startswith(prefix))
            print(f"  block {b[0][0]:#x}-{b[-1][0]:#x}: {len(b)} instructions, HMMA {count('HMMA')}, "
                  f"LOP3 {count('LOP3')}, MUFU.EX2 {count('MUFU.EX2')}, LDGSTS {count('LDGSTS')}, "
                  f"STL {count('STL')}, LDL {count('LDL')}; ends {b[-1][1][:40]}")
        continue
    loops = []
    for addr, text in ins:
        target = branch_target(text)
        if target is not None and target < addr:
            loops.append((target, addr))
    for start, end in sorted(loops, key=lambda x: x[0] - x[1])[: args.loops]:
        body = [t for a, t in ins if start <= a <= end]
        ops = collections.Counter(opcode(t) for t in body)
        mix = ", ".join(f"{op} {n}" for op, n in ops.most_common(args.top))
        print(f"  loop {start:#x}-{end:#x}: {len(body)} instructions: {mix}")
