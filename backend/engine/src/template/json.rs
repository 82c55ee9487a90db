//! The `tojson` filter as transformers defines it (`json.dumps`, `ensure_ascii=False`), so
//! tool schemas in prompts are spaced like Python prints them and `<`/`>` stay unescaped
//! (minijinja's built-in filter is HTML-safe and compact, which changes the prompt).

use minijinja::value::{Kwargs, Value};
use minijinja::{Error, ErrorKind};
use serde::Serialize;
use serde_json::ser::{Formatter, PrettyFormatter, Serializer};

/// `value | tojson` / `tojson(value, indent=2)`.
pub fn tojson(value: &Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match indent.or(kwargs.get::<Option<Value>>("indent")?) {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => Some(usize::try_from(v).map_err(|_| bad("indent must be a non-negative integer"))?),
    };
    // Python's defaults we already match; accepting them keeps templates that pass them working.
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    let _: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let mut out = Vec::new();
    let written = match indent {
        Some(n) => {
            let spaces = vec![b' '; n];
            value.serialize(&mut Serializer::with_formatter(&mut out, PrettyFormatter::with_indent(&spaces)))
        }
        None => value.serialize(&mut Serializer::with_formatter(&mut out, PythonFormatter)),
    };
    written.map_err(|e| bad(&format!("tojson: {e}")))?;
    let text = String::from_utf8(out).map_err(|_| bad("tojson produced invalid UTF-8"))?;
    Ok(Value::from(text))
}

fn bad(msg: &str) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.to_owned())
}

/// `json.dumps` without indent: `", "` between items and `": "` after keys.
struct PythonFormatter;

impl Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}
