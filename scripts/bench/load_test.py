#!/usr/bin/env python3
"""Load test: C clients send R requests in all against a running server, as fast as answers come.

Each client thread sends non-streamed ``POST /v1/completions`` one after another
(``{"prompt": P, "max_tokens": N, "temperature": 0}``, a distinct short prompt per
request) until the shared count of R requests is used up; a refused request (429) is
counted, and the client waits as its ``Retry-After`` says (1 s without one) before its
next request, as a well-behaved client would. Prints one
markdown row: completed (200), refused (429, by reason from the server's
``peregrine_requests_rejected_total``), other answers, transport errors or timeouts
(a hung request shows here), completed tokens per second over the wall time,
latency p50 / p95 of the completed ones, and the server's peak RSS (``VmHWM`` of
``--pid``) before and after.

usage: load_test.py --url http://127.0.0.1:8080 --pid PID [--clients 64]
                    [--requests 1000] [--max-tokens 32] [--timeout 120] [--label TEXT]
Standard library only.
"""
import argparse
import http.client
import json
import re
import threading
import time
import urllib.parse


def peak_rss_mib(pid):
    """The process's peak resident set (VmHWM) in MiB, or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def rejected_by_reason(host, port):
    """peregrine_requests_rejected_total per reason, from /metrics."""
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for m in re.finditer(r'^peregrine_requests_rejected_total\{[^}]*reason="([^"]+)"[^}]*\} (\S+)$', text, re.M):
        out[m.group(1)] = int(float(m.group(2)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--pid", type=int, required=True, help="the server's process id (for its RSS)")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--label", default="server")
    args = ap.parse_args()
    url = urllib.parse.urlparse(args.url)
    host, port = url.hostname, url.port or 80

    lock = threading.Lock()
    next_index = [0]
    results = []  # (status or exception name, seconds, completion tokens)

    def take():
        with lock:
            if next_index[0] >= args.requests:
                return None
            next_index[0] += 1
            return next_index[0] - 1

    def client():
        while (i := take()) is not None:
            body = json.dumps({"prompt": f"# task {i}: a helper that returns the {i}th prime\ndef prime_{i}(", "max_tokens": args.max_tokens,
                               "temperature": 0})
            t0 = time.perf_counter()
            try:
                conn = http.client.HTTPConnection(host, port, timeout=args.timeout)
                conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                tokens = json.loads(data)["usage"]["completion_tokens"] if resp.status == 200 else 0
                outcome = resp.status
                retry = float(resp.getheader("Retry-After") or 1) if resp.status == 429 else 0.0
            except Exception as e:  # noqa: BLE001 - every transport failure is one outcome to count
                outcome, tokens, retry = type(e).__name__, 0, 0.0
            with lock:
                results.append((outcome, time.perf_counter() - t0, tokens))
            time.sleep(retry)

    before_rss = peak_rss_mib(args.pid)
    before_rej = rejected_by_reason(host, port)
    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    after_rej = rejected_by_reason(host, port)
    after_rss = peak_rss_mib(args.pid)

    ok = [r for r in results if r[0] == 200]
    refused = sum(1 for r in results if r[0] == 429)
    other = sum(1 for r in results if isinstance(r[0], int) and r[0] not in (200, 429))
    failed = sum(1 for r in results if not isinstance(r[0], int))
    lat = sorted(r[1] for r in ok)
    mib = lambda v: f"{v:.0f}" if v is not None else "?"  # noqa: E731
    pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")  # noqa: E731
    reasons = ", ".join(f"{k} {after_rej.get(k, 0) - before_rej.get(k, 0)}" for k in sorted(after_rej) if after_rej.get(k, 0) != before_rej.get(k, 0))
    print("| server | clients | requests | completed | refused (429) | other | errors / timeouts | tok/s | p50 ms | p95 ms | peak RSS MiB before → after |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    print(f"| {args.label} | {args.clients} | {len(results)} | {len(ok)} | {refused} ({reasons or 'none'}) | {other} | {failed} | "
          f"{sum(r[2] for r in ok) / wall:.1f} | {pct(0.5):.0f} | {pct(0.95):.0f} | {mib(before_rss)} → {mib(after_rss)} |")


if __name__ == "__main__":
    main()
