//! A request's speculative-decoding fields made into the engine's settings, checked
//! against what the runtime's step verifies: every bad value is a 400 naming the
//! field, so no client can make a step verify more rows than the runtime declared.

use peregrine_api::speculative::SpeculativeParams;
use peregrine_engine::{SpeculativeMode, SpeculativeRequest, VerifyCapacity};

use crate::error::{Error, Result};

/// The field names, as clients send them.
const MODE_FIELD: &str = "speculative";
const N_MAX_FIELD: &str = "speculative.n_max";

/// The engine's speculative settings of a request on a runtime that verifies `capacity`.
pub fn engine_request(params: &SpeculativeParams, capacity: VerifyCapacity) -> Result<SpeculativeRequest> {
    let mode = match params.speculative.as_deref() {
        None => None,
        Some(name) => Some(
            SpeculativeMode::parse(name).ok_or_else(|| Error::bad(MODE_FIELD, format!("speculative must be \"lookup\" or \"off\", not {name:?}")))?,
        ),
    };
    if mode == Some(SpeculativeMode::Lookup) && capacity.max_draft() == 0 {
        return Err(Error::bad(MODE_FIELD, "speculative \"lookup\" needs a runtime that verifies drafts; this one verifies one token per step (send \"off\" or nothing)"));
    }
    let n_max = match params.n_max {
        None => None,
        Some(n) if n < 0 => return Err(Error::bad(N_MAX_FIELD, format!("speculative.n_max must be at least 0, not {n}"))),
        Some(n) if n as u64 > capacity.max_draft() as u64 => {
            return Err(Error::bad(
                N_MAX_FIELD,
                format!("speculative.n_max ({n}) is more than the {} drafted tokens this runtime verifies per step", capacity.max_draft()),
            ))
        }
        Some(n) => Some(n as usize),
    };
    Ok(SpeculativeRequest { mode, n_max, ..SpeculativeRequest::default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(mode: Option<&str>, n_max: Option<i64>) -> SpeculativeParams {
        SpeculativeParams { speculative: mode.map(str::to_string), n_max }
    }

    fn field_of(r: Result<SpeculativeRequest>) -> Option<String> {
        match r {
            Err(Error::BadRequest { param, .. }) => param,
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn bad_values_name_their_field() {
        let cap = VerifyCapacity { rows: 8, row_cost: 0.4 };
        assert_eq!(field_of(engine_request(&ask(Some("ngram"), None), cap)).as_deref(), Some(MODE_FIELD));
        assert_eq!(field_of(engine_request(&ask(None, Some(-1)), cap)).as_deref(), Some(N_MAX_FIELD));
        assert_eq!(field_of(engine_request(&ask(None, Some(8)), cap)).as_deref(), Some(N_MAX_FIELD));
        assert_eq!(field_of(engine_request(&ask(None, Some(i64::MAX)), cap)).as_deref(), Some(N_MAX_FIELD));
        assert_eq!(field_of(engine_request(&ask(Some("lookup"), None), VerifyCapacity::SINGLE)).as_deref(), Some(MODE_FIELD));
        let ok = engine_request(&ask(Some("lookup"), Some(7)), cap).unwrap();
        assert_eq!((ok.mode, ok.n_max), (Some(SpeculativeMode::Lookup), Some(7)));
        let off = engine_request(&ask(Some("off"), None), VerifyCapacity::SINGLE).unwrap();
        assert_eq!(off.mode, Some(SpeculativeMode::Off));
    }
}
