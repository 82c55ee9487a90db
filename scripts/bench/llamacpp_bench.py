#!/usr/bin/env python3
"""llama.cpp (llama-cpp-python) side of `peregrine bench --device cpu`.

Measures what `peregrine bench` measures, the same way: prefill = evaluate a prompt
and pick the first token (greedy); decode = after a short prompt, generate N tokens
one at a time (evaluate + greedy pick), wall-clock, no stop tokens.

Two modes:
  --serve          worker for `peregrine bench`: loads the model once, then reads one
                   JSON request per line ({"prompt": [ids], "short_prompt": [ids],
                   "gen_tokens": N}) and answers {"prefill_tok_s", "decode_tok_s"}.
  (default)        stand-alone alternating comparison: runs `PEREGRINE bench --json
                   --runs 1 --no-llamacpp` and one llama.cpp measurement in turn,
                   RUNS times, and prints medians and ratios (markdown with --markdown).

Needs llama-cpp-python==0.3.36 built without AMX (docs/benchmarks.md, "Machines") and
numpy, e.g. /tmp/llama-venv/bin/python.

usage: llamacpp_bench.py --serve --model M [--threads T] [--n-ctx C]
       llamacpp_bench.py --peregrine BIN [--model M] [--threads T] [--runs 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from importlib.metadata import version

import numpy as np
import llama_cpp
from llama_cpp import Llama

DEFAULT_MODEL = os.environ.get(
    "PEREGRINE_DEFAULT_MODEL",
    os.path.expanduser("~/.cache/peregrine/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
# Context for the benchmark: a 256-token prompt, or 8 + 128 decoded tokens.
DEFAULT_N_CTX = 512
# llama.cpp's batch for prompt processing (its default).
N_BATCH = 512


def load(model, threads, n_ctx):
    return Llama(model_path=model, n_ctx=n_ctx, n_batch=N_BATCH, n_threads=threads,
                 n_threads_batch=threads, logits_all=False, verbose=False)


def greedy(llm):
    """Argmax of the last evaluated position's logits (what temp=0 sampling picks)."""
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
    return int(np.argmax(logits))


def measure(llm, prompt, short_prompt, gen_tokens):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    greedy(llm)
    prefill = time.perf_counter() - t0

    llm.reset()
    llm.eval(short_prompt)
    tok = greedy(llm)
    t0 = time.perf_counter()
    for _ in range(gen_tokens):
        llm.eval([tok])
        tok = greedy(llm)
    decode = time.perf_counter() - t0
    return {"prefill_tok_s": len(prompt) / prefill, "decode_tok_s": gen_tokens / decode}


def serve(args):
    llm = load(args.model, args.threads, args.n_ctx)
    print(json.dumps({"ready": True, "llama_cpp_python": version("llama_cpp_python")}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("quit"):
            break
        try:
            reply = measure(llm, req["prompt"], req["short_prompt"], req["gen_tokens"])
        except Exception as e:  # reported to the caller, which stops the comparison
            reply = {"error": repr(e)}
        print(json.dumps(reply), flush=True)


def compare(args):
    ours, theirs, plan, info = [], [], None, None
    llm = None
    for run in range(args.runs):
        cmd = [args.peregrine, "bench", "--device", "cpu", "--runs", "1", "--json", "--no-llamacpp",
               "--model", args.model, "--threads", str(args.threads)]
        out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        ours.append(out["runs"][0])
        plan, info = out["plan"], out
        if llm is None:
            llm = load(args.model, args.threads, args.n_ctx)
        theirs.append(measure(llm, plan["prompt"], plan["short_prompt"], plan["gen_tokens"]))
        print(f"run {run + 1}: peregrine {ours[-1]['prefill_tok_s']:.1f} / {ours[-1]['decode_tok_s']:.1f}"
              f" · llama.cpp {theirs[-1]['prefill_tok_s']:.1f} / {theirs[-1]['decode_tok_s']:.1f} tok/s"
              " (prefill / decode)", file=sys.stderr)
    rows = []
    for key, label in (("decode_tok_s", f"decode ({plan['gen_tokens']} tokens)"),
                       ("prefill_tok_s", f"prefill ({len(plan['prompt'])}-token prompt)")):
        a = statistics.median(r[key] for r in ours)
        b = statistics.median(r[key] for r in theirs)
        rows.append((label, a, b, a / b))
    if args.markdown:
        print(f"{time.strftime('%Y-%m-%d')} · {info['cpu']} · {args.threads} threads · "
              f"llama-cpp-python {version('llama_cpp_python')} · medians of {args.runs} alternating runs\n")
        print("| metric | Peregrine tok/s | llama.cpp tok/s | ratio |")
        print("|---|---:|---:|---:|")
        for label, a, b, r in rows:
            print(f"| {label} | {a:.1f} | {b:.1f} | {r:.2f}× |")
    else:
        for label, a, b, r in rows:
            print(f"{label:<28} peregrine {a:8.1f}  llama.cpp {b:8.1f}  ratio {r:.2f}x")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--serve", action="store_true")
    p.add_argument("--peregrine", help="peregrine binary (stand-alone comparison)")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--n-ctx", type=int, default=DEFAULT_N_CTX)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    if args.serve:
        serve(args)
    elif args.peregrine:
        compare(args)
    else:
        p.error("give --serve or --peregrine BIN")


if __name__ == "__main__":
    main()
