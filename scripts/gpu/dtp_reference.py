#!/usr/bin/env python3
"""PyTorch reference of Delayed Tensor Parallelism (docs/dtp.md) and of
standard tensor parallelism, on CPU or GPU, torch only.

Reads a Hugging Face directory (config.json with an optional `dtp` block, one or more
safetensors files: `dtp_ref export` writes them from a seed on the machine that runs it)
and computes teacher-forced logits of whole sequences at once (causal masks), lanes
simulated in one process with the same shard ranges as the engine (heads, FFN columns,
vocabulary rows; KV heads replicated when lanes exceed them). Written independently of
the engine's token-by-token CPU reference so the two check each other.

Subcommands:
  tokens   --vocab V [--seqs 4] [--len 64] [--seed S] --out FILE     random token ids (JSON)
  score    --model DIR --tokens FILE --out FILE [--mode plain|standard|dtp] [--lanes L]
           [--delay D] [--early present|none] [--dtype float32|bfloat16] [--device cpu|cuda]
  compare  --model DIR --tokens FILE --ours FILE [--mode ...] [--lanes L] [--delay D] [--early E]
           ours (f32 LE logits [seqs × len × vocab]) vs this reference in float32, next to this
           reference's own bfloat16 run; bounds of issue #7: ‖Δ‖/‖ref‖ ≤ max(2e-2, 1.5 × bf16's)
           and top-1 ≥ bf16's − 1 point. Exit 1 on failure. `--strict TOL` instead demands
           ‖Δ‖/‖ref‖ ≤ TOL (float32 vs float32).
  selftest [--model DIR] [--lanes 2,4,8]   the invariants in PyTorch: standard TP = plain model,
           DTP delay 0 = standard TP, DTP on 1 lane = plain model, DTP delay ≥ 1 ≠ standard TP.

DTP settings default to the model's `dtp` block; --delay/--early override it.
"""

import argparse
import json
import math
import os
import struct
import sys

try:
    import torch
except ImportError as missing:
    print(f"skipped: {missing}")
    sys.exit(0)

ABS_REL_ERR_FLOOR = 2e-2
REL_ERR_FACTOR = 1.5
TOP1_SLACK = 0.01
# Invariant checks: float32 against float32 with different summation orders.
INVARIANT_TOL = 1e-5
# A different function must differ by far more than rounding.
DIFFERENT_FLOOR = 1e-3
DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- loading


def read_safetensors(path):
    """name → float32 tensor, parsed by hand (torch only, no safetensors package)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dtype = DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        t = torch.frombuffer(bytearray(data[a:b]), dtype=dtype) if b > a else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"]).float()
    return out


class Config:
    """The fields of config.json the reference needs."""

    def __init__(self, j):
        self.vocab = j["vocab_size"]
        self.hidden = j["hidden_size"]
        self.ffn = j["intermediate_size"]
        self.layers = j["num_hidden_layers"]
        self.heads = j["num_attention_heads"]
        self.kv_heads = j.get("num_key_value_heads") or self.heads
        self.head_dim = j.get("head_dim") or self.hidden // self.heads
        self.eps = j.get("rms_norm_eps", 1e-6)
        rope = j.get("rope_parameters") or j.get("rope_scaling") or {}
        self.theta = rope.get("rope_theta", j.get("rope_theta", 10000.0))
        self.rope = rope
        self.tied = j.get("tie_word_embeddings", True)
        self.dtp = j.get("dtp")

    def inv_freq(self):
        hd = self.head_dim
        f = 1.0 / (self.theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        if self.rope.get("rope_type", self.rope.get("type")) == "llama3":
            factor, lo, hi = self.rope["factor"], self.rope["low_freq_factor"], self.rope["high_freq_factor"]
            old = self.rope["original_max_position_embeddings"]
            wavelen = 2 * math.pi / f
            smooth = (old / wavelen - lo) / (hi - lo)
            scaled = torch.where(wavelen > old / lo, f / factor, f)
            mid = (wavelen >= old / hi) & (wavelen <= old / lo)
            f = torch.where(mid, (1 - smooth) * f / factor + smooth * f, scaled)
        return f.float()


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = Config(json.load(f))
    tensors = {}
    for name in sorted(os.listdir(model_dir)):
        if name.endswith(".safetensors"):
            tensors.update(read_safetensors(os.path.join(model_dir, name)))
    if "lm_head.weight" not in tensors:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    return cfg, tensors


# ---------------------------------------------------------------- sharding


def shard_ranges(cfg, lanes):
    """Per lane: (q heads, kv heads, ffn columns, vocab rows) as (start, end); errors as the engine's."""
    if lanes < 1:
        raise ValueError("at least one lane")
    if cfg.heads % lanes or cfg.ffn % lanes:
        raise ValueError(f"{cfg.heads} heads / FFN {cfg.ffn} do not divide by {lanes} lanes")
    kv, group = cfg.kv_heads, cfg.heads // cfg.kv_heads
    if (lanes <= kv and kv % lanes) or (lanes > kv and lanes % kv):
        raise ValueError(f"{kv} KV heads neither divide by nor replicate evenly over {lanes} lanes")
    out = []
    qn, fn = cfg.heads // lanes, cfg.ffn // lanes
    for i in range(lanes):
        q = (i * qn, (i + 1) * qn)
        kvr = (i * kv // lanes, (i + 1) * kv // lanes) if lanes <= kv else (q[0] // group, q[0] // group + 1)
        out.append(dict(q=q, kv=kvr, ffn=(i * fn, (i + 1) * fn), vocab=(i * cfg.vocab // lanes, (i + 1) * cfg.vocab // lanes)))
    return out


class Lane:
    """One lane's weight slices in `dtype` on `device`."""

    def __init__(self, cfg, w, r, dtype, device):
        hd = cfg.head_dim
        qs, qe = r["q"][0] * hd, r["q"][1] * hd
        ks, ke = r["kv"][0] * hd, r["kv"][1] * hd
        fs, fe = r["ffn"]
        vs, ve = r["vocab"]
        self.r = r
        put = lambda t: t.to(device=device, dtype=dtype).contiguous()  # noqa: E731
        self.layers = []
        for n in range(cfg.layers):
            p = f"model.layers.{n}."
            get = lambda k: w.get(p + k)  # noqa: E731
            bias = lambda k, a, b: None if get(k) is None else put(get(k)[a:b])  # noqa: E731
            self.layers.append(dict(
                q=put(get("self_attn.q_proj.weight")[qs:qe]),
                k=put(get("self_attn.k_proj.weight")[ks:ke]),
                v=put(get("self_attn.v_proj.weight")[ks:ke]),
                qb=bias("self_attn.q_proj.bias", qs, qe),
                kb=bias("self_attn.k_proj.bias", ks, ke),
                vb=bias("self_attn.v_proj.bias", ks, ke),
                o=put(get("self_attn.o_proj.weight")[:, qs:qe]),
                gate=put(get("mlp.gate_proj.weight")[fs:fe]),
                up=put(get("mlp.up_proj.weight")[fs:fe]),
                down=put(get("mlp.down_proj.weight")[:, fs:fe]),
            ))
        self.head = put(w["lm_head.weight"][vs:ve])


class Reference:
    """The model split over `lanes` lanes; `run` computes teacher-forced logits."""

    def __init__(self, cfg, w, lanes, dtype=torch.float32, device="cpu"):
        self.cfg, self.dtype, self.device, self.n = cfg, dtype, device, lanes
        put = lambda t: t.to(device=device, dtype=dtype)  # noqa: E731
        self.embed = put(w["model.embed_tokens.weight"])
        self.norms = [(put(w[f"model.layers.{n}.input_layernorm.weight"]), put(w[f"model.layers.{n}.post_attention_layernorm.weight"]))
                      for n in range(cfg.layers)]
        self.final = put(w["model.norm.weight"])
        self.lanes = [Lane(cfg, w, r, dtype, device) for r in shard_ranges(cfg, lanes)]
        self.inv_freq = cfg.inv_freq().to(device)

    def rmsnorm(self, x, weight):
        # transformers' LlamaRMSNorm: float32 statistics, back to the run's dtype, then the weight.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg.eps)
        return weight * xf.to(self.dtype)

    def rope(self, x, cos, sin):  # x [T, heads, hd], half-split (HF rotate_half)
        half = x.shape[-1] // 2
        rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rot * sin

    def attention(self, lane, n, h, cos, sin):
        cfg, L = self.cfg, lane.layers[n]
        T, hd = h.shape[0], cfg.head_dim
        lin = lambda W, b: h @ W.T + (b if b is not None else 0)  # noqa: E731
        q = self.rope(lin(L["q"], L["qb"]).view(T, -1, hd), cos, sin)
        k = self.rope(lin(L["k"], L["kb"]).view(T, -1, hd), cos, sin)
        v = lin(L["v"], L["vb"]).view(T, -1, hd)
        group = cfg.heads // cfg.kv_heads
        idx = torch.tensor([(lane.r["q"][0] + j) // group - lane.r["kv"][0] for j in range(q.shape[1])], device=h.device)
        k, v = k[:, idx], v[:, idx]  # one KV head per local query head
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
        mask = torch.ones(T, T, dtype=torch.bool, device=h.device).tril()
        # Softmax in float32 as transformers' eager attention does, back to the run's dtype.
        probs = scores.float().masked_fill(~mask, float("-inf")).softmax(-1).to(self.dtype)
        out = torch.einsum("hqk,khd->qhd", probs, v).reshape(T, -1)
        return out @ L["o"].T

    def mlp(self, lane, n, h):
        L = lane.layers[n]
        return (torch.nn.functional.silu(h @ L["gate"].T) * (h @ L["up"].T)) @ L["down"].T

    def block(self, j, n, b, r, cos, sin):
        lane = self.lanes[j]
        h = self.rmsnorm(r, self.norms[n][b])
        return self.attention(lane, n, h, cos, sin) if b == 0 else self.mlp(lane, n, h)

    def logits(self, h):
        return torch.cat([h @ lane.head.T for lane in self.lanes], dim=-1).float()

    @torch.no_grad()
    def run(self, tokens, mode="standard", delay=0, early="present"):
        """Logits [T, vocab] (float32) of one sequence. mode: standard | dtp."""
        cfg, Ln = self.cfg, self.n
        tokens = torch.as_tensor(tokens, device=self.device)
        pos = torch.arange(tokens.shape[0], device=self.device, dtype=torch.float32)
        ang = torch.outer(pos, self.inv_freq)
        ang = torch.cat((ang, ang), dim=-1)[:, None, :]
        cos, sin = ang.cos().to(self.dtype), ang.sin().to(self.dtype)
        x = self.embed[tokens]
        N, d = cfg.layers, delay
        if mode == "standard":
            r = x
            for n in range(N):
                for b in (0, 1):
                    p = [self.block(j, n, b, r, cos, sin) for j in range(Ln)]
                    r = r + sum_in_order(p)
            return self.logits(self.rmsnorm(r, self.final))
        if mode != "dtp":
            raise ValueError(f"mode {mode}")
        if early not in ("present", "none"):
            raise ValueError(f"early {early}")
        if d == 0 and early == "none":
            raise ValueError("delay 0 needs early present")
        if 2 * d > N:
            raise ValueError(f"2·delay > {N} layers")
        r = [x.clone() for _ in range(Ln)]
        sent = {}
        for n in range(N):
            for b in (0, 1):
                p = [self.block(j, n, b, r[j], cos, sin) for j in range(Ln)]
                if n < d:
                    if early == "present":
                        total = sum_in_order(p)
                        r = [ri + total for ri in r]
                    else:
                        r = [ri + math.sqrt(Ln) * pi for ri, pi in zip(r, p)]
                    continue
                if d <= n < N - d:
                    sent[(n, b)] = p
                got = sent[(n - d, b)] if n - d >= d else None
                new = []
                for i in range(Ln):
                    add = p[i]
                    if got is not None:
                        for j in range(Ln):
                            if j != i:
                                add = add + got[j]
                    new.append(r[i] + add)
                r = new
        hs = [self.rmsnorm(ri, self.final) for ri in r]
        return self.logits(sum_in_order(hs) / Ln)


def sum_in_order(vs):
    total = vs[0]
    for v in vs[1:]:
        total = total + v
    return total


@torch.no_grad()
def plain_forward(cfg, w, tokens, dtype=torch.float32, device="cpu"):
    """The ordinary (unsharded) model, written without lanes: the invariants' ground truth."""
    get = lambda k: w[k].to(device=device, dtype=dtype)  # noqa: E731
    T, hd = len(tokens), cfg.head_dim
    x = get("model.embed_tokens.weight")[torch.as_tensor(tokens, device=device)]
    pos = torch.arange(T, device=device, dtype=torch.float32)
    ang = torch.outer(pos, cfg.inv_freq().to(device))
    ang = torch.cat((ang, ang), dim=-1)[None]
    cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)

    def norm(v, weight):
        vf = v.float()
        return weight * (vf * torch.rsqrt(vf.pow(2).mean(-1, keepdim=True) + cfg.eps)).to(dtype)

    def rope(t):
        half = hd // 2
        return t * cos + torch.cat((-t[..., half:], t[..., :half]), -1) * sin

    mask = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    for n in range(cfg.layers):
        p = f"model.layers.{n}."
        h = norm(x, get(p + "input_layernorm.weight"))
        proj = lambda name: h @ get(p + f"self_attn.{name}_proj.weight").T + (get(p + f"self_attn.{name}_proj.bias") if p + f"self_attn.{name}_proj.bias" in w else 0)  # noqa: E731,E501
        q = rope(proj("q").view(T, cfg.heads, hd).transpose(0, 1))
        k = rope(proj("k").view(T, cfg.kv_heads, hd).transpose(0, 1))
        v = proj("v").view(T, cfg.kv_heads, hd).transpose(0, 1)
        rep = cfg.heads // cfg.kv_heads
        k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
        s = (q @ k.transpose(1, 2)) / math.sqrt(hd)
        a = s.float().masked_fill(~mask, float("-inf")).softmax(-1).to(dtype) @ v
        x = x + a.transpose(0, 1).reshape(T, -1) @ get(p + "self_attn.o_proj.weight").T
        h = norm(x, get(p + "post_attention_layernorm.weight"))
        g = torch.nn.functional.silu(h @ get(p + "mlp.gate_proj.weight").T) * (h @ get(p + "mlp.up_proj.weight").T)
        x = x + g @ get(p + "mlp.down_proj.weight").T
    return (norm(x, get("model.norm.weight")) @ get("lm_head.weight").T).float()


# ---------------------------------------------------------------- comparison


def compare(got, ref):
    """(‖Δ‖/‖ref‖ over every position, top-1 agreement with ref)."""
    got, ref = got.reshape(-1, ref.shape[-1]).double(), ref.reshape(-1, ref.shape[-1]).double()
    if not bool(torch.isfinite(got).all()):
        return float("inf"), 0.0
    rel = ((got - ref).norm() / ref.norm()).item()
    top1 = (got.argmax(-1) == ref.argmax(-1)).double().mean().item()
    return rel, top1


def dtp_settings(args, cfg):
    block = cfg.dtp or {}
    delay = args.delay if args.delay is not None else block.get("delay")
    early = args.early or block.get("early_layers") or "present"
    if args.mode == "dtp" and delay is None:
        raise SystemExit("--mode dtp: the model has no dtp block; pass --delay")
    return delay or 0, early


def all_logits(args, cfg, w, seqs, dtype):
    if args.mode == "plain":
        return torch.stack([plain_forward(cfg, w, s, dtype, args.device) for s in seqs])
    delay, early = dtp_settings(args, cfg)
    ref = Reference(cfg, w, args.lanes, dtype, args.device)
    return torch.stack([ref.run(s, args.mode, delay, early) for s in seqs])


def read_tokens(path):
    with open(path) as f:
        seqs = json.load(f)
    if len({len(s) for s in seqs}) != 1:
        raise SystemExit(f"{path}: sequences must have one length")
    return seqs


def cmd_tokens(args):
    g = torch.Generator().manual_seed(args.seed)
    seqs = torch.randint(0, args.vocab, (args.seqs, args.len), generator=g).tolist()
    with open(args.out, "w") as f:
        json.dump(seqs, f)
    return 0


def cmd_score(args):
    cfg, w = load_model(args.model)
    seqs = read_tokens(args.tokens)
    logits = all_logits(args, cfg, w, seqs, DTYPE_NAMES[args.dtype])
    with open(args.out, "wb") as f:
        f.write(bytes(logits.float().cpu().contiguous().clone().untyped_storage()))  # little-endian f32 on x86/arm
    print(json.dumps({"mode": args.mode, "lanes": args.lanes, "dtype": args.dtype, "positions": len(seqs) * len(seqs[0])}))
    return 0


def cmd_compare(args):
    cfg, w = load_model(args.model)
    seqs = read_tokens(args.tokens)
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = all_logits(args, cfg, w, seqs, torch.float32)
    with open(args.ours, "rb") as f:
        raw = f.read()
    ours = torch.frombuffer(bytearray(raw), dtype=torch.float32).to(args.device)
    if ours.numel() != ref.numel():
        raise SystemExit(f"{args.ours}: {ours.numel()} logits, expected {ref.numel()} ({len(seqs)} × {len(seqs[0])} × {cfg.vocab})")
    our_rel, our_top1 = compare(ours.view_as(ref), ref)
    row = {"mode": args.mode, "lanes": args.lanes, "positions": len(seqs) * len(seqs[0]), "ours_rel_err": our_rel, "ours_top1": our_top1}
    if args.mode == "dtp":
        row["delay"], row["early"] = dtp_settings(args, cfg)
    if args.strict is not None:
        row["bound"] = args.strict
        row["passed"] = our_rel <= args.strict
    else:
        bf16 = all_logits(args, cfg, w, seqs, torch.bfloat16)
        bf_rel, bf_top1 = compare(bf16, ref)
        bound = max(ABS_REL_ERR_FLOOR, REL_ERR_FACTOR * bf_rel)
        row.update(torch_bf16_rel_err=bf_rel, torch_bf16_top1=bf_top1, rel_err_bound=bound, top1_floor=bf_top1 - TOP1_SLACK)
        row["passed"] = our_rel <= bound and our_top1 >= bf_top1 - TOP1_SLACK
    print(json.dumps(row))
    return 0 if row["passed"] else 1


def random_tiny_model(seed=7):
    """A tiny Llama-like model built in torch (selftest without an exported directory)."""
    cfg = Config({"vocab_size": 61, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 5, "num_attention_heads": 8,
                  "num_key_value_heads": 2, "head_dim": 8, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True})
    g = torch.Generator().manual_seed(seed)
    u = lambda *shape: (torch.rand(*shape, generator=g) * 2 - 1) * math.sqrt(3 / shape[-1])  # noqa: E731
    D, F, hd = cfg.hidden, cfg.ffn, cfg.head_dim
    w = {"model.embed_tokens.weight": u(cfg.vocab, D), "model.norm.weight": 1 + 0.1 * (torch.rand(D, generator=g) * 2 - 1)}
    for n in range(cfg.layers):
        p = f"model.layers.{n}."
        w.update({p + "input_layernorm.weight": 1 + 0.1 * (torch.rand(D, generator=g) * 2 - 1),
                  p + "post_attention_layernorm.weight": 1 + 0.1 * (torch.rand(D, generator=g) * 2 - 1),
                  p + "self_attn.q_proj.weight": u(cfg.heads * hd, D), p + "self_attn.k_proj.weight": u(cfg.kv_heads * hd, D),
                  p + "self_attn.v_proj.weight": u(cfg.kv_heads * hd, D), p + "self_attn.o_proj.weight": u(D, cfg.heads * hd),
                  p + "mlp.gate_proj.weight": u(F, D), p + "mlp.up_proj.weight": u(F, D), p + "mlp.down_proj.weight": u(D, F)})
    w["lm_head.weight"] = w["model.embed_tokens.weight"]
    return cfg, w


def cmd_selftest(args):
    cfg, w = load_model(args.model) if args.model else random_tiny_model()
    g = torch.Generator().manual_seed(3)
    toks = torch.randint(0, cfg.vocab, (12,), generator=g).tolist()
    plain = plain_forward(cfg, w, toks, device=args.device)
    checks = []

    def check(name, value, ok):
        checks.append({"check": name, "value": value, "passed": bool(ok)})
        log(f"{'ok  ' if ok else 'FAIL'} {name}: {value:.3e}")

    delay = max(1, min(2, cfg.layers // 2))
    for L in [int(x) for x in args.lanes_list.split(",")]:
        try:
            ref = Reference(cfg, w, L, device=args.device)
        except ValueError as e:
            log(f"skip L={L}: {e}")
            continue
        std = ref.run(toks, "standard")
        check(f"standard TP L={L} vs plain", compare(std, plain)[0], compare(std, plain)[0] <= INVARIANT_TOL)
        d0 = ref.run(toks, "dtp", 0, "present")
        check(f"DTP d=0 present L={L} vs standard TP", compare(d0, std)[0], compare(d0, std)[0] <= INVARIANT_TOL)
        dd = ref.run(toks, "dtp", delay, "present")
        check(f"DTP d={delay} present L={L} differs from standard TP", compare(dd, std)[0], compare(dd, std)[0] > DIFFERENT_FLOOR)
    one = Reference(cfg, w, 1, device=args.device)
    for early in ("present", "none"):
        e = compare(one.run(toks, "dtp", delay, early), plain)[0]
        check(f"DTP d={delay} {early} L=1 vs plain", e, e <= INVARIANT_TOL)
    print(json.dumps(checks))
    return 0 if all(c["passed"] for c in checks) else 1


DTYPE_NAMES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokens")
    t.add_argument("--vocab", type=int, required=True)
    t.add_argument("--seqs", type=int, default=4)
    t.add_argument("--len", type=int, default=64)
    t.add_argument("--seed", type=int, default=20261130)
    t.add_argument("--out", required=True)
    for name in ("score", "compare"):
        s = sub.add_parser(name)
        s.add_argument("--model", required=True)
        s.add_argument("--tokens", required=True)
        s.add_argument("--mode", default="dtp", choices=["plain", "standard", "dtp"])
        s.add_argument("--lanes", type=int, default=1)
        s.add_argument("--delay", type=int)
        s.add_argument("--early", choices=["present", "none"])
        s.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
        if name == "score":
            s.add_argument("--out", required=True)
            s.add_argument("--dtype", default="float32", choices=sorted(DTYPE_NAMES))
        else:
            s.add_argument("--ours", required=True)
            s.add_argument("--strict", type=float, help="demand ‖Δ‖/‖ref‖ ≤ this instead of the bf16-relative bound")
    st = sub.add_parser("selftest")
    st.add_argument("--model")
    st.add_argument("--lanes", dest="lanes_list", default="2,4,8")
    st.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    return {"tokens": cmd_tokens, "score": cmd_score, "compare": cmd_compare, "selftest": cmd_selftest}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
