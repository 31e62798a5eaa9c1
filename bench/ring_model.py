#!/usr/bin/env python3
"""The decode records kernel's ring schedule (include/kvq/decode/records_kernel.cuh, v14) as a
model: per warp, the order of its cp.async groups (a step's key part K(s) or value part V(s)),
its waits (cp.async.wait_group N) and its reads, for ring shapes (U tiles a macro-iteration, W a
step) and step counts. Checks that every read finds its own step's data in its slot and its group
complete, and that no copy overwrites a part still to be read. Run it after changing the loop's
issue / wait order: python3 bench/ring_model.py"""
def check(U, W, nsteps):
    SPM = U // W
    groups = []           # list of (part, step, slot) per committed group
    content = {}          # (part, slot) -> step of the last issue
    pending_reads = {}    # (part, slot) -> step still to be read
    done_upto = -1        # groups [0, done_upto] complete
    log = []
    def step_at(mm, t): return mm * SPM + t // W
    def slot_of(step): return (step % SPM) * W  # first slot of the step's W tiles
    def issue(part, step):
        slot = slot_of(step)
        key = (part, slot)
        if key in pending_reads and pending_reads[key] is not None and pending_reads[key] != step:
            raise AssertionError(f"U{U} W{W} n{nsteps}: issue {part}{step} into slot {slot} while step {pending_reads[key]} unread")
        content[key] = step
        groups.append((part, step, slot))
        if step < nsteps: pending_reads[key] = step
    def wait(n):
        nonlocal done_upto
        done_upto = max(done_upto, len(groups) - 1 - n)
    def read(part, step):
        slot = slot_of(step); key = (part, slot)
        assert content.get(key) == step, f"U{U} W{W} n{nsteps}: read {part}{step} finds {content.get(key)}"
        gi = max(i for i, g in enumerate(groups) if g[0] == part and g[1] == step)
        assert gi <= done_upto, f"U{U} W{W} n{nsteps}: read {part}{step} before its group completed"
        pending_reads[key] = None
    # issue_ahead at position (mm, t): step (mm*SPM + t/W) + SPM - 1
    def ahead(part, mm, t): issue(part, step_at(mm, t) + SPM - 1)
    if nsteps > 0:
        for t in range(0, U - W, W):
            issue('K', t // W); issue('V', t // W)
    niter = (nsteps + SPM) // SPM if nsteps > 0 else 0
    if nsteps > 0:
        ahead('K', 0, 0); wait(2 * (SPM - 1)); read('K', 0); ahead('V', 0, 0)
    for mm in range(niter):
        for t in range(0, U, W):
            k = step_at(mm, t)
            if 1 <= k <= nsteps:
                ahead('K', mm, t); wait(2 * (SPM - 1))
                read('V', k - 1)
                if k < nsteps: read('K', k)
                ahead('V', mm, t)
    wait(0)
    for key, s in pending_reads.items():
        assert s is None, f"U{U} W{W} n{nsteps}: step {s} part {key} never read"
    return True
for U, W in ((4, 2), (2, 1), (4, 1)):
    for n in range(0, 40):
        check(U, W, n)
print("ring model: all cases pass")
