#!/usr/bin/env python3
"""Writes a GGUF of random F16 weights in a benchmark shape, for llama.cpp's speed side by side.

Decode speed depends on the shapes and formats of the weights, not their values, so
llama.cpp (quantizing this file with its own `llama-quantize`) streams the same bytes per
token as `peregrine-bench --shape NAME --weights ...` does with its synthetic weights.
Every shape is written as the `llama` architecture with tied embeddings (an untied
model's output matrix streams the same bytes per token): Qwen2's q/k/v biases (a few KB)
are left out. The vocabulary is llama.cpp's `none` tokenizer with
`vocab_size` dummy tokens (llama-bench feeds random token ids). Needs numpy only.

    random_gguf.py SHAPE OUT.gguf [q4_1]   SHAPE: one of SHAPES below
    random_gguf.py --f16-bytes SHAPE       the F16 file's size in bytes (before writing it)

With `q4_1` the matrices are written as Q4_1 blocks (a scale and a minimum per 32
weights, as llama.cpp's quantizer rounds them), for the CPU runtime's batched step
(`examples/batch_step.rs`) on a model whose weights outweigh its arithmetic.
"""
import struct
import sys

import numpy as np

# name -> (vocab, hidden, ffn, layers, heads, kv heads, head dim, rope theta, rms eps)
SHAPES = {
    "smollm2-135m": (49152, 576, 1536, 30, 9, 3, 64, 100000.0, 1e-5),
    "llama-3.2-1b": (128256, 2048, 8192, 16, 32, 8, 64, 500000.0, 1e-5),
    "qwen2.5-coder-1.5b": (151936, 1536, 8960, 28, 12, 2, 128, 1000000.0, 1e-6),
    "smollm2-1.7b": (49152, 2048, 8192, 24, 32, 32, 64, 130000.0, 1e-5),
    "qwen2.5-coder-3b": (151936, 2048, 11008, 36, 16, 2, 128, 1000000.0, 1e-6),
    "qwen2.5-coder-7b": (152064, 3584, 18944, 28, 28, 4, 128, 1000000.0, 1e-6),
    "llama-3.1-8b": (128256, 4096, 14336, 32, 32, 8, 128, 500000.0, 1e-5),
}
ALIGN = 32
F32, F16, Q4_1 = 0, 1, 3
U32, F32_KV, STRING = 4, 6, 8


def string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, kind, value):
    out = string(key) + struct.pack("<I", kind)
    if kind == U32:
        return out + struct.pack("<I", value)
    if kind == F32_KV:
        return out + struct.pack("<f", value)
    return out + string(value)


def nbytes(rows, cols, kind):
    """Bytes of a tensor of `kind`."""
    return rows * cols * {F32: 4, F16: 2}[kind] if kind != Q4_1 else rows * cols // 32 * 20


def q4_1(x):
    """Q4_1 blocks of x (rows × cols, cols a multiple of 32): f16 scale, f16 minimum,
    then 16 bytes of codes, weight j in the low nibble of byte j and weight j + 16 in
    its high nibble."""
    b = x.reshape(-1, 32)
    lo, hi = b.min(axis=1), b.max(axis=1)
    d = (hi - lo) / 15
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    q = np.clip(((b - lo[:, None]) * inv[:, None] + 0.5).astype(np.int32), 0, 15).astype(np.uint8)
    codes = q[:, :16] | (q[:, 16:] << 4)
    head = np.stack([d.astype(np.float16), lo.astype(np.float16)], axis=1).view(np.uint8).reshape(-1, 4)
    return np.concatenate([head, codes], axis=1).tobytes()


def tensors(shape, matrix=F16):
    """(name, rows, cols, type) in file order; a matrix is [rows = out, cols = in]."""
    vocab, d, ffn, layers, heads, kv_heads, hd, _, _ = shape
    yield "token_embd.weight", vocab, d, matrix
    for i in range(layers):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", 1, d, F32
        yield p + "attn_q.weight", heads * hd, d, matrix
        yield p + "attn_k.weight", kv_heads * hd, d, matrix
        yield p + "attn_v.weight", kv_heads * hd, d, matrix
        yield p + "attn_output.weight", d, heads * hd, matrix
        yield p + "ffn_norm.weight", 1, d, F32
        yield p + "ffn_gate.weight", ffn, d, matrix
        yield p + "ffn_up.weight", ffn, d, matrix
        yield p + "ffn_down.weight", d, ffn, matrix
    yield "output_norm.weight", 1, d, F32


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--f16-bytes" and sys.argv[2] in SHAPES:
        # The F16 file's size, so the caller can check the disk before writing it.
        print(sum(r * c * 2 for _, r, c, _ in tensors(SHAPES[sys.argv[2]])))
        return
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in SHAPES or sys.argv[3:] not in ([], ["q4_1"]):
        sys.exit(f"usage: random_gguf.py {{{'|'.join(SHAPES)}}} OUT.gguf [q4_1]  |  random_gguf.py --f16-bytes SHAPE")
    name, path = sys.argv[1], sys.argv[2]
    matrices = Q4_1 if sys.argv[3:] == ["q4_1"] else F16
    shape = SHAPES[name]
    vocab, d, ffn, layers, heads, kv_heads, hd, theta, eps = shape
    meta = [
        kv("general.architecture", STRING, "llama"),
        kv("general.name", STRING, f"random {name}"),
        kv("general.alignment", U32, ALIGN),
        kv("general.file_type", U32, 3 if matrices == Q4_1 else 1),
        kv("llama.block_count", U32, layers),
        kv("llama.context_length", U32, 8192),
        kv("llama.embedding_length", U32, d),
        kv("llama.feed_forward_length", U32, ffn),
        kv("llama.attention.head_count", U32, heads),
        kv("llama.attention.head_count_kv", U32, kv_heads),
        kv("llama.attention.key_length", U32, hd),
        kv("llama.attention.value_length", U32, hd),
        kv("llama.rope.dimension_count", U32, hd),
        kv("llama.rope.freq_base", F32_KV, theta),
        kv("llama.attention.layer_norm_rms_epsilon", F32_KV, eps),
        kv("llama.vocab_size", U32, vocab),
        kv("tokenizer.ggml.model", STRING, "none"),
    ]
    infos, offset, plan = [], 0, list(tensors(shape, matrices))
    for tname, rows, cols, kind in plan:
        dims = [cols] if rows == 1 else [cols, rows]
        infos.append(string(tname) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", x) for x in dims)
                     + struct.pack("<I", kind) + struct.pack("<Q", offset))
        offset += -(-nbytes(rows, cols, kind) // ALIGN) * ALIGN
    rng = np.random.default_rng(20261203)
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(plan), len(meta)) + b"".join(meta) + b"".join(infos))
        f.write(b"\0" * (-f.tell() % ALIGN))
        for tname, rows, cols, kind in plan:
            if kind == F32:
                data = np.ones(cols, dtype=np.float32).tobytes()
            else:
                x = rng.standard_normal((rows, cols), dtype=np.float32) * 0.02
                data = q4_1(x) if kind == Q4_1 else x.astype(np.float16).tobytes()
            f.write(data)
            f.write(b"\0" * (-f.tell() % ALIGN))
    print(f"{path}: {name}, {sum(r * c for _, r, c, _ in plan) / 1e6:.0f}M parameters")


if __name__ == "__main__":
    main()
