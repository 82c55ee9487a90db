#!/usr/bin/env python3
"""PyTorch baseline of `peregrine bench --device cuda --baseline` (the "PyTorch CUDA
graph" column of docs/benchmarks.md): a transformers model of each shape with random bf16 weights, a static KV
cache, one greedy decode step captured as a CUDA graph and replayed, timed with CUDA
events (median of runs). Also times an eager 512-token prefill into the same cache.

Reads one JSON request on stdin (written by backend/engine/src/cuda/torch_baseline.rs):
  {"shapes": [{"name", "config": <transformers config.json>}], "prompt_tokens",
   "gen_tokens", "ttft_prompt_tokens", "runs", "seed", "report_tokens"}
and prints one JSON line per shape on stdout; progress goes to stderr. Without CUDA
(a CPU-only check of this script) the step runs eagerly and `mode` says so.
"""

import json
import statistics
import sys
import time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, StaticCache

# Eager greedy steps compared with `generate()` (same weights) before timing.
CHECK_STEPS = 8
# Untimed replays before the timed runs (clocks, caches).
WARMUP_REPLAYS = 16


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def build(config_json, device, seed):
    fields = {k: v for k, v in config_json.items() if k not in ("model_type", "architectures")}
    config = AutoConfig.for_model(config_json["model_type"], **fields)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    return model.eval(), config


class Decoder:
    """A static cache, an explicit attention mask and a one-token greedy step that
    touches only tensors with fixed addresses (so it can be captured as a graph)."""

    def __init__(self, model, config, max_len, device):
        self.model, self.device = model, device
        self.cache = StaticCache(config=config, max_cache_len=max_len)
        self.mask = torch.zeros(1, max_len, dtype=torch.long, device=device)
        self.tok = torch.zeros(1, 1, dtype=torch.long, device=device)
        self.out = torch.zeros(max_len, dtype=torch.long, device=device)
        self.graph = None

    def lengths(self):
        return [layer.cumulative_length for layer in self.cache.layers]

    def prefill(self, prompt):
        """Runs `prompt` from position 0; leaves its greedy token in `tok`."""
        n = prompt.shape[-1]
        for c in self.lengths():
            if isinstance(c, torch.Tensor):
                c.fill_(0)
        self.mask.zero_()
        self.mask[:, :n] = 1
        logits = self.model(input_ids=prompt.view(1, -1), attention_mask=self.mask, past_key_values=self.cache, use_cache=True).logits
        self.tok.copy_(logits[:, -1].argmax(-1).view(1, 1))
        self.start = n

    def rewind(self, n, tok):
        """Back to the state right after a prefill of `n` tokens that produced `tok`."""
        for c in self.lengths():
            c.fill_(n)
        self.mask.zero_()
        self.mask[:, :n] = 1
        self.tok.copy_(tok)

    def step(self):
        # A copy: the cache advances its length in place during the forward.
        pos = self.lengths()[0].view(1).clone()
        self.mask.index_fill_(1, pos, 1)
        logits = self.model(input_ids=self.tok, attention_mask=self.mask, past_key_values=self.cache, use_cache=True).logits
        nxt = logits[:, -1].argmax(-1)
        self.out.index_copy_(0, pos, nxt)
        self.tok.copy_(nxt.view(1, 1))

    def capture(self):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                self.step()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.step()

    def run(self, steps):
        for _ in range(steps):
            if self.graph is not None:
                self.graph.replay()
            else:
                self.step()


def timed(device, fn):
    """Seconds of `fn()` (CUDA events on the GPU)."""
    if device == "cuda":
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) * 1e-3
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


@torch.inference_mode()
def bench_shape(shape, req, device):
    name, cfg = shape["name"], shape["config"]
    prompt_n, gen, ttft_n, runs = req["prompt_tokens"], req["gen_tokens"], req["ttft_prompt_tokens"], req["runs"]
    t0 = time.perf_counter()
    model, config = build(cfg, device, req["seed"])
    log(f"{name}: model built in {time.perf_counter() - t0:.1f}s")
    vocab = cfg["vocab_size"]
    g = torch.Generator().manual_seed(req["seed"])
    prompt = torch.randint(0, vocab, (prompt_n,), generator=g).to(device)
    long_prompt = torch.randint(0, vocab, (ttft_n,), generator=g).to(device)
    max_len = max(prompt_n + gen + CHECK_STEPS + 8, ttft_n + 1)
    dec = Decoder(model, config, max_len, device)

    # Correctness of the static-cache step against generate() before anything is timed.
    want = model.generate(prompt.view(1, -1), attention_mask=torch.ones(1, prompt_n, dtype=torch.long, device=device),
                          max_new_tokens=CHECK_STEPS, do_sample=False, min_new_tokens=CHECK_STEPS)[0, prompt_n:].tolist()
    dec.prefill(prompt)
    first = dec.tok.clone()
    got = [int(first)]
    dec.run(CHECK_STEPS - 1)
    got += dec.out[prompt_n:prompt_n + CHECK_STEPS - 1].tolist()
    mode = "eager-static-cache"
    if device == "cuda":
        try:
            dec.rewind(prompt_n, first)
            dec.capture()
            mode = "cuda-graph"
        except Exception as e:  # noqa: BLE001 - reported, then the eager loop is timed
            log(f"{name}: graph capture failed ({type(e).__name__}: {e}); timing the eager static-cache loop")
            dec.graph = None
            torch.cuda.synchronize()
    dec.rewind(prompt_n, first)
    dec.run(CHECK_STEPS - 1)
    replayed = [int(first)] + dec.out[prompt_n:prompt_n + CHECK_STEPS - 1].tolist()

    dec.rewind(prompt_n, first)
    dec.run(min(WARMUP_REPLAYS, gen))
    rates = []
    for _ in range(runs):
        dec.rewind(prompt_n, first)
        rates.append(gen / timed(device, lambda: dec.run(gen)))
    tokens = [int(first)] + dec.out[prompt_n:prompt_n + req["report_tokens"] - 1].tolist()

    prefills = []
    for _ in range(runs + 1):
        prefills.append(timed(device, lambda: dec.prefill(long_prompt)) * 1e3)
    prefills = prefills[1:]

    del dec, model
    if device == "cuda":
        torch.cuda.empty_cache()
    return {
        "name": name,
        "mode": mode,
        "decode_runs": rates,
        "decode_tok_s": statistics.median(rates),
        "prefill_ms": statistics.median(prefills),
        "static_matches_generate": got == want,
        "replay_matches_eager": replayed == got,
        "first_tokens": tokens,
    }


def main():
    req = json.load(sys.stdin)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    common = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
    }
    log(f"torch {common['torch']}, transformers {common['transformers']}, {common['device']}")
    for shape in req["shapes"]:
        try:
            row = bench_shape(shape, req, device)
            if not (row["static_matches_generate"] and row["replay_matches_eager"]):
                log(f"{shape['name']}: WARNING static-cache/graph tokens differ from generate(): {row}")
        except Exception as e:  # noqa: BLE001 - one shape's failure is that shape's row
            log(f"{shape['name']}: {type(e).__name__}: {e}")
            row = {"name": shape["name"], "error": f"{type(e).__name__}: {e}"}
        print(json.dumps({**common, **row}), flush=True)
        log(f"{shape['name']}: {row.get('mode', '')} {row.get('decode_tok_s', float('nan')):.0f} tok/s, prefill({req['ttft_prompt_tokens']}) {row.get('prefill_ms', float('nan')):.1f} ms")


if __name__ == "__main__":
    main()
