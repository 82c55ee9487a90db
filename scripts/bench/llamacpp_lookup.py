#!/usr/bin/env python3
"""llama.cpp's prompt-lookup decoding on the speculative workload, beside our
`examples/speculative` bench: llama-cpp-python's `LlamaPromptLookupDecoding` as the draft
model against plain decoding, greedy, same GGUF, same threads, same prompts
(backend/bench/workloads/speculative.json: completions as raw text, chat prompts under the
model's own chat template).

Decode tok/s of a run = (generated tokens - 1) / (time of the last token - time of the
first), so prompt processing is left out as in our bench; each prompt runs plain and with
lookup alternately, the fastest of RUNS kept; per class, tokens over decode time.

Needs llama-cpp-python 0.3.36 (docs/benchmarks.md, "Machines"), e.g. /tmp/llama-venv/bin/python.

usage: llamacpp_lookup.py [--model M] [--threads 2] [--max-tokens 128] [--runs 3] [--draft 2]
"""
import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

WORKLOAD = Path(__file__).resolve().parents[2] / "backend/bench/workloads/speculative.json"


def run_once(llm, prompt, max_tokens):
    """(generated tokens, decode seconds, text) of one greedy run from an empty cache."""
    llm.reset()
    if "chat" in prompt:
        stream = llm.create_chat_completion(messages=[{"role": "user", "content": prompt["chat"]}], temperature=0.0,
                                            max_tokens=max_tokens, stream=True)
        piece = lambda c: c["choices"][0]["delta"].get("content") or ""
    else:
        stream = llm.create_completion(prompt["prompt"], temperature=0.0, max_tokens=max_tokens, stream=True)
        piece = lambda c: c["choices"][0]["text"]
    first = last = None
    text = []
    for chunk in stream:
        now = time.perf_counter()
        if piece(chunk):
            first = first or now
            last = now
            text.append(piece(chunk))
    out = "".join(text)
    # Tokens generated, as the model's tokenizer splits the text (the stream's chunks
    # merge tokens that end inside a UTF-8 character).
    generated = len(llm.tokenize(out.encode(), add_bos=False, special=True))
    return generated, (last - first) if first else 0.0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.environ.get("PEREGRINE_DEFAULT_MODEL",
                                                      os.path.expanduser("~/.cache/peregrine/models/SmolLM2-135M-Instruct.Q4_1.gguf")))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--draft", type=int, default=2, help="num_pred_tokens (llama-cpp-python advises 2 on CPUs)")
    args = ap.parse_args()
    prompts = json.loads(WORKLOAD.read_text())["prompts"]
    common = dict(model_path=args.model, n_ctx=2048, n_threads=args.threads, n_threads_batch=args.threads, verbose=False)
    plain = Llama(**common)
    lookup = Llama(**common, draft_model=LlamaPromptLookupDecoding(num_pred_tokens=args.draft))
    totals = defaultdict(lambda: [0, 0.0, 0, 0.0])
    for p in prompts:
        best = {}
        texts = {}
        for _ in range(args.runs):
            for mode, llm in (("plain", plain), ("lookup", lookup)):
                n, secs, text = run_once(llm, p, args.max_tokens)
                texts[mode] = text
                if secs > 0 and (mode not in best or n / secs > best[mode][0] / best[mode][1]):
                    best[mode] = (n - 1, secs)
        same = texts["plain"] == texts["lookup"]
        pn, ps = best.get("plain", (0, 0.0))
        ln, ls = best.get("lookup", (0, 0.0))
        t = totals[p["class"]]
        t[0] += pn; t[1] += ps; t[2] += ln; t[3] += ls
        rate = lambda n, s: n / s if s else float("nan")
        print(f"{p['name']:<28} {p['class']:<10} plain {rate(pn, ps):7.1f}  lookup {rate(ln, ls):7.1f} tok/s"
              f"  {rate(ln, ls) / rate(pn, ps):5.2f}x  same text: {same}", file=sys.stderr, flush=True)
    print(f"| class | llama.cpp plain tok/s | llama.cpp lookup (num_pred_tokens={args.draft}) tok/s | speed-up |")
    print("| --- | ---: | ---: | ---: |")
    for cls, (pn, ps, ln, ls) in totals.items():
        print(f"| {cls} | {pn / ps:.1f} | {ln / ls:.1f} | {(ln / ls) / (pn / ps):.2f}× |")


if __name__ == "__main__":
    main()
