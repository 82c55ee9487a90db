//! The default model's GGUF tokenizer against llama.cpp's own tokenization (fixtures from
//! scripts/fixtures/make_llamacpp_fixtures.py), plus decode / detokenizer / chat-template
//! checks on the real vocabulary.

use std::path::{Path, PathBuf};

use peregrine_engine::gguf::GgufFile;
use peregrine_engine::template::{ChatMessage, ChatTemplate};
use peregrine_engine::tokenizer::Tokenizer;
use serde::Deserialize;

#[derive(Deserialize)]
struct Corpus {
    n_vocab: usize,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    /// `Llama.tokenize(text, add_bos=False, special=True)`.
    special: Vec<u32>,
    /// `Llama.tokenize(text, add_bos=False, special=False)`.
    plain: Vec<u32>,
}

#[derive(Deserialize)]
struct Forward {
    prompts: Vec<Prompt>,
}

#[derive(Deserialize)]
struct Prompt {
    name: String,
    text: String,
    tokens: Vec<u32>,
    greedy: Vec<u32>,
    /// `Llama.detokenize(greedy)` read as UTF-8 with replacement.
    greedy_text: String,
}

fn model_path() -> PathBuf {
    match std::env::var_os("PEREGRINE_DEFAULT_MODEL") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/peregrine/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
    }
}

fn load() -> Tokenizer {
    let path = model_path();
    assert!(path.is_file(), "default model missing at {}: run scripts/fetch-model.sh", path.display());
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{e}"))
}

fn fixture<T: for<'de> Deserialize<'de>>(name: &str) -> T {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llamacpp").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Encodes every case with `encode` and reports every mismatch at once.
fn compare(tok: &Tokenizer, plain: bool) {
    let corpus: Corpus = fixture("tokenize.json");
    let mut bad = Vec::new();
    let mut ids_total = 0;
    for case in &corpus.cases {
        let (want, got) = if plain {
            (&case.plain, tok.encode_plain(&case.text, false).unwrap())
        } else {
            (&case.special, tok.encode(&case.text, false).unwrap())
        };
        ids_total += want.len();
        if &got != want {
            bad.push(format!("{:?}\n  llama.cpp {want:?}\n  peregrine {got:?}", case.text));
        }
    }
    assert!(bad.is_empty(), "{} of {} cases differ:\n{}", bad.len(), corpus.cases.len(), bad.join("\n"));
    assert!(ids_total > 500, "corpus unexpectedly small: {ids_total} ids");
}

#[test]
fn corpus_matches_llamacpp_with_special_parsing() {
    compare(&load(), false);
}

#[test]
fn corpus_matches_llamacpp_with_specials_as_text() {
    compare(&load(), true);
}

#[test]
fn forward_prompts_tokenize_and_detokenize_like_llamacpp() {
    let tok = load();
    let forward: Forward = fixture("forward.json");
    for p in &forward.prompts {
        assert_eq!(tok.encode(&p.text, true).unwrap(), p.tokens, "{}", p.name);
        assert_eq!(tok.decode(&p.greedy).unwrap(), p.greedy_text, "{}", p.name);
    }
}

#[test]
fn special_tokens_and_vocab() {
    let tok = load();
    let corpus: Corpus = fixture("tokenize.json");
    assert_eq!(tok.vocab_size(), corpus.n_vocab);
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_id(), Some(2));
    // llama.cpp's end-of-generation set for this model: <|im_end|> (eos) and <|endoftext|>.
    assert_eq!(tok.eos_ids(), [0, 2]);
    assert!(!tok.adds_bos(), "SmolLM2's GGUF sets add_bos_token = false");
    assert_eq!(tok.encode("<|im_start|>", true).unwrap(), [1]);
    assert_eq!(tok.token_text(1).as_deref(), Some("<|im_start|>"));
    assert_eq!(tok.token_id("<|im_end|>"), Some(2));
    assert!(tok.decode(&[u32::MAX]).is_err());
}

#[test]
fn decode_is_lossless_on_the_corpus() {
    let tok = load();
    let corpus: Corpus = fixture("tokenize.json");
    for case in &corpus.cases {
        assert_eq!(tok.decode(&case.special).unwrap(), case.text);
        assert_eq!(tok.decode(&case.plain).unwrap(), case.text);
    }
}

/// Pushes ids one at a time; returns the deltas (the last one is `finish`).
fn stream(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
    let mut d = tok.detokenizer();
    let mut deltas: Vec<String> = ids.iter().map(|&id| d.push(id).unwrap()).collect();
    deltas.push(d.finish());
    deltas
}

#[test]
fn detokenizer_deltas_concatenate_to_decode() {
    let tok = load();
    let corpus: Corpus = fixture("tokenize.json");
    let forward: Forward = fixture("forward.json");
    let sequences = corpus
        .cases
        .iter()
        .map(|c| c.special.clone())
        .chain(forward.prompts.iter().map(|p| p.tokens.iter().chain(&p.greedy).copied().collect()));
    for ids in sequences {
        assert_eq!(stream(&tok, &ids).concat(), tok.decode(&ids).unwrap(), "{ids:?}");
    }
    // Arbitrary windows cut chars in half; deltas still never hold broken UTF-8
    // (they are `String`s) and still add up to the one-shot decode.
    let all: Vec<u32> = corpus.cases.iter().flat_map(|c| c.special.clone()).collect();
    for start in 0..all.len().min(64) {
        let ids = &all[start..];
        assert_eq!(stream(&tok, ids).concat(), tok.decode(ids).unwrap());
    }
}

#[test]
fn emoji_spelled_over_several_tokens_arrives_whole() {
    let tok = load();
    let text = "crab 🦀 family 👨‍👩‍👧‍👦";
    let ids = tok.encode(text, false).unwrap();
    let deltas = stream(&tok, &ids);
    assert!(deltas[..ids.len()].iter().any(String::is_empty), "expected some token to end mid-char, deltas {deltas:?}");
    assert!(deltas.iter().any(|d| d.contains('🦀')), "{deltas:?}");
    assert_eq!(deltas.concat(), text);
}

#[test]
fn models_own_chat_template_renders_chatml() {
    let tok = load();
    let template = ChatTemplate::from_tokenizer(&tok).unwrap().expect("SmolLM2 ships a chat template");
    let messages = [ChatMessage::new("user", "Hi!"), ChatMessage::new("assistant", "Hello! How can I help?")];
    let text = template.render(&messages, false).unwrap();
    let corpus: Corpus = fixture("tokenize.json");
    let case = corpus.cases.iter().find(|c| c.text == text).expect("the corpus holds this exact ChatML prompt");
    assert_eq!(tok.encode(&text, false).unwrap(), case.special);
    let prompt = template.render(&messages[..1], true).unwrap();
    assert!(prompt.ends_with("<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"), "{prompt}");
}

#[test]
fn exported_tokenizer_json_loads_back_with_its_configs() {
    let tok = load();
    let dir = std::env::temp_dir().join(format!("peregrine-tok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokenizer.json"), tok.to_json().unwrap()).unwrap();
    let config = serde_json::json!({
        "bos_token": "<|im_start|>",
        "eos_token": {"content": "<|im_end|>"},
        "chat_template": tok.chat_template().unwrap(),
    });
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    std::fs::write(dir.join("generation_config.json"), r#"{"eos_token_id": [2, 0]}"#).unwrap();
    let hf = Tokenizer::from_file(&dir);
    std::fs::remove_dir_all(&dir).ok();
    let hf = hf.unwrap();
    assert_eq!((hf.bos_id(), hf.eos_id(), hf.eos_ids()), (Some(1), Some(2), &[0, 2][..]));
    assert!(!hf.adds_bos());
    assert_eq!(hf.chat_template(), tok.chat_template());
    let corpus: Corpus = fixture("tokenize.json");
    for case in &corpus.cases {
        let ids = hf.encode(&case.text, false).unwrap();
        assert_eq!(ids, case.special, "{:?}", case.text);
        assert_eq!(hf.decode(&ids).unwrap(), case.text);
    }
}

#[test]
fn missing_tokenizer_json_is_an_error() {
    let err = Tokenizer::from_file(Path::new("/nonexistent/tokenizer.json")).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/tokenizer.json"), "{err}");
}
