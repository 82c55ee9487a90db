#!/usr/bin/env python3
"""TTFT of a conversation's second turn with and without prompt reuse (`cache_prompt`).

Against a running OpenAI-compatible server (Peregrine or llama-server): turn 1 is a
system prompt holding a ~2 KB Python file plus a question; turn 2 appends the answer
and a follow-up question. Each round sends turn 1, then turn 2 with
`cache_prompt: true`, then turn 1 again and turn 2 with `cache_prompt: false` (so
both second turns follow the same first turn); TTFT = request sent to the first
chunk with text, streamed, greedy. Prints medians and the cached-token count the
server reported (`usage.prompt_tokens_details.cached_tokens` or `timings.cache_n`).

usage: second_turn_ttft.py --url http://127.0.0.1:PORT [--rounds 5] [--max-tokens 32]
"""
import argparse
import http.client
import json
import statistics
import time
import urllib.parse

CODE = "\n".join(
    f"def step_{i}(state):\n    \"\"\"Advance the simulation by one tick ({i}).\"\"\"\n"
    f"    state['t'] += {i}\n    return state\n" for i in range(24))
SYSTEM = "You are a careful code reviewer. Here is the file under review:\n\n" + CODE


def chat(url, messages, cache_prompt, max_tokens):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "cache_prompt": cache_prompt, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise SystemExit(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    ttft, text, cached, prompt = None, "", None, None
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        for c in chunk.get("choices", []):
            piece = (c.get("delta") or {}).get("content") or ""
            if piece and ttft is None:
                ttft = (time.perf_counter() - t0) * 1000
            text += piece
        usage = chunk.get("usage") or {}
        if usage:
            prompt = usage.get("prompt_tokens")
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        timings = chunk.get("timings") or {}
        if cached is None and "cache_n" in timings:
            cached = timings["cache_n"]
    conn.close()
    return ttft, text, cached, prompt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What does step_3 do?"}]
    results = {True: [], False: []}
    info = {}
    for _ in range(args.rounds):
        for reuse in (True, False):
            _, answer, _, _ = chat(args.url, first, True, args.max_tokens)
            second = first + [{"role": "assistant", "content": answer},
                              {"role": "user", "content": "And how would you test it?"}]
            ttft, _, cached, prompt = chat(args.url, second, reuse, args.max_tokens)
            results[reuse].append(ttft)
            info[reuse] = (cached, prompt)
    for reuse in (True, False):
        cached, prompt = info[reuse]
        print(f"cache_prompt={str(reuse).lower():5}: second-turn TTFT median {statistics.median(results[reuse]):.0f} ms "
              f"(runs {', '.join(f'{t:.0f}' for t in results[reuse])}), prompt {prompt} tokens, cached {cached}")


if __name__ == "__main__":
    main()
