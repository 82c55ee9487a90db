"""Drives the real `peregrine serve` behind an API key with the official clients:
OpenAI's Responses API (`openai`, Bearer key) and Anthropic's Messages API
(`anthropic`, x-api-key), streamed and not; llama.cpp's native /completion with and
without streaming (with a GBNF grammar too); the OpenAI routes without /v1; chat with
`response_format` json_schema on 24 schemas, each answer validated by `jsonschema`;
an invalid grammar and an invalid schema each a 400 naming the field; tools with
`tool_choice: "required"` (arguments validated), the same calls streamed as deltas, and a
tool round trip; Responses function tools (a required call, streamed, a
`function_call_output` round trip); Anthropic tool use forced (`any`), through the
SDK's stream, and a `tool_result` round trip. Usage:
python agent_clients.py BASE_URL MODEL_ID API_KEY. Exits non-zero on the first mismatch."""

import json
import re
import sys
import urllib.error
import urllib.request

import anthropic
import jsonschema
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
expect_error(openai.BadRequestError, lambda: oai.responses.create(model=model, input="Hi", tools=[{"type": "web_search"}]), "tools[0].type")
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
# count_tokens renders the same prompt: every token the answer's prompt took, computed or reused.
counted = ant.messages.count_tokens(model=model, system=mask["system"], messages=conversation)
assert counted.input_tokens == m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0), (counted, m.usage)
expect_error(anthropic.BadRequestError, lambda: ant.messages.count_tokens(model=model, messages=[]), "messages")

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
expect_error(anthropic.BadRequestError, lambda: ant.messages.create(**mask, tools=[{"name": "t"}]), "tools[0].input_schema")
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
status, text = post("/completion", {**body, "n_predict": 12, "grammar": 'root ::= "fib" [a-z]{1,6} ";"'})
assert status == 200, text
fixed = json.loads(text)["content"]
assert re.fullmatch(r"fib[a-z]{1,6};", fixed) and json.loads(text)["stop_type"] == "eos", text
status, text = post("/completion", {**body, "grammar": "root ::= [a-z"})
error = json.loads(text)["error"]
assert status == 400 and error["param"] == "grammar" and "unterminated character class" in error["message"], text
status, text = post("/completion", {**body, "json_schema": {"type": "object", "properties": {"a": {"type": "strng"}}}})
assert status == 400 and json.loads(text)["error"]["param"] == "json_schema", text

bare = OpenAI(base_url=base, api_key=key, max_retries=0, timeout=120)
assert [x.id for x in bare.models.list().data] == [model]
chat = bare.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=3, temperature=0)
assert chat.choices[0].message.content, chat
done = bare.completions.create(model=model, prompt="def fib(n):", max_tokens=6, temperature=0)
assert done.choices[0].text == whole["content"], (done, whole)

# --- Structured output: chat with response_format json_schema ----------------------------
def bounded_string(**extra):
    return {"type": "string", "maxLength": 24, **extra}


SCHEMAS = {
    "flat_required": {"type": "object", "properties": {"name": bounded_string(), "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"]},
    "enum_only": {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}}, "required": ["colour"]},
    "const_and_enum": {"type": "object", "properties": {"kind": {"const": "fruit"}, "taste": {"enum": ["sweet", "sour", "bitter"]}}, "required": ["kind", "taste"]},
    "boolean_and_null": {"type": "object", "properties": {"ok": {"type": "boolean"}, "note": {"type": "null"}}, "required": ["ok", "note"]},
    "integer_range": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 10, "maximum": 99}}, "required": ["n"]},
    "number_bounds": {"type": "object", "properties": {"price": {"type": "number", "minimum": 0, "maximum": 1000}}, "required": ["price"]},
    "exclusive_bounds": {"type": "object", "properties": {"t": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 50}}, "required": ["t"]},
    "array_of_strings": {"type": "object", "properties": {"tags": {"type": "array", "items": bounded_string(), "minItems": 1, "maxItems": 3}}, "required": ["tags"]},
    "array_of_integers": {"type": "object", "properties": {"scores": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 10}, "maxItems": 4}}, "required": ["scores"]},
    "array_of_enums": {"type": "object", "properties": {"days": {"type": "array", "items": {"enum": ["mon", "tue", "wed"]}, "minItems": 2, "maxItems": 3}}, "required": ["days"]},
    "nested_object": {"type": "object", "properties": {"user": {"type": "object", "properties": {"name": bounded_string(), "id": {"type": "integer", "minimum": 1, "maximum": 9999}}, "required": ["name", "id"], "additionalProperties": False}}, "required": ["user"]},
    "deeply_nested": {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "object", "properties": {"c": {"enum": ["x", "y"]}}, "required": ["c"]}}, "required": ["b"]}}, "required": ["a"]},
    "array_of_objects": {"type": "object", "properties": {"items": {"type": "array", "maxItems": 2, "items": {"type": "object", "properties": {"sku": bounded_string(), "qty": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["sku", "qty"], "additionalProperties": False}}}, "required": ["items"]},
    "optional_fields": {"type": "object", "properties": {"title": bounded_string(), "subtitle": bounded_string()}, "required": ["title"], "additionalProperties": False},
    "all_optional": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9}, "y": {"type": "integer", "minimum": 0, "maximum": 9}}, "additionalProperties": False},
    "strict_closed": {"type": "object", "properties": {"city": bounded_string(), "country": bounded_string()}, "required": ["city", "country"], "additionalProperties": False},
    "string_pattern": {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}}, "required": ["code"]},
    "string_format_date": {"type": "object", "properties": {"when": {"type": "string", "format": "date"}}, "required": ["when"]},
    "any_of": {"type": "object", "properties": {"value": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"enum": ["none"]}]}}, "required": ["value"]},
    "nullable_union": {"type": "object", "properties": {"middle": {"type": ["string", "null"], "maxLength": 12}}, "required": ["middle"]},
    "defs_and_ref": {"$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -9, "maximum": 9}, "y": {"type": "integer", "minimum": -9, "maximum": 9}}, "required": ["x", "y"], "additionalProperties": False}}, "type": "object", "properties": {"from": {"$ref": "#/$defs/point"}, "to": {"$ref": "#/$defs/point"}}, "required": ["from", "to"]},
    "top_level_array": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3},
    "mixed_record": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 99}, "active": {"type": "boolean"}, "ratio": {"type": "number", "minimum": 0, "maximum": 1}, "labels": {"type": "array", "items": {"enum": ["new", "old"]}, "maxItems": 2}, "owner": {"type": "object", "properties": {"name": bounded_string()}, "required": ["name"]}}, "required": ["id", "active", "ratio", "labels", "owner"]},
    "tuple_prefix_items": {"type": "object", "properties": {"pair": {"type": "array", "prefixItems": [{"type": "integer", "minimum": 0, "maximum": 9}, {"enum": ["on", "off"]}], "items": False, "minItems": 2}}, "required": ["pair"]},
}
assert len(SCHEMAS) >= 20


def closed(schema):
    """`schema` with every object closed to unlisted properties, as OpenAI's strict mode
    asks (an open object leaves a small model free to ramble until max_tokens)."""
    if isinstance(schema, dict):
        schema = {k: closed(v) for k, v in schema.items()}
        if schema.get("type") == "object" and "properties" in schema:
            schema.setdefault("additionalProperties", False)
    elif isinstance(schema, list):
        schema = [closed(v) for v in schema]
    return schema


SCHEMAS = {name: closed(schema) for name, schema in SCHEMAS.items()}
structured = OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=120)
for name, schema in SCHEMAS.items():
    jsonschema.Draft202012Validator.check_schema(schema)
    reply = structured.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": f"Reply with a JSON value for `{name.replace('_', ' ')}`."}],
        response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}},
        max_tokens=200,
        temperature=0,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop", (name, choice)
    jsonschema.validate(json.loads(choice.message.content), schema, format_checker=jsonschema.FormatChecker())

pieces = structured.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "A shopping list."}],
    response_format={"type": "json_schema", "json_schema": {"name": "list", "schema": SCHEMAS["array_of_objects"], "strict": True}},
    max_tokens=200,
    temperature=0,
    stream=True,
)
streamed = "".join(c.choices[0].delta.content or "" for c in pieces if c.choices)
jsonschema.validate(json.loads(streamed), SCHEMAS["array_of_objects"])
bad_schema = {"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "object", "properties": {"a": {"type": "integr"}}}}}
ask_chat = dict(model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
expect_error(openai.BadRequestError, lambda: structured.chat.completions.create(**ask_chat, response_format=bad_schema), "response_format")
expect_error(openai.BadRequestError, lambda: structured.chat.completions.create(**ask_chat, extra_body={"grammar": "root ::= (\"a\""}), "grammar")

# --- Tool calls: required, streamed deltas, a round trip --------------------------------
TOOL_PARAMS = {
    "get_weather": closed({"type": "object", "properties": {"city": bounded_string(), "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}),
    "get_time": closed({"type": "object", "properties": {"zone": bounded_string()}, "required": ["zone"]}),
}
tools = [{"type": "function", "function": {"name": n, "description": f"{n.replace('_', ' ')}", "parameters": p, "strict": True}} for n, p in TOOL_PARAMS.items()]
question = [{"role": "user", "content": "What is the weather in Paris?"}]
ask_tools = dict(model=model, messages=question, tools=tools, tool_choice="required", parallel_tool_calls=False, max_tokens=150, temperature=0)
called = structured.chat.completions.create(**ask_tools)
assert called.choices[0].finish_reason == "tool_calls", called
calls = called.choices[0].message.tool_calls
assert calls, called
for call in calls:
    jsonschema.validate(json.loads(call.function.arguments), TOOL_PARAMS[call.function.name])
gathered = {}
for chunk in structured.chat.completions.create(**ask_tools, stream=True):
    for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
        entry = gathered.setdefault(delta.index, {"name": "", "arguments": ""})
        entry["name"] += delta.function.name or ""
        entry["arguments"] += delta.function.arguments or ""
reassembled = [(e["name"], json.loads(e["arguments"])) for _, e in sorted(gathered.items())]
assert reassembled == [(c.function.name, json.loads(c.function.arguments)) for c in calls], (reassembled, calls)
history = question + [
    {"role": "assistant", "content": None, "tool_calls": [{"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}} for c in calls]},
] + [{"role": "tool", "tool_call_id": c.id, "content": "18 degrees, sunny"} for c in calls]
reply = structured.chat.completions.create(model=model, messages=history, tools=tools, tool_choice="none", max_tokens=24, temperature=0)
assert reply.choices[0].message.content and not reply.choices[0].message.tool_calls, reply
expect_error(openai.BadRequestError, lambda: structured.chat.completions.create(**{**ask_tools, "tool_choice": {"type": "function", "function": {"name": "nope"}}}), "tool_choice.function.name")

# --- Responses function tools: a required call, streamed, a function_call_output round trip
flat_tools = [{"type": "function", "name": n, "description": n.replace("_", " "), "parameters": p, "strict": True} for n, p in TOOL_PARAMS.items()]
ask_resp = dict(model=model, input="What is the weather in Paris?", tools=flat_tools, tool_choice="required", parallel_tool_calls=False, max_output_tokens=150, temperature=0)
fc = oai.responses.create(**ask_resp)
fcalls = [o for o in fc.output if o.type == "function_call"]
assert fc.status == "completed" and len(fcalls) == 1, fc
jsonschema.validate(json.loads(fcalls[0].arguments), TOOL_PARAMS[fcalls[0].name])
fevents = list(oai.responses.create(**ask_resp, stream=True))
fdone = [e for e in fevents if e.type == "response.function_call_arguments.done"]
assert len(fdone) == 1 and json.loads(fdone[0].arguments) == json.loads(fcalls[0].arguments), fevents
after = oai.responses.create(
    model=model, max_output_tokens=24, temperature=0, tools=flat_tools, tool_choice="none",
    input=[
        {"role": "user", "content": "What is the weather in Paris?"},
        {"type": "function_call", "call_id": fcalls[0].call_id, "name": fcalls[0].name, "arguments": fcalls[0].arguments},
        {"type": "function_call_output", "call_id": fcalls[0].call_id, "output": "18 degrees, sunny"},
    ],
)
assert after.output_text, after

# --- Anthropic tool use: a forced call, the SDK's stream, a tool_result round trip --------
ant_tools = [{"name": n, "description": n.replace("_", " "), "input_schema": p} for n, p in TOOL_PARAMS.items()]
ask_ant = dict(model=model, max_tokens=150, messages=question, tools=ant_tools, tool_choice={"type": "any", "disable_parallel_tool_use": True}, extra_body={"temperature": 0})
used = ant.messages.create(**ask_ant)
assert used.stop_reason == "tool_use", used
uses = [b for b in used.content if b.type == "tool_use"]
assert len(uses) == 1, used
jsonschema.validate(uses[0].input, TOOL_PARAMS[uses[0].name])
with ant.messages.stream(**ask_ant) as s:
    final = s.get_final_message()
assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == [(uses[0].name, uses[0].input)], final
answered = ant.messages.create(
    model=model, max_tokens=24, tools=ant_tools, tool_choice={"type": "none"}, extra_body={"temperature": 0},
    messages=question + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": uses[0].id, "name": uses[0].name, "input": uses[0].input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "18 degrees, sunny"}]},
    ],
)
assert answered.content[0].type == "text" and answered.content[0].text, answered

print(f"openai {openai.__version__}, anthropic {anthropic.__version__}: responses {answer!r}, messages {said!r}, /completion {whole['content']!r}, grammar {fixed!r}; {len(SCHEMAS)} schemas validated; tool calls {[c.function.name for c in calls]}, function_call {fcalls[0].name}, tool_use {uses[0].name}; all checks passed")
