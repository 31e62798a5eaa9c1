#!/usr/bin/env python3
"""Issue model of one loop path of a kernel on one Hopper scheduler, without a GPU.

usage: bench/sass_sim.py LISTING.sass FUNCTION_SUBSTRING RANGES [--warps N] [--steps S] ...

RANGES: the path one warp runs per iteration, in execution order:
- `a-b,c-d,...`: address ranges of the listing (hex, both ends included); `!x-y` drops the
  instructions x..y of a range before it (a branch's skipped side);
- `auto:HEAD-BRANCH`: the walk from HEAD to the loop's backward branch at BRANCH that takes, at each
  conditional branch, the side that avoids a rare path: the branch is taken when the block it would
  skip (its fall-through, up to the next branch or branch target) holds a marker of a rare path
  (--rare: the softcap's MUFU.RCP, a global load, a -INF select of the ragged mask, the row-max
  reduction's SHFL.BFLY, a warp-divergence handler), else not; BRA.DIV is never taken;
- `auto`: the same for the innermost loop that holds an HMMA (not counting out-of-line code past
  the last EXIT).
The listing must carry the control words (cuobjdump -sass prints each instruction's two 64-bit
words); bench/sass_loops.py --blocks lists the blocks a path goes through, --list here the path.
Example (the decode benchmark's INT2 unit, built as bench/sass_loops.py says; the single-row-tile
kernel at 4 warps a scheduler, one macro-iteration = two 2-tile steps):
  bench/sass_sim.py /tmp/k.sass 'IntAsymILi2ELi32EEES6_EELi1E' auto --steps 2 --warps 4

What it models (each instruction's control word is what ptxas wrote for it):
- a warp issues in order; after an instruction it waits the instruction's stall count (ptxas's
  cycles for fixed-latency results: ALU, FMA and the tensor core's accumulators), and an
  instruction whose wait mask names a scoreboard waits until every instruction that set that
  scoreboard has completed (variable latency: shared-memory loads, shuffles, MUFU, movmatrix; the
  latencies below are assumptions, `--lat OP=cycles` changes them);
- the scheduler issues at most one instruction a cycle: by default from the warp that issued last
  while it can, else from the oldest that can (greedy-then-oldest; `--policy lrr`: round robin);
- pipes take an instruction for several cycles (per scheduler: ALU 2; IMAD 2 on the FMA-heavy
  pipe; FP32 / FP16 2 on either FMA pipe, heavy or lite; MUFU 8; tensor core `--hmma` cycles an
  HMMA.16816; shared memory 32 bytes a cycle, a quarter of the multiprocessor's 128, charged at
  32 lanes x the access width: a broadcast load costs less on the GPU than here);
- every copy has arrived (DEPBAR does not wait): the model is the loop's math, as the
  same-page build measured it (bench/NOTES.md, run f3 of the session of 15:34).
Prints cycles per iteration per warp-step (`--steps`: steps in one iteration of the path), the
issue utilisation and each pipe's, for 1..N warps. Use it to compare two builds of one loop: its
absolute numbers rest on the assumed latencies and pipe rates."""
import argparse
import re

from sass_listing import branch_target, is_jump, opcode as opcode_of, read_functions

ap = argparse.ArgumentParser()
ap.add_argument("listing")
ap.add_argument("function")
ap.add_argument("ranges", help="a-b,c-d,... (hex), auto:HEAD-BRANCH or auto (see above)")
ap.add_argument("--warps", type=int, default=4, help="warps on the scheduler (at most)")
ap.add_argument("--steps", type=float, default=1.0, help="steps (e.g. 2-tile steps) in one iteration of the path")
ap.add_argument("--iters", type=int, default=40, help="iterations each warp runs")
ap.add_argument("--hmma", type=float, default=8.0, help="tensor-core cycles of one HMMA.16816 on a scheduler")
ap.add_argument("--policy", choices=["gto", "lrr", "lockstep"], default="gto",
                help="gto: the last warp while it can issue, else the oldest (lowest index); lrr: round robin "
                     "from the last one; lockstep: the warp with the fewest instructions issued")
ap.add_argument("--lat", action="append", default=[], help="OP=cycles: latency of a variable-latency opcode prefix")
ap.add_argument("--rare", default=r"MUFU\.RCP|LDG\.|-INF\s*,\s*!?P|SHFL\.BFLY|WARPSYNC\.COLLECTIVE",
                help="regex of instructions that mark a rare path (auto paths)")
ap.add_argument("--stagger", default="1,13,97,331",
                help="cycles between the warps' starts; a comma list runs each and reports the mean (the model's "
                     "noise: the spread between them is a few %%)")
ap.add_argument("--hist", action="store_true", help="print the path's opcode counts")
ap.add_argument("--list", action="store_true", help="print the path's instructions with their control words")
args = ap.parse_args()

# Variable-latency results (cycles from issue until the scoreboard is released).
LAT = {"LDS": 30, "LDSM": 30, "SHFL": 28, "MUFU": 20, "MOVM": 24, "S2R": 30, "S2UR": 30, "LDG": 600, "LDL": 40,
       "LDC": 30, "VOTE": 8, "LDGSTS": 12, "STS": 12, "STL": 12, "I2F": 12, "F2I": 12, "BAR": 20, "REDUX": 30}
for kv in args.lat:
    k, v = kv.split("=")
    LAT[k] = float(v)
READ_LAT = 4  # cycles until a read scoreboard (source registers consumed) is released


def var_latency(op):
    for k in sorted(LAT, key=len, reverse=True):
        if op.startswith(k):
            return LAT[k]
    return 6


def pipe_of(op):
    """(pipes it may use, cycles it holds one) on this scheduler."""
    base = op.split(".")[0]
    if base == "HMMA":
        return ("tensor",), args.hmma
    if base == "MUFU":
        return ("mufu",), 8
    if base in ("LDS", "STS", "LDSM", "SHFL", "MOVM", "LDGSTS", "STL", "LDL", "ATOMS"):
        width = 16 if ".128" in op else 8 if ".64" in op else 4
        if base in ("LDGSTS",):
            width = 16
        return ("mio",), 32 * width / 32  # bytes / (32 bytes a cycle)
    if base.startswith("IMAD") or base in ("IMUL",):
        return ("fmaheavy",), 2
    if base in ("FFMA", "FMUL", "FADD", "HMUL2", "HFMA2", "HADD2", "FFMA2", "F2FP", "FSWZADD"):
        return ("fmaheavy", "fmalite"), 2
    if base in ("LOP3", "SHF", "PRMT", "ISETP", "FSETP", "FMNMX", "FSEL", "SEL", "IADD3", "LEA", "PLOP3", "IMNMX",
                "VIADD", "IABS", "POPC", "FLO", "BMSK", "SGXT", "LOP", "SHL", "SHR", "HSETP2", "VIMNMX", "P2R", "R2P",
                "FCHK"):
        return ("alu",), 2
    return (), 1


functions = read_functions(args.listing)
names = [f for f in functions if args.function in f]
if not names:
    raise SystemExit(f"no function matches {args.function!r}")
ins = functions[names[0]]


RARE = re.compile(args.rare)


def auto_path(head, branch):
    """The common path of one iteration from head to the backward branch (see the usage)."""
    idx = {x["addr"]: i for i, x in enumerate(ins)}
    tset = {t for t in (branch_target(x["text"]) for x in ins) if t is not None}
    out, i, guard = [], idx[head], 0
    while True:
        guard += 1
        if guard > 100000:
            raise SystemExit("auto path: no end")
        x = ins[i]
        out.append(x)
        if x["addr"] == branch:
            return out
        tgt = branch_target(x["text"])
        if is_jump(x["text"]) and tgt is not None:
            if not x["text"].startswith("@"):
                i = idx[tgt]
                continue
            # conditional: the fall-through block, the code skipped if taken (up to the next branch
            # or branch target)
            skipped = []
            for y in ins[i + 1:]:
                if y["addr"] in tset or y["addr"] >= tgt:
                    break
                skipped.append(y["text"])
                if is_jump(y["text"]):
                    break
            if tgt > x["addr"] and any(RARE.search(t) for t in skipped):
                i = idx[tgt]
                continue
        i += 1


path = []
parts = [] if args.ranges.startswith("auto") else args.ranges.split(",")
if args.ranges == "auto":  # the innermost loop that holds an HMMA (not out-of-line code past the last EXIT)
    loops = []
    last_exit = max((x["addr"] for x in ins if opcode_of(x["text"]) == "EXIT"), default=1 << 62)
    for x in ins:
        if x["addr"] > last_exit:
            break
        h = branch_target(x["text"])
        if h is not None and h < x["addr"] and is_jump(x["text"]):
            if any(h <= y["addr"] <= x["addr"] and opcode_of(y["text"]).startswith("HMMA") for y in ins):
                loops.append((x["addr"] - h, h, x["addr"]))
    if not loops:
        raise SystemExit("auto: no loop with an HMMA")
    _, h, b = min(loops)
    print(f"auto: loop {h:#x}-{b:#x}")
    path = auto_path(h, b)
elif args.ranges.startswith("auto:"):
    h, b = (int(v, 16) for v in args.ranges[5:].split("-"))
    path = auto_path(h, b)
for part in parts:
    part = part.strip()
    a, b = (int(x, 16) for x in part.lstrip("!").split("-"))
    if part.startswith("!"):
        path = [x for x in path if not (a <= x["addr"] <= b)]
        continue
    path += [x for x in ins if a <= x["addr"] <= b]
if not path:
    raise SystemExit("empty path")
if any("stall" not in x for x in path):
    raise SystemExit("the listing carries no control words (cuobjdump -sass prints them: a second /* 0x... */ line)")
for x in path:
    x["op"] = opcode_of(x["text"])
    x["pipes"], x["occ"] = pipe_of(x["op"])
    x["lat"] = var_latency(x["op"])
if args.hist:
    counts = {}
    for x in path:
        counts[x["op"]] = counts.get(x["op"], 0) + 1
    print(", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])))
if args.list:
    for x in path:
        print(f"{x['addr']:6x} s{x['stall']:2d} w{x['wbar']} r{x['rbar']} m{x['wait']:06b} {'/'.join(x['pipes']) or '-':17s} "
              f"{x['text']}")


def simulate(nw, stagger):
    n = len(path)
    total = n * args.iters
    pc = [0] * nw                    # instructions issued so far per warp
    ready = [w * stagger for w in range(nw)]  # earliest cycle of the next issue (staggered start)
    sb = [[0.0] * 6 for _ in range(nw)]  # scoreboard release cycle per warp
    pipe_free = {}
    busy = {}
    cycle, issued, last = 0, 0, -1
    why = {}
    while min(pc) < total:
        order = list(range(nw))
        if args.policy == "lrr" and last >= 0:
            order = order[last + 1:] + order[:last + 1]
        elif args.policy == "gto" and last >= 0:
            order = [last] + [w for w in order if w != last]
        elif args.policy == "lockstep":
            order.sort(key=lambda w: pc[w])
        chosen = None
        for w in order:
            if pc[w] >= total or ready[w] > cycle:
                continue
            x = path[pc[w] % n]
            if any(x["wait"] >> b & 1 and sb[w][b] > cycle for b in range(6)):
                continue
            if x["pipes"] and all(pipe_free.get(p, 0) > cycle for p in x["pipes"]):
                continue
            chosen = w
            break
        if chosen is None:
            # why the warp issued from last (or the first) could not: its stall count, a
            # scoreboard, or a busy pipe (a warp with nothing left counts as none)
            w = last if last >= 0 and pc[last] < total else next(v for v in range(nw) if pc[v] < total)
            x = path[pc[w] % n]
            if ready[w] > cycle:
                why["stall"] = why.get("stall", 0) + 1
            elif any(x["wait"] >> b & 1 and sb[w][b] > cycle for b in range(6)):
                why["scoreboard"] = why.get("scoreboard", 0) + 1
            else:
                why["pipe " + x["pipes"][0]] = why.get("pipe " + x["pipes"][0], 0) + 1
            cycle += 1
            continue
        w = chosen
        x = path[pc[w] % n]
        if x["pipes"]:
            p = next(p for p in x["pipes"] if pipe_free.get(p, 0) <= cycle)
            pipe_free[p] = cycle + x["occ"]
            busy[p] = busy.get(p, 0) + x["occ"]
        if x["wbar"] < 6:
            sb[w][x["wbar"]] = max(sb[w][x["wbar"]], cycle + x["lat"])
        if x["rbar"] < 6:
            sb[w][x["rbar"]] = max(sb[w][x["rbar"]], cycle + READ_LAT)
        ready[w] = cycle + max(1, x["stall"])
        pc[w] += 1
        issued += 1
        last = w
        cycle += 1
    return cycle, issued, busy, why


print(f"{names[0][:90]}...: path of {len(path)} instructions, {args.steps:g} steps an iteration")
staggers = [int(v) for v in args.stagger.split(",")]
for nw in range(1, args.warps + 1):
    runs = [simulate(nw, st) for st in staggers]
    cycles = sum(r[0] for r in runs) / len(runs)
    issued = sum(r[1] for r in runs) / len(runs)
    busy, why = {}, {}
    for r in runs:
        for k, v in r[2].items():
            busy[k] = busy.get(k, 0) + v / len(runs)
        for k, v in r[3].items():
            why[k] = why.get(k, 0) + v / len(runs)
    steps = nw * args.iters * args.steps
    spread = (max(r[0] for r in runs) - min(r[0] for r in runs)) / steps
    pipes = ", ".join(f"{p} {100 * c / cycles:.0f} %" for p, c in sorted(busy.items()))
    idle = ", ".join(f"{k} {100 * v / cycles:.0f} %" for k, v in sorted(why.items()) if 100 * v / cycles >= 0.5)
    print(f"  {nw} warps: {cycles / steps:7.1f} cycles a step (spread {spread:.1f}), issue {100 * issued / cycles:5.1f} %; "
          f"pipes: {pipes}; no issue (the last warp's reason): {idle}")
