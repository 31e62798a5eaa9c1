"""A cuobjdump -sass listing read into functions, for bench/sass_loops.py and bench/sass_sim.py.

Each instruction is a dict: addr, text (without the trailing `;`) and, where the listing carries
the instruction's second 64-bit word (cuobjdump -sass prints both), its control fields: stall (the
cycles before the warp's next instruction), wbar / rbar (the scoreboard it sets for its result /
for reading its sources, 7 = none) and wait (the mask of scoreboards it waits on)."""
import re


def read_functions(path):
    """{function name: [instruction, ...]} in listing order."""
    functions, current, last = {}, None, None
    for line in open(path):
        m = re.search(r"Function : (\S+)", line)
        if m:
            current, last = m.group(1), None
            functions[current] = []
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if current and m:
            last = dict(addr=int(m.group(1), 16), text=m.group(2).strip())
            functions[current].append(last)
            continue
        m = re.match(r"\s*/\* (0x[0-9a-f]+) \*/\s*$", line)
        if current and last is not None and m and "stall" not in last:
            c = int(m.group(1), 16) >> 41  # the control bits: the top 23 of the 128-bit instruction
            last.update(stall=c & 15, wbar=(c >> 5) & 7, rbar=(c >> 8) & 7, wait=(c >> 11) & 63)
    return functions


def opcode(text):
    """The opcode of an instruction's text, without its predicate."""
    return re.sub(r"^@!?U?P\w+\s+", "", text).split(" ")[0]


def branch_target(text):
    """The target address of a BRA (BRA.DIV included; is_jump tells them apart), else None."""
    m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)\s*$", text)
    return int(m.group(1), 16) if m else None


def is_jump(text):
    """A branch the warp can take: BRA, not BRA.DIV (the divergence handler's test)."""
    op = opcode(text)
    return op.startswith("BRA") and not op.startswith("BRA.DIV")
