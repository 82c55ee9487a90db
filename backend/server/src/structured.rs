//! Structured output: the request fields that constrain an answer (llama.cpp's
//! `grammar` (GBNF, or llguidance's Lark after a `%llguidance` line, as llama.cpp
//! takes it) and `json_schema`; OpenAI's `response_format`; the Responses API's
//! `text.format`) read into one engine grammar and compiled before the request
//! queues, so a bad grammar, a bad schema or a runtime that cannot follow one is a 400
//! naming the field, with the compiler's reason.

use peregrine_engine::{Constraint, GrammarSource};
use serde_json::Value;

use crate::engine_slot::LoadedEngine;
use crate::error::{Error, Result};

/// A grammar and the field it came from (for messages).
#[derive(Debug)]
pub struct Asked {
    pub param: String,
    pub source: GrammarSource,
}

/// llama.cpp's `grammar`: GBNF, or Lark when it starts with llguidance's directive; an
/// empty string (llama.cpp's default) asks for nothing.
pub fn grammar(value: Option<&Value>) -> Result<Option<Asked>> {
    let text = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => return Ok(None),
        Some(Value::String(s)) => s,
        Some(_) => return Err(Error::bad("grammar", "grammar must be a string (a GBNF grammar)")),
    };
    let source = if text.trim_start().starts_with("%llguidance") {
        GrammarSource::Lark(text.clone())
    } else {
        GrammarSource::Gbnf(text.clone())
    };
    Ok(Some(Asked { param: "grammar".into(), source }))
}

/// llama.cpp's `json_schema`: a JSON schema object.
pub fn json_schema(value: Option<&Value>) -> Result<Option<Asked>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(schema) => Ok(Some(Asked { param: "json_schema".into(), source: schema_source("json_schema", schema)? })),
    }
}

/// OpenAI's `response_format` (`param` is its name on the route): `{type: "text"}`,
/// `{type: "json_object"}` (llama.cpp also takes a `schema` beside it), or
/// `{type: "json_schema", json_schema: {name, schema, strict, description}}`. A
/// schema is always enforced, `strict` or not.
pub fn response_format(param: &str, value: Option<&Value>) -> Result<Option<Asked>> {
    let format = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(Error::bad(param, format!("{param} must be an object such as {{\"type\": \"json_object\"}}"))),
    };
    let at = |k: &str| format!("{param}.{k}");
    let kind = format.get("type").and_then(Value::as_str).ok_or_else(|| Error::bad(&at("type"), format!("{} is required", at("type"))))?;
    let (allowed, source): (&[&str], Option<GrammarSource>) = match kind {
        "text" => (&["type"], None),
        "json_object" => match format.get("schema") {
            None | Some(Value::Null) => (&["type", "schema"], Some(GrammarSource::JsonObject)),
            Some(schema) => (&["type", "schema"], Some(schema_source(&at("schema"), schema)?)),
        },
        "json_schema" => {
            let spec = format.get("json_schema").ok_or_else(|| Error::bad(&at("json_schema"), format!("{} is required", at("json_schema"))))?;
            let spec_at = at("json_schema");
            let spec = spec.as_object().ok_or_else(|| Error::bad(&spec_at, format!("{spec_at} must be an object")))?;
            if let Some(key) = spec.keys().find(|k| !matches!(k.as_str(), "name" | "schema" | "strict" | "description")) {
                let field = format!("{spec_at}.{key}");
                return Err(Error::bad(&field, format!("Unrecognized request argument supplied: {field}")));
            }
            let schema = spec.get("schema").filter(|s| !s.is_null());
            let source = match schema {
                Some(schema) => schema_source(&format!("{spec_at}.schema"), schema)?,
                None => GrammarSource::JsonObject,
            };
            (&["type", "json_schema"], Some(source))
        }
        other => {
            return Err(Error::bad(
                &at("type"),
                format!("{}: `{}` is not one of text, json_object, json_schema", at("type"), crate::error::shorten(other)),
            ))
        }
    };
    if let Some(key) = format.keys().find(|k| !allowed.contains(&k.as_str())) {
        let field = at(key);
        return Err(Error::bad(&field, format!("Unrecognized request argument supplied: {field}")));
    }
    Ok(source.map(|source| Asked { param: param.to_string(), source }))
}

/// The Responses API's `text`: `{format: {type: "text" | "json_object"}}` or
/// `{format: {type: "json_schema", name, schema, strict, description}}`.
pub fn responses_text(value: Option<&Value>) -> Result<Option<Asked>> {
    let text = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(Error::bad("text", "text must be an object such as {\"format\": {\"type\": \"text\"}}")),
    };
    if let Some(key) = text.keys().find(|k| *k != "format") {
        let field = format!("text.{key}");
        return Err(Error::bad(&field, format!("`{field}` is not supported on /v1/responses")));
    }
    let Some(format) = text.get("format").filter(|f| !f.is_null()) else { return Ok(None) };
    let Some(fields) = format.as_object() else {
        return Err(Error::bad("text.format", "text.format must be an object such as {\"type\": \"json_object\"}"));
    };
    if fields.get("type").and_then(Value::as_str) != Some("json_schema") {
        return response_format("text.format", Some(format));
    }
    // The Responses API writes the schema's fields beside `type` rather than inside a
    // `json_schema` object.
    let mut spec = fields.clone();
    spec.remove("type");
    response_format("text.format", Some(&serde_json::json!({ "type": "json_schema", "json_schema": spec })))
}

/// At most one of the asked grammars (a second one would be silently ignored).
pub fn one_of(asked: Vec<Option<Asked>>) -> Result<Option<Asked>> {
    let mut given: Vec<Asked> = asked.into_iter().flatten().collect();
    if given.len() > 1 {
        let names: Vec<&str> = given.iter().map(|a| a.param.as_str()).collect();
        return Err(Error::bad(&given[1].param, format!("give one of {} (they all constrain the output)", names.join(", "))));
    }
    Ok(given.pop())
}

fn schema_source(param: &str, schema: &Value) -> Result<GrammarSource> {
    if !(schema.is_object() || schema.is_boolean()) {
        return Err(Error::bad(param, format!("{param} must be a JSON schema (an object)")));
    }
    Ok(GrammarSource::JsonSchema(schema.clone()))
}

/// `asked` compiled for the engine's model on a tokenizer thread; a grammar the
/// compiler rejects, or an engine whose runtime does not follow grammars, is a 400
/// naming the field.
pub async fn compile(engine: &LoadedEngine, asked: Option<Asked>) -> Result<Option<Constraint>> {
    let Some(Asked { param, source }) = asked else { return Ok(None) };
    if !engine.handle.follows_grammars() {
        let backend = &engine.handle.info().backend;
        return Err(Error::bad(
            &param,
            format!("`{param}` cannot be followed: this server's runtime ({backend}) does not apply grammars yet; constrained output runs on the CPU runtimes"),
        ));
    }
    let text = engine.handle.text().clone();
    let compiled = crate::blocking::tokenizer_task(move || text.constraint(&source)).await?;
    compiled.map(Some).map_err(|e| match e {
        peregrine_engine::Error::Grammar(m) | peregrine_engine::Error::InvalidRequest(m) => Error::bad(&param, format!("invalid {param}: {m}")),
        other => Error::Engine(other),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn param_of(r: Result<Option<Asked>>) -> String {
        r.unwrap_err().param().unwrap().to_string()
    }

    #[test]
    fn each_form_reads_into_its_grammar() {
        let a = grammar(Some(&json!("root ::= \"x\""))).unwrap().unwrap();
        assert!(matches!(a.source, GrammarSource::Gbnf(_)) && a.param == "grammar");
        let a = grammar(Some(&json!("%llguidance {}\nstart: \"x\""))).unwrap().unwrap();
        assert!(matches!(a.source, GrammarSource::Lark(_)));
        assert!(grammar(Some(&json!(""))).unwrap().is_none());
        let rf = |v: Value| response_format("response_format", Some(&v)).unwrap().map(|a| a.source);
        assert_eq!(rf(json!({"type": "text"})), None);
        assert_eq!(rf(json!({"type": "json_object"})), Some(GrammarSource::JsonObject));
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        assert_eq!(
            rf(json!({"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": true}})),
            Some(GrammarSource::JsonSchema(schema.clone()))
        );
        assert_eq!(rf(json!({"type": "json_object", "schema": schema})), Some(GrammarSource::JsonSchema(schema.clone())));
        let text = responses_text(Some(&json!({"format": {"type": "json_schema", "name": "x", "schema": schema, "strict": true}})));
        assert_eq!(text.unwrap().unwrap().source, GrammarSource::JsonSchema(schema));
        assert!(responses_text(Some(&json!({"format": {"type": "text"}}))).unwrap().is_none());
    }

    #[test]
    fn mistakes_name_their_field() {
        assert_eq!(param_of(grammar(Some(&json!(3)))), "grammar");
        assert_eq!(param_of(json_schema(Some(&json!("x")))), "json_schema");
        assert_eq!(param_of(response_format("response_format", Some(&json!({"type": "yaml"})))), "response_format.type");
        assert_eq!(param_of(response_format("response_format", Some(&json!({"type": "json_schema"})))), "response_format.json_schema");
        assert_eq!(
            param_of(response_format("response_format", Some(&json!({"type": "json_schema", "json_schema": {"schema": {}, "strictly": 1}})))),
            "response_format.json_schema.strictly"
        );
        assert_eq!(param_of(response_format("response_format", Some(&json!({"type": "text", "x": 1})))), "response_format.x");
        assert_eq!(param_of(responses_text(Some(&json!({"verbosity": "low"})))), "text.verbosity");
        let both = one_of(vec![grammar(Some(&json!("root ::= \"a\""))).unwrap(), json_schema(Some(&json!({}))).unwrap()]);
        assert_eq!(param_of(both), "json_schema");
    }
}
