//! Fill-in-the-middle prompts against llama.cpp: for each recorded `/infill` case
//! (fixtures/fim, made by scripts/fixtures/make_fim_fixtures.py with llama-server), the
//! default model's vocabulary with the same control tokens renamed to FIM tokens gives
//! the same prompt text and the same number of tokens as llama.cpp's layout. The
//! default model itself has no FIM tokens and says so.

mod common;

use std::collections::BTreeMap;

use common::llamacpp::default_model;
use peregrine_engine::generator::TextModel;
use peregrine_engine::gguf::{GgufFile, MetaValue};
use peregrine_engine::infill::{self, ExtraFile, InfillBudget, InfillInput};
use peregrine_engine::tokenizer::Tokenizer;
use serde_json::Value;

fn fixture() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fim/llamacpp_infill.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("the FIM fixture")).expect("JSON")
}

/// The default model's tokenizer metadata with `renames` (id → text) applied.
fn renamed_metadata(renames: &BTreeMap<usize, String>) -> BTreeMap<String, MetaValue> {
    let mut meta = GgufFile::open(&default_model()).expect("the default model").metadata;
    let Some(MetaValue::Array(tokens)) = meta.get_mut("tokenizer.ggml.tokens") else { panic!("a token list") };
    for (&id, text) in renames {
        tokens[id] = MetaValue::String(text.clone());
    }
    meta
}

fn text_model(meta: &BTreeMap<String, MetaValue>) -> TextModel {
    let tokenizer = Tokenizer::from_gguf_metadata(meta).expect("tokenizer");
    let vocab_size = tokenizer.vocab_size();
    TextModel::new(Some(tokenizer), None, vocab_size)
}

fn input_of(case: &Value) -> InfillInput {
    let s = |k: &str| case[k].as_str().unwrap_or_default().to_string();
    let extra = case["input_extra"]
        .as_array()
        .map(|files| {
            files
                .iter()
                .map(|f| ExtraFile { filename: f["filename"].as_str().unwrap_or("tmp").into(), text: f["text"].as_str().unwrap().into() })
                .collect()
        })
        .unwrap_or_default();
    InfillInput { prefix: s("input_prefix"), suffix: s("input_suffix"), extra, prompt: s("prompt") }
}

#[test]
fn the_layout_equals_llama_cpp_for_every_recorded_case() {
    let f = fixture();
    let renames: BTreeMap<usize, String> =
        f["renamed_tokens"].as_object().unwrap().iter().map(|(k, v)| (k.parse().unwrap(), v.as_str().unwrap().to_string())).collect();
    let text = text_model(&renamed_metadata(&renames));
    let tok = text.tokenizer.as_ref().unwrap();
    let fim = tok.fim().expect("the renamed vocabulary has FIM tokens");
    assert_eq!((fim.pre, fim.suf, fim.mid, fim.sep, fim.rep), (7, 8, 9, Some(5), Some(4)));
    let b = &f["budget"];
    let budget = InfillBudget {
        batch: b["batch"].as_u64().unwrap() as usize,
        predict: b["predict"].as_i64().unwrap(),
        context: b["context"].as_u64().unwrap() as usize,
    };
    let cases = f["cases"].as_array().unwrap();
    assert!(cases.len() >= 8);
    for c in cases {
        let name = c["case"]["name"].as_str().unwrap();
        let ids = infill::prompt_ids(&text, &input_of(&c["case"]), &budget).expect("laid out");
        assert_eq!(tok.decode(&ids).unwrap(), c["prompt"].as_str().unwrap(), "{name}: the prompt text");
        assert_eq!(ids.len() as u64, c["tokens_evaluated"].as_u64().unwrap(), "{name}: the prompt's token count");
        assert_eq!(ids.iter().filter(|&&t| t == fim.pre).count(), 1, "{name}: user text never becomes a FIM token");
    }
}

#[test]
fn a_model_without_fim_tokens_says_which_are_missing() {
    let text = text_model(&renamed_metadata(&BTreeMap::new()));
    let err = infill::supported(&text).expect_err("no FIM tokens").to_string();
    assert!(err.contains("no FIM prefix, suffix, middle tokens"), "{err}");
    let no_tokenizer = TextModel::new(None, None, 10);
    assert!(infill::supported(&no_tokenizer).unwrap_err().to_string().contains("no tokenizer"));
}

#[test]
fn declared_gguf_keys_take_precedence_over_token_texts() {
    let mut meta = renamed_metadata(&[(7, "<|fim_prefix|>".to_string())].into());
    meta.insert("tokenizer.ggml.fim_pre_token_id".into(), MetaValue::U32(12));
    meta.insert("tokenizer.ggml.fim_suf_token_id".into(), MetaValue::U32(13));
    meta.insert("tokenizer.ggml.fim_mid_token_id".into(), MetaValue::U32(14));
    let text = text_model(&meta);
    let fim = text.tokenizer.as_ref().unwrap().fim().expect("declared");
    assert_eq!((fim.pre, fim.suf, fim.mid), (12, 13, 14));
}
