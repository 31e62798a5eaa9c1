#!/usr/bin/env python3
"""Markdown tables for docs/ACCURACY.md from a run_accuracy.sh output directory (accuracy.csv and
logs/): perplexity, passkey per length and depth, generation agreement, run times.
usage: accuracy_tables.py OUT_DIR"""
import csv
import re
import sys
from collections import defaultdict
from pathlib import Path

ORDER = ["none", "int8", "int4", "int2", "k4v2", "int2_r0"]


def main():
    out = Path(sys.argv[1])
    rows = list(csv.DictReader(open(out / "accuracy.csv")))
    by = defaultdict(list)
    for r in rows:
        by[(r["metric"], r["format"])].append(r)

    print("### Perplexity\n")
    late = {}
    for f in ORDER:
        log = out / "logs" / ("perplexity_%s.log" % f)
        if log.exists():
            m = re.search(r"position >= (\d+): ([\d.]+) over (\d+)", log.read_text())
            if m:
                late[f] = (m.group(1), float(m.group(2)), m.group(3))
    base = next((float(r["value"]) for r in by[("perplexity", "none")]), None)
    base_late = late.get("none", (0, None, 0))[1]
    print("| format | Gk | Gv | R | perplexity | vs none | tokens | ppl, tokens past the first R+P of a window | vs none |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for f in ORDER:
        for r in by[("perplexity", f)]:
            v = float(r["value"])
            l = late.get(f)
            print("| %s | %s | %s | %s | %.3f | %+.2f%% | %s | %s | %s |" % (
                f, r["gk"], r["gv"], r["residual"], v, 100 * (v / base - 1) if base else 0, r["n"],
                "%.3f" % l[1] if l else "-", "%+.2f%%" % (100 * (l[1] / base_late - 1)) if l and base_late else "-"))

    print("\n### Passkey retrieval (correct / trials)\n")
    cells = defaultdict(dict)
    depths, lengths = set(), set()
    for log in sorted((out / "logs").glob("passkey*.log")):
        for m in re.finditer(r"passkey_cell (\S+) length (\d+) depth ([\d.]+) correct (\d+) of (\d+)", log.read_text()):
            f, L, d, c, n = m.groups()
            c0, n0 = cells[f].get((int(L), d), (0, 0))  # several runs of a cell (other seeds) add up
            cells[f][(int(L), d)] = (c0 + int(c), n0 + int(n))
            depths.add(d)
            lengths.add(int(L))
    depths, lengths = sorted(depths), sorted(lengths)
    head = ["%d @%s" % (L, d) for L in lengths for d in depths]
    print("| format | " + " | ".join(head) + " | " + " | ".join("all %d" % L for L in lengths) + " |")
    print("| --- " * (1 + len(head) + len(lengths)) + "|")
    for f in ORDER:
        if f not in cells:
            continue
        vals = []
        for L in lengths:
            for d in depths:
                c = cells[f].get((L, d))
                vals.append("%d/%d" % c if c else "-")
        tot = []
        for L in lengths:
            cs = [cells[f][(L, d)] for d in depths if (L, d) in cells[f]]
            tot.append("%d/%d" % (sum(c for c, _ in cs), sum(n for _, n in cs)) if cs else "-")
        print("| %s | %s | %s |" % (f, " | ".join(vals), " | ".join(tot)))
    if "none" in cells:
        solvable = [k for k, (c, n) in cells["none"].items() if c > 0]
        print("\nOn the %d cells where \"none\" retrieves the key at least once (%s):\n" % (
            len(solvable), ", ".join("%d @%s" % k for k in sorted(solvable))))
        print("| format | correct / trials | on the other cells |")
        print("| --- | --- | --- |")
        for f in ORDER:
            if f in cells:
                a = [cells[f][k] for k in cells[f] if k in solvable]
                b = [cells[f][k] for k in cells[f] if k not in solvable]
                print("| %s | %d/%d | %d/%d |" % (f, sum(c for c, _ in a), sum(n for _, n in a),
                                                 sum(c for c, _ in b), sum(n for _, n in b)))

    print("\n### Greedy generation: tokens that agree with none before the first difference\n")
    agree = {f: by[("agree_tokens", f)] for f in ORDER if by[("agree_tokens", f)]}
    if agree:
        first = next(iter(agree.values()))
        print("| format | " + " | ".join("prompt %d (%s tokens)" % (i, r["context"]) for i, r in enumerate(first)) + " |")
        print("| --- " * (1 + len(first)) + "|")
        for f, rs in agree.items():
            print("| %s | %s |" % (f, " | ".join("%s / %s" % (r["value"], r["n"]) for r in rs)))

    times = out / "logs" / "times.txt"
    if times.exists():
        print("\n### Run times (one thread each, two processes at a time)\n")
        print("```\n" + times.read_text().strip() + "\n```")


if __name__ == "__main__":
    main()
