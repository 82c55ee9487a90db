//! Chat-template tests: expected prompts were rendered once by Jinja2 in transformers'
//! environment (trim_blocks, lstrip_blocks, loopcontrols, json.dumps `tojson`).

use super::*;

const BOS: &str = "<|begin_of_text|>";
const EOS: &str = "<|eot_id|>";

/// SmolLM2-135M-Instruct's own ChatML template (as stored in its GGUF).
const SMOLLM2: &str = r#"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system
You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
' }}{% endif %}{{'<|im_start|>' + message['role'] + '
' + message['content'] + '<|im_end|>' + '
'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %}"#;

/// Qwen2.5-Instruct's template, tool-call branch trimmed.
const QWEN2: &str = r#"{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "tool" %}
        {{- '<|im_start|>user\n<tool_response>\n' + message.content + '\n</tool_response><|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"#;

/// Meta-Llama-3-Instruct's template.
const LLAMA3: &str = r#"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"#;

/// Exercises what HF templates lean on: raise_exception, loop controls, Python string and dict methods, tojson.
const FEATURES: &str = r#"{% if messages | length == 0 %}{{ raise_exception('need at least one message') }}{% endif %}
{% for m in messages %}
  {% if m.role == 'system' %}{% continue %}{% endif %}
  [{{ loop.index }}:{{ m.role | upper }}] {{ m.content.strip() }}{{ '|' if m.content.startswith(' ') else '' }}
  {% if m.content.endswith('STOP') %}{% break %}{% endif %}
{% endfor %}
{{ {'k': messages[0].content} | tojson }}
{% for k, v in {'a': 1}.items() %}{{ k }}={{ v }}{% endfor %}
{{ '-'.join(['x', 'y']) }} {{ 'a,b'.split(',') | length }}
"#;

fn conversation(with_system: bool) -> Vec<ChatMessage> {
    let mut m = if with_system { vec![ChatMessage::new("system", "Be terse.")] } else { vec![] };
    m.extend(vec![
        ChatMessage::new("user", "Write fizzbuzz in Rust."),
        ChatMessage::new("assistant", "  fn main() {}\n"),
        ChatMessage::new("user", "Thanks!"),
    ]);
    m
}

fn render(source: &str, messages: &[ChatMessage]) -> String {
    ChatTemplate::new(source, BOS, EOS).unwrap().render(messages, true).unwrap()
}

#[test]
fn smol_matches_jinja2() {
    assert_eq!(render(SMOLLM2, &conversation(false)), "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWrite fizzbuzz in Rust.<|im_end|>\n<|im_start|>assistant\n  fn main() {}\n<|im_end|>\n<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n");
    assert_eq!(render(SMOLLM2, &conversation(true)), "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nWrite fizzbuzz in Rust.<|im_end|>\n<|im_start|>assistant\n  fn main() {}\n<|im_end|>\n<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n");
}

#[test]
fn qwen2_matches_jinja2() {
    assert_eq!(render(QWEN2, &conversation(false)), "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nWrite fizzbuzz in Rust.<|im_end|>\n<|im_start|>assistant\n  fn main() {}\n<|im_end|>\n<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n");
    assert_eq!(render(QWEN2, &conversation(true)), "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nWrite fizzbuzz in Rust.<|im_end|>\n<|im_start|>assistant\n  fn main() {}\n<|im_end|>\n<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n");
}

#[test]
fn llama3_matches_jinja2() {
    assert_eq!(render(LLAMA3, &conversation(false)), "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWrite fizzbuzz in Rust.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nfn main() {}<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nThanks!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    assert_eq!(render(LLAMA3, &conversation(true)), "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWrite fizzbuzz in Rust.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nfn main() {}<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nThanks!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

#[test]
fn hf_features_match_jinja2() {
    let messages = vec![
        ChatMessage::new("system", "sys"),
        ChatMessage::new("user", " hi there "),
        ChatMessage::new("user", "now STOP"),
        ChatMessage::new("user", "never"),
    ];
    assert_eq!(render(FEATURES, &messages), "  [2:USER] hi there|\n  [3:USER] now STOP\n{\"k\": \"sys\"}\na=1x-y 2");
}

#[test]
fn raise_exception_becomes_a_template_error() {
    let err = ChatTemplate::new(FEATURES, BOS, EOS).unwrap().render(&[], true).unwrap_err();
    assert!(matches!(err, Error::Template(_)));
    assert!(err.to_string().contains("need at least one message"), "{err}");
}

#[test]
fn syntax_error_is_reported_at_compile_time() {
    let err = ChatTemplate::new("{% for m in messages %}", BOS, EOS).unwrap_err();
    assert!(matches!(err, Error::Template(_)), "{err}");
}

#[test]
fn no_generation_prompt_and_strftime() {
    let t = ChatTemplate::new(SMOLLM2, BOS, EOS).unwrap();
    let text = t.render(&[ChatMessage::new("user", "hi")], false).unwrap();
    assert!(text.ends_with("<|im_start|>user\nhi<|im_end|>\n"), "{text}");
    let dated = ChatTemplate::new("{{ strftime_now('%Y') }}", BOS, EOS).unwrap().render(&[], false).unwrap();
    assert!(dated.len() == 4 && dated.starts_with('2'), "{dated}");
}

#[test]
fn tojson_indent_and_messages_from_json() {
    // Field order is the struct's, as Python keeps a message dict's insertion order.
    let messages: Vec<ChatMessage> = serde_json::from_str(r#"[{"role":"user","content":"<b>"}]"#).unwrap();
    let t = ChatTemplate::new("{{ messages | tojson(indent=2) }}|{{ messages[0] | tojson }}", BOS, EOS).unwrap();
    assert_eq!(
        t.render(&messages, false).unwrap(),
        "[\n  {\n    \"role\": \"user\",\n    \"content\": \"<b>\"\n  }\n]|{\"role\": \"user\", \"content\": \"<b>\"}"
    );
}

/// A template in Qwen2.5's shape that lists `tools` and asks for `<tool_call>` blocks.
const TOOLS_TEMPLATE: &str = r#"{%- if tools %}{{- '<|im_start|>system\nTools:\n<tools>' }}{%- for tool in tools %}{{- '\n' }}{{- tool | tojson }}{%- endfor %}{{- '\n</tools>\nCall one as:\n<tool_call>\n{"name": <name>, "arguments": <object>}\n</tool_call><|im_end|>\n' }}{%- endif %}{%- for message in messages %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"#;

#[test]
fn a_template_that_writes_tool_calls_lists_the_tools_itself() {
    let t = ChatTemplate::new(TOOLS_TEMPLATE, BOS, EOS).unwrap();
    assert!(t.writes_tool_calls());
    let tool = serde_json::json!({ "type": "function", "function": { "name": "get_weather", "parameters": { "type": "object" } } });
    let messages = [ChatMessage::new("user", "Weather in Paris?")];
    let with = t.render_with_tools(&messages, &[tool], true).unwrap();
    assert!(with.starts_with("<|im_start|>system\nTools:\n<tools>\n{") && with.contains("\"name\": \"get_weather\""), "{with}");
    assert!(with.ends_with("</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"), "{with}");
    assert_eq!(t.render(&messages, true).unwrap(), "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n");
    for plain in [SMOLLM2, QWEN2, LLAMA3] {
        assert!(!ChatTemplate::new(plain, BOS, EOS).unwrap().writes_tool_calls());
    }
}
