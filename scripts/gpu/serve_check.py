#!/usr/bin/env python3
"""A running `peregrine serve` answered over HTTP: a streamed /api/generate and a streamed
/v1/completions, each checked for its framing and its decode speed printed from `timings`.
Usage: serve_check.py PORT LABEL (stdlib only: the GPU host has no extra packages)."""
import json
import sys
import urllib.request

port, label = int(sys.argv[1]), sys.argv[2]
base = f"http://127.0.0.1:{port}"


def post(path, body):
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"content-type": "application/json"})
    return urllib.request.urlopen(req, timeout=120)


def sse_data(resp):
    """The `data:` payloads of an event stream, in order."""
    for raw in resp:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("data:"):
            yield line[5:].strip()


failures = []
# The playground stream: started, tokens, exactly one done carrying timings.
events = [json.loads(d) for d in sse_data(post("/api/generate", {"prompt": "def quicksort(arr):", "max_tokens": 256, "ignore_eos": True, "temperature": 0}))]
kinds = [e["type"] for e in events]
done = [e for e in events if e["type"] == "done"]
text = "".join(e["text"] for e in events if e["type"] == "token")
if kinds[0] not in ("queued", "started") or len(done) != 1 or kinds[-1] != "done":
    failures.append(f"/api/generate framing: {kinds[:3]}…{kinds[-2:]}")
else:
    t = done[0]["timings"]
    print(f"{label} /api/generate: {t['predicted_n']} tokens, decode {t['predicted_per_second']:.0f} tok/s, ttft {t['ttft_ms']:.1f} ms | {text[:50]!r}")
    if t["predicted_n"] != 256:
        failures.append(f"/api/generate gave {t['predicted_n']} tokens, asked 256")

# The OpenAI stream: chunks of text, the usage chunk with timings, then [DONE].
model = json.load(urllib.request.urlopen(base + "/v1/models"))["data"][0]["id"]
body = {"model": model, "prompt": "fn main() {", "max_tokens": 256, "temperature": 0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
payloads = list(sse_data(post("/v1/completions", body)))
if payloads[-1] != "[DONE]":
    failures.append("/v1/completions stream does not end with [DONE]")
else:
    chunks = [json.loads(p) for p in payloads[:-1]]
    last = chunks[-1]
    text = "".join(c["choices"][0]["text"] for c in chunks if c.get("choices"))
    t = last.get("timings")
    if not t or last.get("usage", {}).get("completion_tokens") != 256:
        failures.append(f"/v1/completions last chunk: {json.dumps(last)[:200]}")
    else:
        print(f"{label} /v1/completions: {last['usage']['completion_tokens']} tokens, decode {t['predicted_per_second']:.0f} tok/s, ttft {t['ttft_ms']:.1f} ms | {text[:50]!r}")

for f in failures:
    print(f"{label} FAILED: {f}")
sys.exit(1 if failures else 0)
