#!/usr/bin/env python3
"""Markdown tables of an ablation run (docs/ACCURACY.md "Why INT2 loses the needle"): perplexity
per (format, variant) against "none", and passkey retrieval scored on the cells "none" solves.
usage: ablation_table.py PERPLEXITY_CSV|- [PASSKEY_LOG_DIR]
PASSKEY_LOG_DIR holds smollm2 passkey logs (lines 'passkey_cell FORMAT length L depth D correct C of N');
a log's file name, less a trailing _LENGTH and a leading pk_, is taken as its variant label."""
import csv
import re
import sys
from collections import defaultdict
from pathlib import Path

# Code bits of K and V per format; INT-b groups add an fp16 scale and zero point (32 bits) per
# group of G elements, INT8 an fp32 scale per token and head (D = 64 here). Sinks add 16 bits for
# S tokens per sequence (not counted: 0.016 bits at 4 sinks over 4,096 tokens).
CODE_BITS = {"none": (16, 16), "int8": (8, 8), "int4": (4, 4), "int2": (2, 2), "k4v2": (4, 2), "k2v4": (2, 4), "k3v2": (3, 2)}
ORDER = list(CODE_BITS)


def bits(fmt, gk, gv, kb=None, vb=None):
    """kb / vb: a simulated side's code bits (--sim-k-bits / --sim-v-bits), else the format's."""
    kb, vb = kb or CODE_BITS.get(fmt, (0, 0))[0], vb or CODE_BITS.get(fmt, (0, 0))[1]
    if fmt in ("none",):
        return 16.0
    if fmt == "int8":
        return 8.0 + 32.0 / 64
    return (kb + 32.0 / gk + vb + 32.0 / gv) / 2


LAYERS = 30  # SmolLM2-135M


def mixed_bits(fmt, gk, gv, variant):
    """Bits per element averaged over the layers, for a variant with mix=FORMAT:LAYERS (--mix)
    and kbits= / vbits= (--sim-k-bits / --sim-v-bits)."""
    sim = {side: int(m.group(1)) for side in "kv" for m in [re.search(side + r"bits=([0-9])", variant or "")] if m}
    per_layer = [bits(fmt, gk, gv, sim.get("k"), sim.get("v"))] * LAYERS
    for m in re.finditer(r"mix=([a-z0-9]+):([0-9,\-]+)", variant or ""):
        for part in m.group(2).split(","):
            lo, _, hi = part.partition("-")
            for layer in range(int(lo), int(hi or lo) + 1):
                if layer < LAYERS:
                    per_layer[layer] = bits(m.group(1), gk, gv)
    return sum(per_layer) / LAYERS


def perplexity_table(path):
    rows = [r for r in csv.DictReader(open(path)) if r["metric"] == "perplexity"]
    none = next(float(r["value"]) for r in rows if r["format"] == "none" and r.get("variant", "base") == "base")
    out = ["| format | Gk / Gv | variant | bits / element | perplexity | vs none |", "| --- | --- | --- | --- | --- | --- |"]
    for r in sorted(rows, key=lambda r: (ORDER.index(r["format"]) if r["format"] in ORDER else 9, float(r["value"]))):
        v, gk, gv = float(r["value"]), int(r["gk"]), int(r["gv"])
        out.append("| %s | %s | %s | %.2f | %.3f | %+.2f%% |" % (r["format"], "%d / %d" % (gk, gv) if gk else "-",
                                                              r.get("variant", "base"),
                                                              mixed_bits(r["format"], gk, gv, r.get("variant")), v,
                                                              100 * (v / none - 1)))
    return "\n".join(out)


def passkey_table(log_dir):
    cells = defaultdict(dict)
    pat = re.compile(r"passkey_cell \S+ length (\d+) depth ([\d.]+) correct (\d+) of (\d+)")
    for log in sorted(Path(log_dir).glob("*.log")):
        label = re.sub(r"^pk_", "", re.sub(r"_\d+$", "", log.stem))
        for m in pat.finditer(log.read_text()):
            key = (int(m.group(1)), float(m.group(2)))
            c, n = cells[label].get(key, (0, 0))
            cells[label][key] = (c + int(m.group(3)), n + int(m.group(4)))
    base = "none" if "none" in cells else None
    keys = sorted(cells[base]) if base else sorted({k for c in cells.values() for k in c})
    solved = [k for k in keys if base and cells[base][k][0] * 2 > cells[base][k][1]]
    head = "| variant | " + " | ".join("%d @%.1f" % k for k in keys) + " | on the cells none solves |"
    out = [head, "|" + " --- |" * (len(keys) + 2)]
    for label, c in sorted(cells.items()):
        s = sum(c.get(k, (0, 0))[0] for k in solved)
        n = sum(c.get(k, (0, 0))[1] for k in solved)
        frac = "%d/%d (%.2f)" % (s, n, s / n) if n else "-"
        out.append("| %s | %s | %s |" % (label, " | ".join("%d/%d" % c.get(k, (0, 0)) for k in keys), frac))
    return "\n".join(out)


if __name__ == "__main__":
    if sys.argv[1] != "-":
        print(perplexity_table(sys.argv[1]))
    if len(sys.argv) > 2:
        print()
        print(passkey_table(sys.argv[2]))
