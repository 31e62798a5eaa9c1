"""What bench/sdpa_decode.py and bench/sdpa_prefill.py share: a flush buffer of 4x the L2 and the
median time of a call by CUDA events, the L2 flushed (the buffer rewritten) before each timed call."""
import statistics

import torch


def flush_buffer(dev):
    return torch.empty(int(4 * torch.cuda.get_device_properties(dev).L2_cache_size), dtype=torch.uint8, device=dev)


def median_us(fn, flush, reps, warmup=3):
    """Median of `reps` timed calls of fn, in microseconds, after `warmup` untimed ones (an error of
    fn, e.g. a backend that does not take the shape, propagates)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        flush.random_(0, 255)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)
