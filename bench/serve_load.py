#!/usr/bin/env python3
"""Load generator for examples/serve's kvq_serve (Python stdlib only; loopback only).

N concurrent clients (default 96) replay a fixed mix of long prompts as streamed /v1/completions
with a fixed number of output tokens (ignore_eos), bounded by a request count and a wall-clock
limit. Reports output tokens/s, time to first token (TTFT) and inter-token latency (ITL) p50/p99,
and appends one row to a CSV (bench/results/serving.csv by default).

Prompts are token-id arrays drawn from a seeded RNG (lengths from --prompt-lens, cycled), so every
format sees exactly the same requests; the model reads them as noise, which does not matter for
the timings. Token counts are exact: the server returns the token ids of every chunk.

Correctness under load (--check): one fixed-seed request (temperature 0.8) is sent alone before
the load and again while the clients are running; the row records whether the two outputs are
identical and, if not, where they first differ.

  python3 bench/serve_load.py --url http://127.0.0.1:8000 --format int2 --gpu "$(nvidia-smi ...)" \
      --commit "$(git rev-parse --short HEAD)" --concurrency 96 --requests 384 --duration 90
"""
import argparse
import csv
import datetime
import http.client
import json
import os
import random
import sys
import threading
import time
import urllib.parse

COLUMNS = ["gpu", "commit", "date", "format", "concurrency", "requests", "completed", "errors", "prompt_tokens_mean",
           "max_tokens", "duration_s", "output_tok_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms",
           "check_identical", "check_first_diff", "server"]


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def stream_request(host, port, body, timeout):
    """Sends one streamed completion; returns (token ids, [(arrival time, tokens in chunk)], t_sent, error)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.perf_counter()
    arrivals, ids = [], []
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            return ids, arrivals, t0, "HTTP %d: %s" % (resp.status, resp.read()[:200].decode(errors="replace"))
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            payload = line[6:]
            if payload == "[DONE]":
                break
            ev = json.loads(payload)
            if "error" in ev:
                return ids, arrivals, t0, ev["error"]["message"]
            if not ev["choices"]:
                continue
            toks = ev["choices"][0].get("token_ids", [])
            if toks:
                arrivals.append((time.perf_counter(), len(toks)))
                ids.extend(toks)
        return ids, arrivals, t0, None
    except Exception as e:  # noqa: BLE001 - reported as an error row, the load goes on
        return ids, arrivals, t0, repr(e)
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--format", required=True, help="the server's KV format (recorded; checked against /health)")
    ap.add_argument("--gpu", default="cpu")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--concurrency", type=int, default=96)
    ap.add_argument("--requests", type=int, default=384, help="requests in all (bounded)")
    ap.add_argument("--duration", type=float, default=120.0, help="seconds at most; clients stop starting requests after it")
    ap.add_argument("--prompt-lens", default="1024,2048,3072,4096", help="prompt lengths in tokens, cycled")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", action="store_true", help="correctness under load (see above)")
    ap.add_argument("--csv", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "serving.csv"))
    ap.add_argument("--server", default="", help="server arguments, recorded in the row")
    ap.add_argument("--timeout", type=float, default=600.0, help="per-request socket timeout")
    a = ap.parse_args()

    u = urllib.parse.urlparse(a.url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("serve_load.py: loopback only (got %s)" % u.hostname)
    host, port = u.hostname, u.port or 80
    if a.concurrency < 1 or a.requests < 1 or a.duration <= 0:
        sys.exit("serve_load.py: concurrency, requests and duration must be positive")

    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("GET", "/health")
    health = json.loads(conn.getresponse().read())
    conn.close()
    if health.get("kv_format") != a.format:
        sys.exit("serve_load.py: the server runs format %r, not %r" % (health.get("kv_format"), a.format))

    rng = random.Random(a.seed)
    lens = [int(x) for x in a.prompt_lens.split(",")]
    prompts = [[rng.randrange(1000, a.vocab - 1000) for _ in range(lens[i % len(lens)])] for i in range(a.requests)]
    check_body = {"prompt": [rng.randrange(1000, a.vocab - 1000) for _ in range(600)], "max_tokens": 64, "temperature": 0.8,
                  "seed": 7, "ignore_eos": True, "stream": True, "return_token_ids": True}

    alone = None
    if a.check:
        alone, _, _, err = stream_request(host, port, check_body, a.timeout)
        if err:
            sys.exit("serve_load.py: check request failed: " + err)

    lock = threading.Lock()
    next_req = [0]
    ttft, itl, out_tokens, errors, completed = [], [], [0], [], [0]
    t_start = time.perf_counter()
    deadline = t_start + a.duration

    def client():
        while True:
            with lock:
                i = next_req[0]
                if i >= a.requests or time.perf_counter() > deadline:
                    return
                next_req[0] += 1
            body = {"prompt": prompts[i], "max_tokens": a.max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
                    "return_token_ids": True}
            ids, arrivals, t0, err = stream_request(host, port, body, a.timeout)
            with lock:
                if err:
                    errors.append(err)
                    continue
                completed[0] += 1
                out_tokens[0] += len(ids)
                if arrivals:
                    ttft.append(arrivals[0][0] - t0)
                    for (t_prev, _), (t, n) in zip(arrivals, arrivals[1:]):
                        itl.extend([(t - t_prev) / n] * n)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    under_load = None
    if a.check:
        time.sleep(min(5.0, a.duration / 4))  # the clients' requests are in the batch by now
        under_load, _, _, err = stream_request(host, port, check_body, a.timeout)
        if err:
            errors.append("check under load: " + err)
    for t in threads:
        t.join()
    wall = time.perf_counter() - t_start

    identical, first_diff = "", ""
    if a.check and under_load is not None:
        identical = "yes" if under_load == alone else "no"
        first_diff = next((i for i, (x, y) in enumerate(zip(alone, under_load)) if x != y), min(len(alone), len(under_load)))
        first_diff = "" if identical == "yes" else str(first_diff)
    started = min(next_req[0], a.requests)
    row = {
        "gpu": a.gpu, "commit": a.commit, "date": datetime.date.today().isoformat(), "format": a.format,
        "concurrency": a.concurrency, "requests": started, "completed": completed[0], "errors": len(errors),
        "prompt_tokens_mean": "%.0f" % (sum(len(p) for p in prompts[:started]) / max(1, started)),
        "max_tokens": a.max_tokens, "duration_s": "%.1f" % wall, "output_tok_s": "%.1f" % (out_tokens[0] / wall),
        "ttft_p50_ms": "%.1f" % (1e3 * percentile(ttft, 50)), "ttft_p99_ms": "%.1f" % (1e3 * percentile(ttft, 99)),
        "itl_p50_ms": "%.2f" % (1e3 * percentile(itl, 50)), "itl_p99_ms": "%.2f" % (1e3 * percentile(itl, 99)),
        "check_identical": identical, "check_first_diff": first_diff, "server": a.server,
    }
    print(json.dumps(row))
    for e in errors[:5]:
        print("error:", e, file=sys.stderr)
    os.makedirs(os.path.dirname(os.path.abspath(a.csv)), exist_ok=True)
    new = not os.path.exists(a.csv) or os.path.getsize(a.csv) == 0
    with open(a.csv, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        if new:
            w.writeheader()
        w.writerow(row)
    return 1 if completed[0] == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
