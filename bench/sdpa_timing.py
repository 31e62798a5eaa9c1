"""What bench/sdpa_decode.py and bench/sdpa_prefill.py share: a flush buffer of 4x the L2 and the
median time of a call by CUDA events, the L2 flushed (the buffer rewritten) before each timed call;
the run's gpu / commit / date / command stamp of their CSV rows. On the CPU (their --smoke test)
there is no flush buffer (None) and the time is the wall clock."""
import datetime
import os
import shlex
import statistics
import subprocess
import sys
import time

import torch


def flush_buffer(dev):
    if dev.type != "cuda":
        return None
    return torch.empty(int(4 * torch.cuda.get_device_properties(dev).L2_cache_size), dtype=torch.uint8, device=dev)


def median_us(fn, flush, reps, warmup=3):
    """Median of `reps` timed calls of fn, in microseconds, after `warmup` untimed ones (an error of
    fn, e.g. a backend that does not take the shape, propagates)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if flush is None:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
            continue
        flush.random_(0, 255)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def stamp(dev, commit):
    """gpu, commit, date (UTC) and command of this run's CSV rows. commit: --commit, else
    $KVQ_COMMIT, else `git rev-parse --short HEAD` where the tree is a checkout, else ""."""
    if not commit:
        commit = os.environ.get("KVQ_COMMIT", "")
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=os.path.dirname(os.path.abspath(__file__)), check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            commit = ""
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    command = shlex.join(["python3", "bench/" + os.path.basename(sys.argv[0])] + sys.argv[1:])
    return gpu, commit, date, command
