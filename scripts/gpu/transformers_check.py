#!/usr/bin/env python3
"""CUDA engine vs transformers on random-weight HF directories (the engine's correctness
check), on the GPU host.

For each shape (the engine's own preset, as config.json from `hf_score config NAME`):
build a seeded random model with transformers, round its weights to bf16 and save it
as bf16 safetensors; run transformers in float32 (the reference) and in bf16 over
fresh random token sequences; run our engine on the same directory through the real
HF loader (`hf_score score`, teacher-forced logits); report ‖Δ‖/‖ref‖ and top-1
agreement with the float32 run for ours and for transformers-bf16.
Pass iff ours ≤ max(2e-2, 1.5 × transformers-bf16's error) and ours' top-1 ≥
transformers-bf16's − 1 point.

Linear and embedding weights are N(0, 1/fan_in) (our synthetic models' scale: each
layer moves the residual stream, so logits are not just the input token's own
embedding echoed, which would make top-1 trivially equal); RMSNorm weights 1 ± 0.1;
q/k/v biases N(0, 0.2²) so Qwen2's biases are exercised.

Usage: transformers_check.py [--shapes a,b] [--seqs 8] [--len 256] [--bin .carry/hf_score] [--tp 1,2]
                             [--device cuda|cpu] [--workdir /tmp/pg-tf-check] [--out DIR]
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

try:
    import numpy as np
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
except ImportError as missing:  # a machine without the GPU host's Python stack
    print(f"skipped: {missing}")
    sys.exit(0)

DEFAULT_SHAPES = "smollm2-135m,qwen2.5-coder-1.5b"
# 8 × 256 = 2,048 positions per shape (at least 2,000 scored positions per shape).
DEFAULT_SEQS = 8
DEFAULT_LEN = 256
SEED = 20261130
ABS_REL_ERR_FLOOR = 2e-2
REL_ERR_FACTOR = 1.5
TOP1_SLACK = 0.01
NORM_JITTER = 0.1
BIAS_STD = 0.2
ENGINE_TIMEOUT_S = 240


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def preset_config(binary, name):
    text = subprocess.run([binary, "config", name], check=True, capture_output=True, text=True).stdout
    return json.loads(text)


@torch.no_grad()
def build_model(cfg_json, device, seed):
    fields = {k: v for k, v in cfg_json.items() if k not in ("model_type", "architectures")}
    config = AutoConfig.for_model(cfg_json["model_type"], **fields)
    config.architectures = cfg_json["architectures"]
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    g = torch.Generator(device=device).manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.uniform_(1 - NORM_JITTER, 1 + NORM_JITTER, generator=g)
        elif name.endswith(".bias"):
            p.normal_(0.0, BIAS_STD, generator=g)
        else:
            p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]), generator=g)
        p.copy_(p.to(torch.bfloat16).to(torch.float32))  # the reference sees the saved values
    return model.eval()


@torch.inference_mode()
def logits_of(model, tokens, batch):
    rows = []
    for i in range(0, tokens.shape[0], batch):
        rows.append(model(input_ids=tokens[i:i + batch]).logits.float())
    return torch.cat(rows)


def compare(got, ref):
    """(‖Δ‖/‖ref‖ over every position, top-1 agreement with ref)."""
    got, ref = got.reshape(-1, ref.shape[-1]), ref.reshape(-1, ref.shape[-1])
    num = sum(((g.double() - r.double()) ** 2).sum().item() for g, r in zip(got.split(256), ref.split(256)))
    den = sum((r.double() ** 2).sum().item() for r in ref.split(256))
    finite = bool(torch.isfinite(got).all())
    rel = math.sqrt(num / den) if finite else float("inf")
    top1 = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
    return rel, top1


def check_shape(name, args, device):
    t0 = time.perf_counter()
    cfg = preset_config(args.bin, name)
    model_dir = os.path.join(args.workdir, name)
    shutil.rmtree(model_dir, ignore_errors=True)
    model = build_model(cfg, device, SEED)
    vocab = cfg["vocab_size"]
    g = torch.Generator().manual_seed(SEED + 1)
    tokens = torch.randint(0, vocab, (args.seqs, args.len), generator=g)
    tokens_path = os.path.join(args.workdir, f"{name}.tokens.json")
    with open(tokens_path, "w") as f:
        json.dump(tokens.tolist(), f)
    tokens = tokens.to(device)
    batch = 2 if vocab > 100_000 else args.seqs
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ref = logits_of(model, tokens, batch)
    model.to(torch.bfloat16)
    model.save_pretrained(model_dir)
    bf16 = logits_of(model, tokens, batch)
    del model
    tf_rel, tf_top1 = compare(bf16, ref)
    del bf16
    if device == "cuda":
        torch.cuda.empty_cache()
    log(f"{name}: transformers f32 + bf16 done in {time.perf_counter() - t0:.1f}s ({sorted(os.listdir(model_dir))})")

    rows = []
    first = None  # the first degree's logits: later degrees are also compared with it
    for tp in args.tp:
        out_path = os.path.join(args.workdir, f"{name}.tp{tp}.logits.f32")
        cmd = [args.bin, "score", "--model", model_dir, "--tokens", tokens_path, "--out", out_path, "--device", args.engine_device, "--tp", str(tp)]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=ENGINE_TIMEOUT_S)
        if run.returncode != 0:
            raise RuntimeError(f"hf_score --tp {tp} failed ({run.returncode}): {run.stderr.strip()[-2000:]}")
        summary = json.loads(run.stdout.strip().splitlines()[-1])
        ours = torch.from_numpy(np.fromfile(out_path, dtype="<f4")).to(device).view(args.seqs, args.len, vocab)
        os.remove(out_path)
        our_rel, our_top1 = compare(ours, ref)
        vs_first = None
        if first is None:
            first = (args.tp[0], ours)
        else:
            rel, top1 = compare(ours, first[1])
            vs_first = {"tp": first[0], "rel_err": rel, "top1": top1}
        bound = max(ABS_REL_ERR_FLOOR, REL_ERR_FACTOR * tf_rel)
        passed = our_rel <= bound and our_top1 >= tf_top1 - TOP1_SLACK
        rows.append({
            "shape": name,
            "tp": tp,
            "positions": args.seqs * args.len,
            "ours_rel_err": our_rel,
            "ours_top1": our_top1,
            "transformers_bf16_rel_err": tf_rel,
            "transformers_bf16_top1": tf_top1,
            "rel_err_bound": bound,
            "top1_floor": tf_top1 - TOP1_SLACK,
            "vs_first_tp": vs_first,
            "passed": passed,
            "engine": summary,
            "seconds": time.perf_counter() - t0,
        })
    shutil.rmtree(model_dir, ignore_errors=True)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default=DEFAULT_SHAPES)
    p.add_argument("--seqs", type=int, default=DEFAULT_SEQS)
    p.add_argument("--len", type=int, default=DEFAULT_LEN)
    p.add_argument("--bin", default=".carry/hf_score")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="where transformers runs")
    p.add_argument("--engine-device", default="cuda", help="cuda, or cpu (the engine's float32 reference: a pipeline self-test)")
    p.add_argument("--workdir", default="/tmp/pg-tf-check")
    p.add_argument("--tp", default="1", help="tensor-parallel degrees of the engine, comma-separated (each compared with transformers; later ones also with the first)")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args()
    args.tp = [int(t) for t in args.tp.split(",")]
    if args.engine_device == "cuda" and not torch.cuda.is_available():
        print("skipped: no CUDA device (use --engine-device cpu for a pipeline self-test)")
        return 0
    os.makedirs(args.workdir, exist_ok=True)
    import transformers
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, transformers on {args.device}, engine on {args.engine_device}")
    rows = []
    for name in args.shapes.split(","):
        try:
            rows.extend(check_shape(name, args, args.device))
        except Exception as e:  # noqa: BLE001 - one shape's failure is that shape's row
            log(f"{name}: {type(e).__name__}: {e}")
            rows.append({"shape": name, "tp": None, "error": f"{type(e).__name__}: {e}", "passed": False})
        log(json.dumps(rows[-1]))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "transformers_check.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("| shape | tp | positions | ours ‖Δ‖/‖ref‖ | transformers-bf16 ‖Δ‖/‖ref‖ | bound | ours top-1 | transformers-bf16 top-1 | vs first tp ‖Δ‖, top-1 | verdict |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if "error" in r:
            print(f"| {r['shape']} | – | – | – | – | – | – | – | – | ERROR {r['error'][:200]} |")
            continue
        vf = r["vs_first_tp"]
        vs = f"{vf['rel_err']:.2e}, {100 * vf['top1']:.2f}% (tp {vf['tp']})" if vf else "–"
        print(f"| {r['shape']} | {r['tp']} | {r['positions']} | {r['ours_rel_err']:.2e} | {r['transformers_bf16_rel_err']:.2e} | {r['rel_err_bound']:.2e} | "
              f"{100 * r['ours_top1']:.2f}% | {100 * r['transformers_bf16_top1']:.2f}% | {vs} | {'PASS' if r['passed'] else 'FAIL'} |")
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
