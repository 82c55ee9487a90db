#!/usr/bin/env python3
"""Throughput and latency of an OpenAI-compatible server under C concurrent streams.

What it measures
----------------
For each concurrency level C (``--clients 1,2,4,8``) it starts C client threads
together; each sends ``--requests-per-client`` streamed ``POST /v1/completions``
one after another, body::

    {"prompt": P, "max_tokens": N, "temperature": 0, "stream": true,
     "ignore_eos": true, "stream_options": {"include_usage": true}}

P is a distinct ~100-token Python skeleton per request: its index and a run id
(``--run-id``, default random) come first, so no two prompts, not even of two
runs, share a useful prefix. That matters: llama-server keeps each slot's last
prompt cached (``cache_prompt`` is on by default): measured with SmolLM2-135M
Q4_1, 2 threads, a repeated prompt had a TTFT of ~18 ms instead of ~400 ms.
(With that model's tokenizer a prompt is 104-113 tokens.) For every request it
records the send time, the arrival of the first chunk carrying non-empty text
(TTFT), the arrival of the last text chunk and the completion tokens. One row per
level (markdown):

- aggregate tok/s: all completion tokens of the level / the level's wall time
  (first send to last byte);
- stream tok/s: mean over requests of (tokens - 1) / (last text - first text),
  the decode rate one user sees once text flows;
- TTFT p50 / p95 in ms (over the level's completed requests);
- requests completed / failed.

``--arrival`` measures instead how long a newcomer waits while the server is busy:
idle TTFT first (one request alone, median of 3), then 3 clients (``--background``)
stream long requests (4 x ``--max-tokens``); once all of them have their first
token one normal request is sent and its TTFT is the loaded TTFT. Prints both and
loaded / idle. (A batching server admits the newcomer between decode steps; a
serial one makes it wait for the running requests.)

One warm-up request precedes the measurements. Times come from
``time.perf_counter()`` when a line is read off the socket (one connection per
request, ``http.client``, SSE parsed by hand: ``data:`` lines up to a blank line
form an event, ``:`` lines are keep-alives, ``data: [DONE]`` ends the stream).
Non-200 answers, ``{"error": ...}`` events, streams that end without ``[DONE]``
and socket errors count as failed requests (status and body printed to stderr);
nothing of that stops the run.

Counting tokens
---------------
Tokens come from ``usage.completion_tokens`` when the stream carries usage, else
from the number of chunks with non-empty text. Checked against both servers'
sources:

- Peregrine (backend/server/src/openai/{completions,stream,steps}.rs): one
  ``data:`` chunk per generated token whose text is non-empty; a token whose text
  is held back (part of a multi-byte character or of a possible stop string)
  sends no chunk, its text comes with a later one, so chunks <= tokens. The last
  chunk (``text: ""``, ``finish_reason``) has ``timings`` but no usage; usage is
  sent, in an extra chunk with ``choices: []``, only when
  ``stream_options.include_usage`` is true, which is why this script asks for it.
- llama.cpp llama-server (tools/server/server-context.cpp, server-task.cpp): one
  partial chunk per token (empty text while held back, the same way; the 200
  headers go out when the prompt starts, with no chunk), and a final chunk with
  ``text: ""`` that always carries ``usage``. Either way, TTFT waits for the first
  non-empty text, not for the headers or an empty chunk.

With plain ASCII output and no stop strings both send exactly one text chunk per
token; the table's ``chunks!=usage`` column counts requests where they differ.

Server settings that shape the figures: Peregrine decodes ``--max-batch``
requests together (default 4 on the fast CPU runtime, 1 where the runtime decodes
one at a time); the rest wait in a queue of ``--max-queue`` (16), beyond which it
answers 429; ``--max-per-client N`` (default 0 = no limit) would 429 the excess
here, since all threads share 127.0.0.1. llama-server decodes at most
``--parallel`` sequences at once (its context is split between them).

usage: concurrent_streams.py --url http://127.0.0.1:PORT [--clients 1,2,4,8]
       [--requests-per-client 3] [--max-tokens 128] [--label NAME]
       [--json out.json] [--arrival] [--run-id N] [--model M] [--timeout S]
Python 3 standard library only.
"""

import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse

PROMPT_TEMPLATE = """# Module {i}, run {run}: inventory tools
import json
from dataclasses import dataclass

@dataclass
class Item:
    name: str
    quantity: int

def load_items_{i}(path: str) -> list[Item]:
    \"\"\"Read the items of warehouse {i} from a JSON file.\"\"\"
    with open(path) as f:
        raw = json.load(f)
    items = []
    for entry in raw:
"""


RUN_ID = 0  # set in main(): makes the prompts differ from one run to the next


def make_prompt(i):
    """A distinct ~100-token code prompt for request number ``i`` of this run."""
    return PROMPT_TEMPLATE.format(i=i, run=RUN_ID)


class Counter:
    """Hands out request numbers (so every prompt differs) across threads."""

    def __init__(self, start=0):
        self._n = start
        self._lock = threading.Lock()

    def next(self):
        with self._lock:
            self._n += 1
            return self._n


def percentile(values, p):
    """Linear-interpolated percentile (p in 0..100); None for no values."""
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class Target:
    """Where requests go: scheme, host, port and the completions path."""

    def __init__(self, url, timeout, model=None):
        u = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        if u.scheme not in ("http", "https"):
            raise SystemExit("--url must be http:// or https://")
        self.scheme = u.scheme
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.path = u.path.rstrip("/") + "/v1/completions"
        self.timeout = timeout
        self.model = model

    def connect(self):
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout)


def chunk_text(obj):
    """The text a chunk carries (completions ``text`` or chat ``delta.content``)."""
    choices = obj.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    c = choices[0]
    t = c.get("text")
    if t is None:
        t = (c.get("delta") or {}).get("content")
    return t if isinstance(t, str) else ""


def stream_request(target, prompt, max_tokens, on_first=None):
    """Sends one streamed completion; returns a record (never raises).

    ``on_first`` is called (no arguments) when the first text chunk arrives.
    """
    body = {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    if target.model:
        body["model"] = target.model
    rec = {
        "ok": False, "status": None, "error": None, "max_tokens": max_tokens,
        "t_send": None, "t_first": None, "t_last": None, "t_end": None,
        "text_chunks": 0, "usage_tokens": None, "tokens": 0, "chars": 0,
    }
    conn = None
    try:
        conn = target.connect()
        data = json.dumps(body).encode()
        rec["t_send"] = time.perf_counter()
        conn.request("POST", target.path, body=data, headers={
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
        })
        resp = conn.getresponse()
        rec["status"] = resp.status
        if resp.status != 200:
            text = resp.read().decode("utf-8", "replace")
            rec["error"] = f"HTTP {resp.status}: {text.strip()[:500]}"
            return rec
        done = False
        data_lines = []

        def dispatch(payload):
            nonlocal done
            if payload.strip() == "[DONE]":
                done = True
                return
            try:
                obj = json.loads(payload)
            except ValueError:
                rec["error"] = f"bad JSON in stream: {payload[:200]!r}"
                return
            if not isinstance(obj, dict):
                return
            if obj.get("error") is not None:
                rec["error"] = "error event: " + json.dumps(obj["error"])[:500]
                return
            usage = obj.get("usage")
            if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                rec["usage_tokens"] = usage["completion_tokens"]
            text = chunk_text(obj)
            if text:
                now = time.perf_counter()
                if rec["t_first"] is None:
                    rec["t_first"] = now
                    if on_first is not None:
                        on_first()
                rec["t_last"] = now
                rec["text_chunks"] += 1
                rec["chars"] += len(text)

        while not done and rec["error"] is None:
            raw = resp.readline()
            if not raw:
                break  # connection closed
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line == "":
                if data_lines:
                    dispatch("\n".join(data_lines))
                    data_lines = []
                continue
            if line.startswith(":"):
                continue  # keep-alive comment
            field, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if field == "data":
                data_lines.append(value)
                if value.strip() == "[DONE]":
                    dispatch(value)  # some servers omit the blank line after it
                    data_lines = []
        if data_lines and not done and rec["error"] is None:
            dispatch("\n".join(data_lines))
        rec["t_end"] = time.perf_counter()
        if rec["error"] is None and not done:
            rec["error"] = "stream ended without data: [DONE]"
        if rec["error"] is None and rec["t_first"] is None:
            rec["error"] = "stream carried no text"
        rec["ok"] = rec["error"] is None
    except Exception as e:  # socket errors, timeouts, anything: a failed request
        rec["error"] = f"{type(e).__name__}: {e}"
    finally:
        if rec["t_end"] is None:
            rec["t_end"] = time.perf_counter()
        rec["tokens"] = rec["usage_tokens"] if rec["usage_tokens"] is not None else rec["text_chunks"]
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass
    return rec


def derived(rec):
    """TTFT (ms) and the stream's decode rate (tok/s, None under 2 tokens)."""
    ttft = (rec["t_first"] - rec["t_send"]) * 1000 if rec["t_first"] is not None else None
    tps = None
    if rec["tokens"] > 1 and rec["t_last"] is not None and rec["t_last"] > rec["t_first"]:
        tps = (rec["tokens"] - 1) / (rec["t_last"] - rec["t_first"])
    return ttft, tps


def report_failure(rec, where):
    print(f"[{where}] request failed: status={rec['status']} {rec['error']}", file=sys.stderr, flush=True)


def run_level(target, clients, per_client, max_tokens, counter):
    """C clients, ``per_client`` requests each, started together."""
    records = [[] for _ in range(clients)]
    barrier = threading.Barrier(clients + 1)

    def client(k):
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return
        for _ in range(per_client):
            try:
                rec = stream_request(target, make_prompt(counter.next()), max_tokens)
            except Exception as e:  # stream_request does not raise; belt and braces
                rec = {"ok": False, "status": None, "error": repr(e), "tokens": 0}
            records[k].append(rec)
            if not rec["ok"]:
                report_failure(rec, f"clients={clients} client={k}")

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    flat = [r for rs in records for r in rs]
    ok = [r for r in flat if r["ok"]]
    ttfts, rates = [], []
    for r in ok:
        ttft, tps = derived(r)
        ttfts.append(ttft)
        if tps is not None:
            rates.append(tps)
    tokens = sum(r["tokens"] for r in ok)
    mismatch = sum(1 for r in ok if r["usage_tokens"] is not None and r["usage_tokens"] != r["text_chunks"])
    return {
        "clients": clients,
        "wall_s": wall,
        "completion_tokens": tokens,
        "aggregate_tps": tokens / wall if wall > 0 else None,
        "mean_stream_tps": statistics.fmean(rates) if rates else None,
        "ttft_p50_ms": percentile(ttfts, 50),
        "ttft_p95_ms": percentile(ttfts, 95),
        "completed": len(ok),
        "failed": len(flat) - len(ok),
        "usage_reported": sum(1 for r in ok if r["usage_tokens"] is not None),
        "chunks_ne_usage": mismatch,
        "requests": flat,
    }


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def level_row(label, lv):
    return (f"| {label} | {lv['clients']} | {fmt(lv['aggregate_tps'])} | {fmt(lv['mean_stream_tps'])} | "
            f"{fmt(lv['ttft_p50_ms'], 0)} | {fmt(lv['ttft_p95_ms'], 0)} | {lv['completed']}/{lv['failed']} | "
            f"{lv['chunks_ne_usage']} |")


LEVEL_HEADER = ("| server | clients | aggregate tok/s | stream tok/s | TTFT p50 ms | TTFT p95 ms | ok/failed | chunks!=usage |\n"
                "|---|---:|---:|---:|---:|---:|---:|---:|")


def run_arrival(target, max_tokens, background, counter):
    """Idle TTFT (median of 3), then the TTFT of a request arriving while
    ``background`` long streams decode."""
    idle = []
    idle_recs = []
    for _ in range(3):
        rec = stream_request(target, make_prompt(counter.next()), max_tokens)
        idle_recs.append(rec)
        if rec["ok"]:
            idle.append(derived(rec)[0])
        else:
            report_failure(rec, "arrival idle")
    idle_ttft = statistics.median(idle) if idle else None

    firsts = [threading.Event() for _ in range(background)]
    bg_recs = [None] * background

    def bg(k):
        rec = stream_request(target, make_prompt(counter.next()), 4 * max_tokens, on_first=firsts[k].set)
        bg_recs[k] = rec
        firsts[k].set()  # also on failure, so the wait below ends
        if not rec["ok"]:
            report_failure(rec, f"arrival background {k}")

    threads = [threading.Thread(target=bg, args=(k,), daemon=True) for k in range(background)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    deadline = t0 + target.timeout
    for ev in firsts:
        ev.wait(max(0.0, deadline - time.perf_counter()))
    all_started = all(ev.is_set() for ev in firsts)
    wait_s = time.perf_counter() - t0
    probe = stream_request(target, make_prompt(counter.next()), max_tokens)
    if not probe["ok"]:
        report_failure(probe, "arrival probe")
    for t in threads:
        t.join()
    loaded_ttft = derived(probe)[0] if probe["ok"] else None
    # Were the background streams still running when the probe got its first text?
    overlap = None
    if probe["ok"]:
        overlap = sum(1 for r in bg_recs if r and r["ok"] and r["t_last"] is not None and r["t_last"] > probe["t_first"])
    return {
        "idle_ttft_ms": idle_ttft,
        "idle_ttft_samples_ms": idle,
        "loaded_ttft_ms": loaded_ttft,
        "ratio": loaded_ttft / idle_ttft if loaded_ttft and idle_ttft else None,
        "background": background,
        "background_max_tokens": 4 * max_tokens,
        "background_all_started": all_started,
        "background_start_wait_s": wait_s,
        "background_still_streaming_at_probe_first_token": overlap,
        "probe_stream_tps": derived(probe)[1] if probe["ok"] else None,
        "background_failed": sum(1 for r in bg_recs if not (r and r["ok"])),
        "requests": {"idle": idle_recs, "background": bg_recs, "probe": probe},
    }


def parse_clients(s):
    try:
        out = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad --clients {s!r}: want e.g. 1,2,4,8")
    if not out or any(c < 1 for c in out):
        raise argparse.ArgumentTypeError(f"bad --clients {s!r}: want positive integers")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--clients", type=parse_clients, default=[1, 2, 4, 8], help="concurrency levels (default 1,2,4,8)")
    ap.add_argument("--requests-per-client", type=int, default=3, help="sequential requests per client (default 3)")
    ap.add_argument("--max-tokens", type=int, default=128, help="completion tokens per request (default 128)")
    ap.add_argument("--label", default="server", help="name in the table's first column")
    ap.add_argument("--json", help="also write every figure and per-request record here")
    ap.add_argument("--arrival", action="store_true",
                    help="measure idle vs loaded TTFT instead of the concurrency table")
    ap.add_argument("--background", type=int, default=3, help="long streams running in --arrival (default 3)")
    ap.add_argument("--model", help="send this as the request's model field")
    ap.add_argument("--timeout", type=float, default=600, help="socket timeout per request in s (default 600)")
    ap.add_argument("--run-id", type=int, help="put into every prompt (default random; fix it to repeat a run's prompts)")
    args = ap.parse_args(argv)

    global RUN_ID
    RUN_ID = args.run_id if args.run_id is not None else random.randrange(10**6)

    target = Target(args.url, args.timeout, args.model)
    counter = Counter()
    result = {"label": args.label, "url": args.url, "max_tokens": args.max_tokens,
              "requests_per_client": args.requests_per_client, "run_id": RUN_ID,
              "started_unix": time.time()}

    warm = stream_request(target, make_prompt(0), args.max_tokens)
    if warm["ok"]:
        ttft, tps = derived(warm)
        print(f"warm-up: {warm['tokens']} tokens ({warm['text_chunks']} text chunks, usage "
              f"{warm['usage_tokens']}), TTFT {fmt(ttft, 0)} ms, {fmt(tps)} tok/s", file=sys.stderr, flush=True)
    else:
        report_failure(warm, "warm-up")
    result["warmup"] = warm

    if args.arrival:
        a = run_arrival(target, args.max_tokens, args.background, counter)
        result["arrival"] = a
        print(f"## {args.label}: TTFT on arrival (max_tokens {args.max_tokens}, "
              f"{a['background']} background streams of {a['background_max_tokens']})")
        print(f"idle TTFT (median of 3): {fmt(a['idle_ttft_ms'], 0)} ms "
              f"[{', '.join(fmt(x, 0) for x in a['idle_ttft_samples_ms'])}]")
        print(f"loaded TTFT: {fmt(a['loaded_ttft_ms'], 0)} ms")
        print(f"loaded / idle: {fmt(a['ratio'], 2)}")
        note = []
        if not a["background_all_started"]:
            note.append("not every background stream got its first token in time")
        if a["background_failed"]:
            note.append(f"{a['background_failed']} background request(s) failed")
        if a["background_still_streaming_at_probe_first_token"] is not None:
            note.append(f"{a['background_still_streaming_at_probe_first_token']}/{a['background']} background "
                        "streams still decoding at the probe's first token")
        if note:
            print("(" + "; ".join(note) + ")")
    else:
        print(f"## {args.label}: {args.requests_per_client} request(s) per client, max_tokens {args.max_tokens}")
        print(LEVEL_HEADER, flush=True)
        result["levels"] = []
        for c in args.clients:
            lv = run_level(target, c, args.requests_per_client, args.max_tokens, counter)
            result["levels"].append(lv)
            print(level_row(args.label, lv), flush=True)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
