"""Drives the real `peregrine serve` behind an API key with the official clients:
OpenAI's Responses API (`openai`, Bearer key) and Anthropic's Messages API
(`anthropic`, x-api-key), streamed and not; llama.cpp's native /completion with and
without streaming; the OpenAI routes without /v1. Usage:
python agent_clients.py BASE_URL MODEL_ID API_KEY. Exits non-zero on the first mismatch."""

import json
import sys
import urllib.error
import urllib.request

import anthropic
import openai
from anthropic import Anthropic
from openai import OpenAI

base, model, key = sys.argv[1], sys.argv[2], sys.argv[3]


def expect_error(kind, call, field):
    """`call` raises the client's `kind` of error, its message naming `field`."""
    try:
        call()
    except kind as e:
        assert field in str(e), (field, str(e))
        return e
    raise AssertionError(f"expected {kind.__name__} naming {field}")


# --- OpenAI Responses API -------------------------------------------------------------
oai = OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=120)
turns = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": [{"type": "output_text", "text": "Hello! How can I help?"}]},
    {"role": "user", "content": [{"type": "input_text", "text": "Name one colour."}]},
]
ask = dict(model=model, instructions="Answer in one word.", input=turns, max_output_tokens=8, temperature=0)

r = oai.responses.create(**ask)
assert r.object == "response" and r.status in ("completed", "incomplete"), r
answer = r.output_text
assert answer, r
assert r.output[0].role == "assistant" and r.output[0].content[0].type == "output_text", r
assert 0 < r.usage.output_tokens <= 8 and r.usage.input_tokens > 0, r.usage
assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens, r.usage
if r.status == "incomplete":
    assert r.incomplete_details.reason == "max_output_tokens" and r.usage.output_tokens == 8, r

events = list(oai.responses.create(**ask, stream=True))
types = [e.type for e in events]
assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"], types
assert types[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"], types
assert types[-1] == ("response.completed" if r.status == "completed" else "response.incomplete"), types
assert [e.sequence_number for e in events] == list(range(len(events))), events
streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
assert streamed == answer == events[-4].text, (streamed, answer)
assert events[-1].response.output_text == answer and events[-1].response.usage.output_tokens == r.usage.output_tokens

one = oai.responses.create(model=model, input="Say hi.", max_output_tokens=2)
assert one.usage.output_tokens <= 2, one.usage
expect_error(openai.BadRequestError, lambda: oai.responses.create(model=model, input="Hi", extra_body={"max_output_token": 3}), "max_output_token")
tool = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}
expect_error(openai.BadRequestError, lambda: oai.responses.create(model=model, input="Hi", tools=[tool]), "tools")
expect_error(openai.BadRequestError, lambda: oai.responses.create(model=model, input="Hi", previous_response_id="resp_1"), "previous_response_id")
try:
    OpenAI(base_url=f"{base}/v1", api_key="wrong-key", max_retries=0).responses.create(model=model, input="Hi")
    raise AssertionError("expected a 401")
except openai.AuthenticationError:
    pass

# --- Anthropic Messages API -----------------------------------------------------------
ant = Anthropic(base_url=base, api_key=key, max_retries=0, timeout=120)
conversation = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": [{"type": "text", "text": "Hello! How can I help?"}]},
    {"role": "user", "content": [{"type": "text", "text": "Name one colour.", "cache_control": {"type": "ephemeral"}}]},
]
# This SDK no longer has a `temperature` argument; the API still takes the field.
mask = dict(model=model, max_tokens=8, system="Answer in one word.", messages=conversation, metadata={"user_id": "t"}, extra_body={"temperature": 0})

m = ant.messages.create(**mask)
assert m.type == "message" and m.role == "assistant" and m.content[0].type == "text", m
said = m.content[0].text
assert said and m.stop_reason in ("end_turn", "max_tokens"), m
assert 0 < m.usage.output_tokens <= 8 and m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) > 0, m.usage

with ant.messages.stream(**mask) as s:
    text = "".join(s.text_stream)
    final = s.get_final_message()
assert text == said == final.content[0].text, (text, said)
assert final.stop_reason == m.stop_reason and final.usage.output_tokens == m.usage.output_tokens, final

raw = list(ant.messages.create(**mask, stream=True))
kinds = [e.type for e in raw]
assert kinds[:2] == ["message_start", "content_block_start"] and kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"], kinds
assert "".join(e.delta.text for e in raw if e.type == "content_block_delta") == said

expect_error(anthropic.BadRequestError, lambda: ant.messages.create(**{**mask, "extra_body": {"top_kk": 3}}), "top_kk")
expect_error(anthropic.BadRequestError, lambda: ant.messages.create(**mask, thinking={"type": "enabled", "budget_tokens": 1024}), "thinking")
expect_error(anthropic.BadRequestError, lambda: ant.messages.create(**mask, tools=[{"name": "t", "input_schema": {"type": "object"}}]), "tools")
image = {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}
expect_error(anthropic.BadRequestError, lambda: ant.messages.create(model=model, max_tokens=4, messages=[image]), "messages[0].content[0].type")
try:
    Anthropic(base_url=base, api_key="wrong-key", max_retries=0).messages.create(**mask)
    raise AssertionError("expected a 401")
except anthropic.AuthenticationError:
    pass

# --- llama.cpp's /completion and the routes without /v1 ---------------------------------
def post(path, payload):
    """The status and body lines of a POST with the key (plain HTTP: llama.cpp has no SDK)."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    request = urllib.request.Request(f"{base}{path}", data=json.dumps(payload).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as res:
            return res.status, res.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


body = {"prompt": "def fib(n):", "n_predict": 6, "temperature": 0}
status, text = post("/completion", body)
assert status == 200, text
whole = json.loads(text)
assert whole["stop"] is True and whole["content"] and 0 < whole["tokens_predicted"] <= 6, whole
assert whole["stop_type"] in ("eos", "limit") and whole["tokens_evaluated"] > 0 and "predicted_per_second" in whole["timings"], whole
status, text = post("/completion", {**body, "stream": True})
assert status == 200, text
pieces = [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]
assert "".join(p["content"] for p in pieces) == whole["content"], (pieces, whole)
assert pieces[-1]["stop"] is True and all(p["stop"] is False for p in pieces[:-1]), pieces
status, text = post("/completion", {**body, "grammar": "root ::= [a-z]+"})
assert status == 400 and json.loads(text)["error"]["param"] == "grammar", text

bare = OpenAI(base_url=base, api_key=key, max_retries=0, timeout=120)
assert [x.id for x in bare.models.list().data] == [model]
chat = bare.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=3, temperature=0)
assert chat.choices[0].message.content, chat
done = bare.completions.create(model=model, prompt="def fib(n):", max_tokens=6, temperature=0)
assert done.choices[0].text == whole["content"], (done, whole)

print(f"openai {openai.__version__}, anthropic {anthropic.__version__}: responses {answer!r}, messages {said!r}, /completion {whole['content']!r}; all checks passed")
