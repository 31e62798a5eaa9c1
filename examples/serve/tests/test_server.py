#!/usr/bin/env python3
"""kvq_serve over HTTP on the CPU backend (CTest serve_http_cpu, label model). Python stdlib only.

Starts the server on 127.0.0.1 (a free port it picks and prints), then:
  - /v1/models;
  - a non-streamed /v1/completions (greedy) and a streamed /v1/chat/completions (temperature 0.8,
    fixed seed): text and token ids must equal `kvq_serve generate`'s for the same request, usage too;
  - three identical requests at once: each equals the one run alone;
  - JSON errors: bad JSON, a field of the wrong type, a prompt longer than the maximum, an unknown
    model or route, too many concurrent requests (429; the streams then closed by the client);
  - SIGTERM with a stream in flight: the stream finishes, the server exits with status 0;
  - --max-seq-len beyond the model's trained context (8,192): a warning at start, the limit in
    /v1/models, a request of more than 8,192 tokens admitted (its stream then closed), more than the
    limit refused.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def post(base, path, body, raw=None, timeout=120):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def get(base, path):
    try:
        with urllib.request.urlopen(base + path, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def open_stream(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=120)


def read_events(resp, limit=None):
    """Server-sent events of a response: the JSON of each 'data:' line, then 'DONE' for [DONE]."""
    out = []
    for line in resp:
        line = line.decode().strip()
        if not line.startswith("data: "):
            continue
        payload = line[len("data: "):]
        out.append("DONE" if payload == "[DONE]" else json.loads(payload))
        if payload == "[DONE]" or (limit is not None and len(out) >= limit):
            break
    return out


def generate(server, model, prompt, extra):
    cmd = [server, "generate", "--model", model, "--max-batch", "4", "--prompt", prompt] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def long_context(server, model, env, prompt):
    """--max-seq-len 9000, beyond SmolLM2's trained context of 8,192 tokens: honoured, with a warning."""
    proc = subprocess.Popen([server, "serve", "--model", model, "--port", "0", "--max-batch", "1", "--kv-memory-mib", "256",
                             "--max-seq-len", "9000", "--shutdown-grace", "10"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        base = proc.stdout.readline().split("listening on ")[1].split()[0]
        st, models = get(base, "/v1/models")
        check(st == 200 and models["data"][0]["max_model_len"] == 9000, "--max-seq-len 9000: max_model_len 9000")
        body = {"prompt": prompt, "max_tokens": 8900, "temperature": 0, "ignore_eos": True, "stream": True}
        with open_stream(base, "/v1/completions", body) as resp:
            first = read_events(resp, limit=1)
        check(first and first[0] != "DONE" and "error" not in first[0] and first[0]["choices"],
              "a request of more than 8,192 tokens is admitted and streams (then closed)")
        st, r = post(base, "/v1/completions", {"prompt": prompt, "max_tokens": 9000})
        check(st == 400 and r["error"]["code"] == "context_length_exceeded", "more than 9000 tokens -> 400")
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        err = proc.stderr.read()
        check(rc == 0 and err.count("beyond the model's trained context of 8192") == 1 and "not guaranteed" in err,
              "--max-seq-len 9000: one warning line at start, exit status 0")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--model-path-file", required=True)
    a = ap.parse_args()
    model = os.environ.get("SMOLLM2_GGUF") or open(a.model_path_file).read().strip()
    env = dict(os.environ, KVQ_KV_FORMAT="int4")
    os.environ["KVQ_KV_FORMAT"] = "int4"

    p1 = "The three primary colors are"
    p2 = "Give me one word that rhymes with cat."
    ref1 = generate(a.server, model, p1, ["--max-tokens", "12", "--temperature", "0"])
    ref2 = generate(a.server, model, p2, ["--chat", "--max-tokens", "12", "--temperature", "0.8", "--seed", "123"])
    check(len(ref1["token_ids"]) == 12 or ref1["finish_reason"] == "stop", "generate: greedy completion ran")

    proc = subprocess.Popen([a.server, "serve", "--model", model, "--port", "0", "--max-batch", "4", "--max-concurrent", "3",
                             "--shutdown-grace", "60", "--max-seq-len", "512"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        check("listening on http://127.0.0.1:" in line, "server prints its address: " + line.strip())
        base = line.split("listening on ")[1].split()[0]

        st, models = get(base, "/v1/models")
        check(st == 200 and models["data"][0]["id"] == "SmolLM2-135M-Instruct.Q4_1", "/v1/models lists the model")

        st, r = post(base, "/v1/completions", {"prompt": p1, "max_tokens": 12, "temperature": 0, "return_token_ids": True})
        check(st == 200, "non-streamed completion: 200")
        c = r["choices"][0]
        check(c["text"] == ref1["text"] and c["token_ids"] == ref1["token_ids"],
              "non-streamed completion = generate (%r)" % c["text"])
        check(c["finish_reason"] == ref1["finish_reason"], "finish_reason " + c["finish_reason"])
        check(r["usage"] == {"prompt_tokens": ref1["prompt_tokens"], "completion_tokens": ref1["completion_tokens"],
                             "total_tokens": ref1["prompt_tokens"] + ref1["completion_tokens"]}, "usage counts")

        body2 = {"model": "SmolLM2-135M-Instruct.Q4_1", "messages": [{"role": "user", "content": p2}], "max_tokens": 12,
                 "temperature": 0.8, "seed": 123, "stream": True, "stream_options": {"include_usage": True},
                 "return_token_ids": True}
        with open_stream(base, "/v1/chat/completions", body2) as resp:
            check(resp.headers.get("Content-Type", "").startswith("text/event-stream"), "stream: text/event-stream")
            events = read_events(resp)
        check(events[-1] == "DONE", "stream ends with [DONE]")
        chunks = [e for e in events if e != "DONE" and e["choices"]]
        text = "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks)
        ids = [t for ch in chunks for t in ch["choices"][0].get("token_ids", [])]
        check(chunks[0]["choices"][0]["delta"].get("role") == "assistant", "stream: first delta has the role")
        check(len(chunks) >= 3, "stream: %d chunks" % len(chunks))
        check(text == ref2["text"] and ids == ref2["token_ids"], "streamed chat (seed 123) = generate --chat (%r)" % text)
        check(chunks[-1]["choices"][0]["finish_reason"] == ref2["finish_reason"], "stream: finish_reason on the last chunk")
        usage = [e for e in events if e != "DONE" and not e["choices"]]
        check(len(usage) == 1 and usage[0]["usage"]["completion_tokens"] == ref2["completion_tokens"], "stream: usage chunk")

        # Three identical requests at once (batched) = the one alone.
        results = [None] * 3

        def one(i):
            results[i] = post(base, "/v1/completions", {"prompt": p1, "max_tokens": 12, "temperature": 0, "return_token_ids": True})

        threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(all(r[0] == 200 and r[1]["choices"][0]["token_ids"] == ref1["token_ids"] for r in results),
              "3 concurrent requests = generate alone")

        # Errors: JSON bodies with a message, never a crash.
        st, r = post(base, "/v1/completions", None, raw=b"{not json")
        check(st == 400 and "not valid JSON" in r["error"]["message"], "bad JSON -> 400: " + r["error"]["message"][:60])
        st, r = post(base, "/v1/completions", {"prompt": p1, "max_tokens": "ten"})
        check(st == 400 and r["error"]["param"] == "max_tokens", "max_tokens as a string -> 400 param max_tokens")
        st, r = post(base, "/v1/chat/completions", {"messages": "hello"})
        check(st == 400 and r["error"]["param"] == "messages", "messages not an array -> 400")
        st, r = post(base, "/v1/completions", {"prompt": p1, "temperature": 7})
        check(st == 400 and r["error"]["param"] == "temperature", "temperature out of range -> 400")
        st, r = post(base, "/v1/completions", {"prompt": "word " * 600, "max_tokens": 4})
        check(st == 400 and r["error"]["code"] == "context_length_exceeded", "prompt longer than the maximum -> 400")
        st, r = post(base, "/v1/completions", {"prompt": p1, "model": "gpt-4"})
        check(st == 404 and r["error"]["code"] == "model_not_found", "unknown model -> 404")
        st, r = get(base, "/v1/nothing")
        check(st == 404 and "error" in r, "unknown route -> 404 JSON")

        # Too many concurrent requests: 3 long streams hold the 3 places, the 4th gets 429.
        long_body = {"prompt": p1, "max_tokens": 400, "temperature": 0, "ignore_eos": True, "stream": True}
        streams = [open_stream(base, "/v1/completions", long_body) for _ in range(3)]
        for s in streams:
            read_events(s, limit=1)
        st, r = post(base, "/v1/completions", {"prompt": p1, "max_tokens": 2})
        check(st == 429 and r["error"]["type"] == "rate_limit_error", "4th concurrent request -> 429")
        for s in streams:
            s.close()  # the client goes away: the server cancels those sequences
        deadline = time.time() + 60
        while time.time() < deadline:
            st, h = get(base, "/health")
            if h["running"] == 0 and h["waiting"] == 0:
                break
            time.sleep(0.2)
        check(h["running"] == 0, "closed streams leave the batch (running %d)" % h["running"])
        st, r = post(base, "/v1/completions", {"prompt": p1, "max_tokens": 12, "temperature": 0, "return_token_ids": True})
        check(st == 200 and r["choices"][0]["token_ids"] == ref1["token_ids"], "after the cancellations: same answer")

        # Graceful shutdown: SIGTERM while a stream is running; the stream still completes.
        with open_stream(base, "/v1/completions", {"prompt": p1, "max_tokens": 16, "temperature": 0, "ignore_eos": True,
                                                   "stream": True}) as resp:
            first = read_events(resp, limit=1)
            proc.send_signal(signal.SIGTERM)
            rest = read_events(resp)
        events = first + rest
        check(events[-1] == "DONE" and events[-2]["choices"][0]["finish_reason"] == "length",
              "SIGTERM: the in-flight stream finishes (finish_reason length)")
        rc = proc.wait(timeout=60)
        err = proc.stderr.read()
        check(rc == 0 and "SIGTERM" in err and "stopped" in err, "SIGTERM: exit status 0 (rc %d)" % rc)
        check("trained context" not in err, "--max-seq-len within the model's context: no warning")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    long_context(a.server, model, env, p1)
    if FAILURES:
        print("%d check(s) failed" % len(FAILURES))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
