"""Drives Peregrine's /v1 API with the official `openai` client: chat and
completions, streamed and not, with include_usage and logprobs. Usage:
python openai_client.py BASE_URL MODEL_ID. Exits non-zero on the first mismatch."""

import sys

import openai
from openai import OpenAI

base, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=120)
messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]

models = client.models.list()
assert [m.id for m in models.data] == [model], models

# Completions, not streamed, with logprobs.
c = client.completions.create(model=model, prompt="def fib(n):", max_tokens=4, temperature=0, logprobs=2)
text = c.choices[0].text
assert text and c.choices[0].finish_reason in ("stop", "length"), c
assert c.usage.completion_tokens == len(c.choices[0].logprobs.tokens), c
assert all(lp <= 0 for lp in c.choices[0].logprobs.token_logprobs), c

# Completions, streamed, with include_usage: same greedy text, usage in the last chunk.
chunks = list(client.completions.create(model=model, prompt="def fib(n):", max_tokens=4, temperature=0, stream=True, stream_options={"include_usage": True}))
assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == text, chunks
assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == c.usage.completion_tokens, chunks[-1]

# Scoring a prompt: echo + max_tokens 0.
s = client.completions.create(model=model, prompt="Hello world", max_tokens=0, echo=True, logprobs=1)
assert s.choices[0].text == "Hello world" and s.choices[0].logprobs.token_logprobs[0] is None, s

# Chat, not streamed, with logprobs.
r = client.chat.completions.create(model=model, messages=messages, max_tokens=3, temperature=0, logprobs=True, top_logprobs=2)
answer = r.choices[0].message.content
assert answer and r.choices[0].message.role == "assistant", r
assert len(r.choices[0].logprobs.content) == r.usage.completion_tokens, r
assert all(len(t.top_logprobs) == 2 for t in r.choices[0].logprobs.content), r

# Chat, streamed, with include_usage and logprobs.
stream = client.chat.completions.create(model=model, messages=messages, max_tokens=3, temperature=0, stream=True, stream_options={"include_usage": True}, logprobs=True)
parts, usage, lps = [], None, 0
for ch in stream:
    if ch.usage is not None:
        usage = ch.usage
    for choice in ch.choices:
        if choice.delta.content:
            parts.append(choice.delta.content)
        if choice.logprobs and choice.logprobs.content:
            lps += len(choice.logprobs.content)
assert "".join(parts) == answer, (parts, answer)
assert usage is not None and usage.completion_tokens == r.usage.completion_tokens == lps, (usage, lps)

# Errors arrive as the client's typed exceptions.
try:
    client.chat.completions.create(model="no-such-model", messages=messages, max_tokens=1)
    raise AssertionError("expected a 404")
except openai.NotFoundError as e:
    assert e.status_code == 404
try:
    client.completions.create(model=model, prompt="x", n=9)
    raise AssertionError("expected a 400")
except openai.BadRequestError as e:
    assert e.status_code == 400
two = client.completions.create(model=model, prompt="x", n=2, max_tokens=2, logit_bias={"1": -100}, presence_penalty=0.5)
assert [c.index for c in two.choices] == [0, 1], two

print(f"openai {openai.__version__}: completions {text!r}, chat {answer!r}; all checks passed")
