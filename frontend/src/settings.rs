//! The settings form: what the user typed (strings, so any input can be judged and
//! explained), its validation into `GenerationParams`, and what is remembered in
//! localStorage. Ranges come from `peregrine_api`, so the form rejects exactly what
//! the server would.

use peregrine_api::playground::{GenerationParams, Mode, DEFAULT_MAX_TOKENS, MAX_MAX_TOKENS, MAX_PROMPT_BYTES};
use serde::{Deserialize, Serialize};

/// localStorage key of the remembered settings.
pub const STORAGE_KEY: &str = "peregrine.settings.v1";

/// A settings field, for attaching an error message to its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    MaxTokens,
    Temperature,
    TopP,
    Seed,
    JsonSchema,
}

/// The form as typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsForm {
    pub max_tokens: String,
    pub temperature: String,
    pub top_p: String,
    /// Empty = a random seed per run.
    pub seed: String,
    pub ignore_eos: bool,
    /// A JSON schema the answer must follow (the server constrains the output to it);
    /// empty = none.
    pub json_schema: String,
}

impl Default for SettingsForm {
    fn default() -> Self {
        SettingsForm::from_params(&GenerationParams::default())
    }
}

fn number<T: std::str::FromStr>(s: &str) -> Option<T> {
    s.trim().parse().ok()
}

impl SettingsForm {
    /// The form showing `params`.
    pub fn from_params(p: &GenerationParams) -> Self {
        SettingsForm {
            max_tokens: p.max_tokens.to_string(),
            temperature: p.temperature.to_string(),
            top_p: p.top_p.to_string(),
            seed: p.seed.map(|s| s.to_string()).unwrap_or_default(),
            ignore_eos: p.ignore_eos,
            json_schema: String::new(),
        }
    }

    /// The JSON schema asked for: `Ok(None)` when the field is empty.
    pub fn schema(&self) -> Result<Option<serde_json::Value>, String> {
        if self.json_schema.trim().is_empty() {
            return Ok(None);
        }
        match serde_json::from_str::<serde_json::Value>(&self.json_schema) {
            Ok(v) if v.is_object() || v.is_boolean() => Ok(Some(v)),
            Ok(_) => Err("A JSON schema is an object, such as {\"type\": \"object\"}.".into()),
            Err(e) => Err(format!("The JSON schema is not valid JSON: {e}.")),
        }
    }

    /// Every field's problem, in form order (empty when valid).
    pub fn errors(&self) -> Vec<(Field, String)> {
        let mut errors = Vec::new();
        match number::<u32>(&self.max_tokens) {
            Some(n) if (1..=MAX_MAX_TOKENS).contains(&n) => {}
            _ => errors.push((Field::MaxTokens, format!("Max tokens must be a whole number from 1 to {MAX_MAX_TOKENS}."))),
        }
        match number::<f32>(&self.temperature) {
            Some(t) if t.is_finite() && (0.0..=2.0).contains(&t) => {}
            _ => errors.push((Field::Temperature, "Temperature must be a number from 0 to 2 (0 = greedy).".into())),
        }
        match number::<f32>(&self.top_p) {
            Some(p) if p > 0.0 && p <= 1.0 => {}
            _ => errors.push((Field::TopP, "Top-p must be greater than 0 and at most 1.".into())),
        }
        if !self.seed.trim().is_empty() && number::<u64>(&self.seed).is_none() {
            errors.push((Field::Seed, "Seed must be a whole number (or empty for a random seed).".into()));
        }
        if let Err(e) = self.schema() {
            errors.push((Field::JsonSchema, e));
        }
        errors
    }

    /// The error of one field, if any.
    pub fn error(&self, field: Field) -> Option<String> {
        self.errors().into_iter().find(|(f, _)| *f == field).map(|(_, m)| m)
    }

    /// The parameters, or every problem; `top_k` and `stop` keep the defaults.
    pub fn params(&self) -> Result<GenerationParams, Vec<(Field, String)>> {
        let errors = self.errors();
        if !errors.is_empty() {
            return Err(errors);
        }
        let p = GenerationParams {
            max_tokens: number(&self.max_tokens).unwrap_or(DEFAULT_MAX_TOKENS),
            temperature: number(&self.temperature).unwrap_or(0.0),
            top_p: number(&self.top_p).unwrap_or(1.0),
            seed: number(&self.seed),
            ignore_eos: self.ignore_eos,
            ..GenerationParams::default()
        };
        // The shared check is the last word; the per-field checks above explain it.
        p.validate().map_err(|m| vec![(Field::MaxTokens, m)])?;
        Ok(p)
    }
}

/// The prompt's problem, if any (the server's limits, checked before sending).
pub fn prompt_error(prompt: &str) -> Option<String> {
    if prompt.trim().is_empty() {
        Some("Write a prompt first.".into())
    } else if prompt.len() > MAX_PROMPT_BYTES {
        Some(format!("The prompt is {} KiB; the limit is {} KiB.", prompt.len().div_ceil(1024), MAX_PROMPT_BYTES / 1024))
    } else {
        None
    }
}

/// What localStorage remembers between visits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Remembered {
    pub mode: Mode,
    /// "auto" or a syntax name.
    pub language: String,
    pub params: GenerationParams,
    pub prompt: Option<String>,
}

impl Remembered {
    /// Parses a stored value; anything unreadable or invalid gives the defaults.
    pub fn from_json(s: Option<&str>) -> Self {
        let r: Remembered = s.and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
        if r.params.validate().is_err() {
            return Remembered { params: GenerationParams::default(), ..r };
        }
        r
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_round_trip() {
        let f = SettingsForm::default();
        assert_eq!(f.errors(), vec![]);
        assert_eq!(f.params().unwrap(), GenerationParams::default());
        let p = GenerationParams {
            max_tokens: 16,
            temperature: 0.7,
            top_p: 0.9,
            seed: Some(42),
            ignore_eos: true,
            ..GenerationParams::default()
        };
        assert_eq!(SettingsForm::from_params(&p).params().unwrap(), p);
    }

    #[test]
    fn every_bad_field_is_named() {
        let f = SettingsForm {
            max_tokens: "0".into(),
            temperature: "3".into(),
            top_p: "0".into(),
            seed: "-1".into(),
            ignore_eos: false,
            json_schema: "{\"type\":".into(),
        };
        let fields: Vec<Field> = f.errors().into_iter().map(|(f, _)| f).collect();
        assert_eq!(fields, vec![Field::MaxTokens, Field::Temperature, Field::TopP, Field::Seed, Field::JsonSchema]);
        assert!(f.error(Field::JsonSchema).unwrap().starts_with("The JSON schema is not valid JSON"));
        assert!(f.error(Field::MaxTokens).unwrap().contains("1 to 4096"));
        for bad in ["", "abc", "4097", "1.5", "-3"] {
            let f = SettingsForm { max_tokens: bad.into(), ..SettingsForm::default() };
            assert!(f.params().is_err(), "{bad:?}");
        }
        let f = SettingsForm { temperature: "NaN".into(), top_p: " 0.5 ".into(), seed: " ".into(), ..SettingsForm::default() };
        assert_eq!(f.errors().len(), 1);
    }

    #[test]
    fn a_json_schema_is_an_object_or_nothing() {
        let with = |s: &str| SettingsForm { json_schema: s.into(), ..SettingsForm::default() };
        assert_eq!(with("  ").schema(), Ok(None));
        assert_eq!(with(r#"{"type": "object"}"#).schema(), Ok(Some(serde_json::json!({"type": "object"}))));
        assert!(with("[1]").schema().unwrap_err().contains("is an object"));
        assert_eq!(with("[1]").errors().len(), 1);
    }

    #[test]
    fn prompts_must_be_non_empty_and_fit() {
        assert_eq!(prompt_error("  \n"), Some("Write a prompt first.".into()));
        assert_eq!(prompt_error("x"), None);
        assert!(prompt_error(&"x".repeat(MAX_PROMPT_BYTES + 1)).unwrap().contains("limit is 64 KiB"));
    }

    #[test]
    fn remembered_settings_survive_garbage() {
        assert_eq!(Remembered::from_json(Some("{not json")), Remembered::default());
        assert_eq!(Remembered::from_json(None), Remembered::default());
        let bad = r#"{"mode":"chat","params":{"max_tokens":0}}"#;
        let r = Remembered::from_json(Some(bad));
        assert_eq!((r.mode, r.params.max_tokens), (Mode::Chat, DEFAULT_MAX_TOKENS));
        let good = Remembered {
            mode: Mode::Chat,
            language: "Rust".into(),
            params: GenerationParams { max_tokens: 8, ..Default::default() },
            prompt: Some("fn".into()),
        };
        assert_eq!(Remembered::from_json(Some(&good.to_json())), good);
    }
}
