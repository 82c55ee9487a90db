#!/usr/bin/env python3
"""The GPU kit's one summary table (scripts/gpu/kit.sh run), from what its suites left in
a folder: the GPU tests' verdicts, the benchmark rows (peregrine-bench's JSON report,
PyTorch beside each shape) and llama.cpp's CUDA figures on the same shapes and formats.
A suite that did not run says so; nothing is inferred from a missing file.

Usage: kit_summary.py OUT_DIR [WORK_DIR]   (stdlib only: the GPU host has no extra packages)
"""
import json
import os
import re
import sys

out = sys.argv[1]
work = sys.argv[2] if len(sys.argv) > 2 else out
# llama.cpp's names for the weight formats peregrine-bench takes.
LLAMA_FORMAT = {"bf16": "f16", "q8_0": "Q8_0", "q4_k_m": "Q4_K_M"}


def read(name, folder=out):
    path = os.path.join(folder, name)
    return open(path, errors="replace").read() if os.path.exists(path) else None


def tests_section():
    log = read("tests.log")
    if log is None:
        return ["- GPU tests: not run"]
    lines = []
    result = re.findall(r"^test result: (\w+)\. (\d+) passed; (\d+) failed; (\d+) ignored; \d+ measured; (\d+) filtered out", log, re.M)
    if len(result) > 1:
        totals = [sum(int(r[i]) for r in result) for i in (1, 2, 3)]
        verdict = "ok" if totals[1] == 0 else "FAILED"
        lines.append(f"- GPU tests ({len(result)} filtered runs): **{verdict}**, {totals[0]} passed, {totals[1]} failed, {totals[2]} ignored")
    elif result:
        verdict, passed, failed, ignored, filtered = result[-1]
        lines.append(f"- GPU tests: **{verdict}**, {passed} passed, {failed} failed, {ignored} ignored, {filtered} filtered out")
    else:
        # A check that prints figures puts its verdict on a later line of its own.
        done = len(re.findall(r"(?:\.\.\. |^)ok$", log, re.M))
        lines.append(f"- GPU tests: **incomplete** (killed at the deadline or crashed) after {done} passed: see tests.log")
    for block in re.split(r"^(?=test )", log, flags=re.M):
        if re.search(r"(?:\.\.\. |^)FAILED$", block, re.M):
            lines.append(f"  - FAILED: {block.split(' ... ')[0][5:].strip()}")
    return lines


def llama_figures():
    """(shape, llama.cpp format, test) -> 't/s' string from llama-bench's markdown rows."""
    log = read("peers.log") or ""
    figures = {}
    for line in log.splitlines():
        m = re.match(r"^(\S+) (\S+) \|.*\| (tg\d+|pp\d+) \| +([\d.]+) ± ([\d.]+) \|", line)
        if m:
            figures[(m.group(1), m.group(2), m.group(3))] = float(m.group(4))
    return figures


def fmt(x, digits=0):
    return "–" if x is None else f"{x:,.{digits}f}"


def bench_section():
    raw = read("bench.json")
    if raw is None:
        log = read("bench.log")
        return ["- benchmark: not run" if log is None else "- benchmark: no JSON report (see bench.log)"]
    report = json.loads(raw)
    llama = llama_figures()
    peers_ran = read("peers.log") is not None
    lines = [
        f"Copy bandwidth {report['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s; decode = {report['prompt_tokens']}-token prompt, "
        f"{report['gen_tokens']} tokens, median of {report['runs']} runs; TTFT at {report['ttft_prompt_tokens']} tokens.",
        "",
        "| shape | weights | tok/s | % of bound | TTFT (ms) | verified | PyTorch tok/s | × PyTorch | llama.cpp tg128 | × llama.cpp |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in report["shapes"]:
        shape = row["shape"].split(" ")[0]
        weights = row["weights"]
        base = row.get("baseline") or {}
        torch = base.get("decode_tok_s") if not base.get("error") and weights == "bf16" else None
        ours = row["decode_tok_s"]
        tg = llama.get((shape.lower(), LLAMA_FORMAT.get(weights, weights), "tg128"))
        verified = row["verification"]["passed"] and row["tokens_match"]
        lines.append(
            f"| {row['shape']} (tp {row['tp']}) | {weights} | **{fmt(ours)}** | {fmt(row['pct_of_bound'], 1)} % | {fmt(row['ttft_ms'], 2)} | "
            f"{'yes' if verified else 'NO'} | {fmt(torch)} | {fmt(ours / torch if torch else None, 2)} | "
            f"{fmt(tg) if tg else ('–' if peers_ran else 'not run')} | {fmt(ours / tg if tg else None, 2)} |"
        )
    return lines


def one_line(name, label, pattern):
    log = read(name)
    if log is None:
        return []
    hits = re.findall(pattern, log, re.M)
    return [f"- {label}: {hits[-1] if hits else 'no verdict line, see ' + name}"]


def main():
    lines = ["# GPU kit summary", ""]
    env = read("env.txt", work)
    if env:
        lines += ["```", env.strip(), "```", ""]
    lines += tests_section()
    lines += one_line("sanitize.log", "compute-sanitizer memcheck", r"^(=+ ERROR SUMMARY: .*|test result: .*)$")
    lines += one_line("hf.log", "transformers parity", r"^(.*(?:PASS|FAIL).*)$")
    lines += one_line("model.log", "real default model", r"^(real model check: .*)$")
    lines += [""] + bench_section()
    steps = read("steps.txt", work)
    if steps:
        lines += ["", "Steps (wall time, exit status):", "```", steps.strip(), "```"]
    print("\n".join(lines))


main()
