//! Constrained decoding: a request's grammar (a JSON schema, any JSON object, a Lark
//! grammar, a regex, or llama.cpp's GBNF) compiled by llguidance against the model's
//! vocabulary into a [`Constraint`]; each run of it keeps a [`Guide`], which gives the
//! allowed-token mask before a token is sampled and takes the sampled token after.
//! The compiler (llguidance's `ParserFactory`: the vocabulary trie and its token-mask
//! slices) is built once per model, on the first constrained request.

mod gbnf;
mod guide;
mod vocab;

use std::sync::{Arc, OnceLock};

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory, TokenParser};
use serde_json::Value;

pub use guide::Guide;

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;

/// What a request constrains its output to, as the client wrote it.
#[derive(Debug, Clone, PartialEq)]
pub enum GrammarSource {
    /// Output that validates against this JSON schema (OpenAI's `json_schema`,
    /// llama.cpp's `json_schema`).
    JsonSchema(Value),
    /// Any JSON object (OpenAI's `json_object`).
    JsonObject,
    /// llguidance's Lark dialect.
    Lark(String),
    /// llama.cpp's GBNF (its `grammar` field).
    Gbnf(String),
    /// A whole-output regular expression (Rust `regex` syntax).
    Regex(String),
}

impl GrammarSource {
    /// The grammar llguidance compiles.
    fn top_level(&self) -> Result<TopLevelGrammar> {
        Ok(match self {
            GrammarSource::JsonSchema(schema) => {
                if !(schema.is_object() || schema.is_boolean()) {
                    return Err(Error::Grammar("a JSON schema is an object (or true / false)".into()));
                }
                TopLevelGrammar::from_json_schema(bounded_json_whitespace(schema.clone()))
            }
            GrammarSource::JsonObject => TopLevelGrammar::from_json_schema(bounded_json_whitespace(serde_json::json!({ "type": "object" }))),
            GrammarSource::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
            GrammarSource::Gbnf(text) => TopLevelGrammar::from_lark(gbnf::to_lark(text).map_err(Error::Grammar)?),
            GrammarSource::Regex(rx) => TopLevelGrammar::from_regex(rx),
        })
    }

    /// A short name for messages (`JSON schema`, `GBNF grammar`).
    pub fn kind(&self) -> &'static str {
        match self {
            GrammarSource::JsonSchema(_) => "JSON schema",
            GrammarSource::JsonObject => "JSON object",
            GrammarSource::Lark(_) => "Lark grammar",
            GrammarSource::Gbnf(_) => "GBNF grammar",
            GrammarSource::Regex(_) => "regex",
        }
    }
}

/// The whitespace JSON output may have between two tokens of JSON: one space, or one or
/// two line breaks and up to twenty spaces or tabs of indentation (llama.cpp's JSON
/// schema grammars bound it the same way). Unbounded, a small model can fill the
/// answer with blank lines that the grammar cannot refuse.
const JSON_WHITESPACE: &str = r"(\x20|\x0A{1,2}[\x20\x09]{0,20})";

/// `schema` compiled with [`JSON_WHITESPACE`], unless it sets llguidance's own JSON
/// options (`x-guidance`); for schemas written into a Lark grammar (`%json`) too.
pub fn bounded_json_whitespace(mut schema: Value) -> Value {
    if let Some(fields) = schema.as_object_mut() {
        fields.entry("x-guidance").or_insert_with(|| serde_json::json!({ "whitespace_pattern": JSON_WHITESPACE }));
    }
    schema
}

/// A compiled grammar, ready to guide any number of runs (cheap to clone).
#[derive(Clone)]
pub struct Constraint {
    kind: &'static str,
    parser: Arc<TokenParser>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Constraint({})", self.kind)
    }
}

impl PartialEq for Constraint {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.parser, &other.parser)
    }
}

impl Constraint {
    /// A fresh run's state.
    pub(crate) fn guide(&self) -> Guide {
        Guide::new(Matcher::new(Ok(TokenParser::clone(&self.parser))))
    }

    /// How many of `tokens`, from the first, the grammar takes (checks of a grammar's
    /// shape without a model choosing the tokens).
    #[cfg(feature = "lab")]
    pub fn accepted_prefix(&self, tokens: &[u32]) -> usize {
        Matcher::new(Ok(TokenParser::clone(&self.parser))).validate_tokens(tokens).unwrap_or(0)
    }

    /// What kind of grammar it was (`JSON schema`, …).
    pub fn kind(&self) -> &'static str {
        self.kind
    }
}

/// The refusal of a constrained request (a `kind` grammar) by a runtime of `backend`
/// that does not mask its logits.
pub(crate) fn unsupported(backend: &str, kind: &str) -> Error {
    Error::Grammar(format!(
        "this {kind} cannot be followed: this server's runtime ({backend}) does not apply grammars yet; constrained output runs on the CPU runtimes"
    ))
}

/// The grammar compiler of one model, built on first use.
#[derive(Default)]
pub struct Grammars {
    factory: OnceLock<std::result::Result<Arc<ParserFactory>, String>>,
}

impl Grammars {
    /// Compiles `source` for `tokenizer`'s vocabulary (padded to `vocab_size` logits):
    /// a grammar the library rejects, or one no token can start, is
    /// [`Error::Grammar`] with the library's reason.
    pub fn compile(&self, tokenizer: &Tokenizer, vocab_size: usize, source: &GrammarSource) -> Result<Constraint> {
        let factory = self.factory.get_or_init(|| build_factory(tokenizer, vocab_size).map(Arc::new)).clone().map_err(Error::Grammar)?;
        let grammar = source.top_level()?;
        let parser = factory.create_parser(grammar).map_err(|e| Error::Grammar(e.to_string()))?;
        let constraint = Constraint { kind: source.kind(), parser: Arc::new(parser) };
        // Errors that show only once the parser runs (a grammar whose first token no
        // vocabulary entry can begin) are the client's too: find them before queueing.
        constraint.guide().allowed().map_err(Error::Grammar)?;
        Ok(constraint)
    }
}

/// The compiler over the model's vocabulary, quiet (its warnings would go to stderr)
/// and with short error messages (they go back to clients).
fn build_factory(tokenizer: &Tokenizer, vocab_size: usize) -> std::result::Result<ParserFactory, String> {
    let env = vocab::tok_env(tokenizer, vocab_size).map_err(|e| e.to_string())?;
    let mut factory = ParserFactory::new_simple(&env).map_err(|e| format!("building the grammar compiler: {e}"))?;
    factory.quiet();
    factory.limits_mut().verbose_errors = false;
    Ok(factory)
}
