//! The speculative-decoding fields a request may carry, on the playground and the
//! OpenAI routes alike (llama.cpp's names where it has them).

use serde::{Deserialize, Serialize};

/// `speculative` ("lookup" or "off"; absent: the server's `--speculative`) and
/// llama.cpp's `speculative.n_max` (most drafted tokens per step, 0 = off). Kept raw
/// here so that the server can name the field of a bad value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpeculativeParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<String>,
    #[serde(default, rename = "speculative.n_max", skip_serializing_if = "Option::is_none")]
    pub n_max: Option<i64>,
}
