//! Whether an answer validates against the JSON schema the playground asked for: the
//! server constrains the output to the schema, and the page checks the result itself
//! (the output pane says so), for the keywords that decide a value's shape. A keyword
//! it does not check is named in the verdict, never passed over in silence.

use serde_json::{Map, Value};

/// What checking an answer found.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The answer validates; `unchecked` keywords (sorted, each once) were not checked.
    Valid { unchecked: Vec<String> },
    /// It does not: the first reason, with where (a JSON pointer).
    Invalid(String),
}

/// Keywords that annotate a schema without constraining values.
const ANNOTATIONS: &[&str] = &["$schema", "$id", "title", "description", "default", "examples", "$comment"];

/// `answer` (the output text) against `schema`.
pub fn check(schema: &Value, answer: &str) -> Verdict {
    let value: Value = match serde_json::from_str(answer.trim()) {
        Ok(v) => v,
        Err(e) => return Verdict::Invalid(format!("not JSON: {e}")),
    };
    let mut unchecked = Vec::new();
    match validate(schema, &value, "", &mut unchecked) {
        Ok(()) => {
            unchecked.sort();
            unchecked.dedup();
            Verdict::Valid { unchecked }
        }
        Err(why) => Verdict::Invalid(why),
    }
}

fn validate(schema: &Value, v: &Value, at: &str, unchecked: &mut Vec<String>) -> Result<(), String> {
    let s = match schema {
        Value::Bool(true) => return Ok(()),
        Value::Bool(false) => return Err(format!("{}: no value is allowed", place(at))),
        Value::Object(s) => s,
        _ => return Err("the schema is not an object".into()),
    };
    for (key, rule) in s {
        match key.as_str() {
            "type" => check_type(rule, v, at)?,
            "enum" => {
                if !rule.as_array().is_some_and(|options| options.contains(v)) {
                    return Err(format!("{}: {v} is not one of {rule}", place(at)));
                }
            }
            "const" if rule != v => return Err(format!("{}: {v} is not {rule}", place(at))),
            "const" => {}
            // The three object keywords are checked together, once.
            "properties" => check_object(s, v, at, unchecked)?,
            "required" | "additionalProperties" if !s.contains_key("properties") => check_object(s, v, at, unchecked)?,
            "required" | "additionalProperties" => {}
            "items" => {
                if let Value::Array(items) = v {
                    for (i, item) in items.iter().enumerate() {
                        validate(rule, item, &format!("{at}/{i}"), unchecked)?;
                    }
                }
            }
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => check_bound(key, rule, v, at)?,
            "minLength" | "maxLength" => {
                if let Value::String(text) = v {
                    within(key, rule, text.chars().count(), at)?;
                }
            }
            "minItems" | "maxItems" => {
                if let Value::Array(items) = v {
                    within(key, rule, items.len(), at)?;
                }
            }
            "anyOf" | "oneOf" => {
                let options = rule.as_array().map(Vec::as_slice).unwrap_or_default();
                let fits = options.iter().filter(|o| validate(o, v, at, &mut Vec::new()).is_ok()).count();
                let ok = if key == "anyOf" { fits > 0 } else { fits == 1 };
                if !ok {
                    return Err(format!("{}: matches {fits} of the {key} schemas", place(at)));
                }
            }
            k if ANNOTATIONS.contains(&k) => {}
            other => unchecked.push(other.to_string()),
        }
    }
    Ok(())
}

fn check_type(rule: &Value, v: &Value, at: &str) -> Result<(), String> {
    let names: Vec<&str> = match rule {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return Err("`type` is neither a name nor a list".into()),
    };
    let is = |t: &str| match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "number" => v.is_number(),
        "integer" => v.as_i64().is_some() || v.as_u64().is_some() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => false,
    };
    if names.iter().any(|t| is(t)) {
        Ok(())
    } else {
        Err(format!("{}: {v} is not of type {rule}", place(at)))
    }
}

/// `properties`, `required` and `additionalProperties` together (checked once per object).
fn check_object(s: &Map<String, Value>, v: &Value, at: &str, unchecked: &mut Vec<String>) -> Result<(), String> {
    let Value::Object(o) = v else { return Ok(()) };
    let props = s.get("properties").and_then(Value::as_object);
    for name in s.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        if !o.contains_key(name) {
            return Err(format!("{}: the required property {name:?} is missing", place(at)));
        }
    }
    for (name, value) in o {
        let here = format!("{at}/{name}");
        match (props.and_then(|p| p.get(name)), s.get("additionalProperties")) {
            (Some(sub), _) => validate(sub, value, &here, unchecked)?,
            (None, Some(extra)) => validate(extra, value, &here, unchecked)?,
            (None, None) => {}
        }
    }
    Ok(())
}

fn check_bound(key: &str, rule: &Value, v: &Value, at: &str) -> Result<(), String> {
    let (Some(x), Some(limit)) = (v.as_f64(), rule.as_f64()) else { return Ok(()) };
    let ok = match key {
        "minimum" => x >= limit,
        "maximum" => x <= limit,
        "exclusiveMinimum" => x > limit,
        _ => x < limit,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{}: {v} breaks {key} {rule}", place(at)))
    }
}

fn within(key: &str, rule: &Value, n: usize, at: &str) -> Result<(), String> {
    let Some(limit) = rule.as_u64() else { return Ok(()) };
    let ok = if key.starts_with("min") { n as u64 >= limit } else { n as u64 <= limit };
    if ok {
        Ok(())
    } else {
        Err(format!("{}: {n} breaks {key} {limit}", place(at)))
    }
}

/// A JSON pointer for messages ("the answer" at the root).
fn place(at: &str) -> String {
    if at.is_empty() {
        "the answer".into()
    } else {
        at.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn person() -> Value {
        json!({
            "type": "object",
            "title": "Person",
            "properties": {
                "name": { "type": "string", "maxLength": 5 },
                "age": { "type": "integer", "minimum": 0, "maximum": 150 },
                "role": { "enum": ["admin", "user"] },
                "tags": { "type": "array", "items": { "type": "string" }, "maxItems": 2 }
            },
            "required": ["name", "age"],
            "additionalProperties": false
        })
    }

    fn invalid(schema: &Value, answer: &str) -> String {
        match check(schema, answer) {
            Verdict::Invalid(why) => why,
            v => panic!("{answer} passed: {v:?}"),
        }
    }

    #[test]
    fn a_valid_answer_passes_and_annotations_are_not_unchecked() {
        let v = check(&person(), r#" {"name": "Ada", "age": 36, "role": "admin", "tags": ["x"]} "#);
        assert_eq!(v, Verdict::Valid { unchecked: vec![] });
    }

    #[test]
    fn each_checked_keyword_can_fail() {
        let s = person();
        assert!(invalid(&s, r#"{"name": "Ada""#).starts_with("not JSON"));
        assert!(invalid(&s, r#"{"name": "Ada"}"#).contains("\"age\" is missing"));
        assert!(invalid(&s, r#"{"name": "Adalbert", "age": 1}"#).contains("/name: 8 breaks maxLength 5"));
        assert!(invalid(&s, r#"{"name": "Ada", "age": 1.5}"#).contains("/age"));
        assert!(invalid(&s, r#"{"name": "Ada", "age": 200}"#).contains("breaks maximum"));
        assert!(invalid(&s, r#"{"name": "Ada", "age": 1, "role": "root"}"#).contains("not one of"));
        assert!(invalid(&s, r#"{"name": "Ada", "age": 1, "tags": ["a", "b", "c"]}"#).contains("maxItems"));
        assert!(invalid(&s, r#"{"name": "Ada", "age": 1, "tags": [1]}"#).contains("/tags/0"));
        assert!(invalid(&s, r#"{"name": "Ada", "age": 1, "extra": true}"#).contains("/extra: no value is allowed"));
        assert!(invalid(&s, r#"[1]"#).contains("not of type"));
        assert!(invalid(&json!({"const": 3}), "4").contains("is not 3"));
        assert!(invalid(&json!({"oneOf": [{"type": "integer"}, {"type": "number"}]}), "2").contains("matches 2 of the oneOf"));
        assert_eq!(check(&json!({"anyOf": [{"type": "string"}, {"type": "null"}]}), "null"), Verdict::Valid { unchecked: vec![] });
    }

    #[test]
    fn keywords_it_does_not_check_are_named() {
        let s = json!({"type": "string", "pattern": "^a", "format": "email"});
        assert_eq!(check(&s, r#""abc""#), Verdict::Valid { unchecked: vec!["format".into(), "pattern".into()] });
    }
}
