#!/usr/bin/env python3
"""Dumps llama.cpp's logits for the forward-pass fixture's prompts, for
`examples/fidelity.rs` to set beside ours against the float32 reference.

Every prompt of backend/engine/tests/fixtures/llamacpp/forward.json is evaluated in one
batch (teacher-forced, as the fixture's argmax was recorded) and its logits, one row of
n_vocab little-endian float32 per position, appended to OUT in the fixture's order.

Needs llama-cpp-python (the fixture's version, 0.3.36) and numpy.
usage: llamacpp_logits.py OUT.f32 [MODEL_GGUF] [THREADS]
"""
import json
import os
import sys

import numpy as np
from llama_cpp import Llama

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "backend/engine/tests/fixtures/llamacpp/forward.json")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    model = (sys.argv[2] if len(sys.argv) > 2 else None) or os.environ.get(
        "PEREGRINE_DEFAULT_MODEL", os.path.expanduser("~/.cache/peregrine/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    with open(FIXTURE, encoding="utf-8") as f:
        fixture = json.load(f)
    llm = Llama(model_path=model, logits_all=True, n_ctx=fixture["n_ctx"], n_threads=threads, seed=0, verbose=False)
    rows = 0
    with open(out, "wb") as f:
        for case in fixture["prompts"]:
            llm.reset()
            llm.eval(case["tokens"])
            logits = np.asarray(llm.scores[: len(case["tokens"])], dtype="<f4")
            f.write(logits.tobytes())
            rows += len(case["tokens"])
    print(f"wrote {rows} rows of {llm.n_vocab()} logits to {out}")


if __name__ == "__main__":
    main()
