//! Wire types shared by the server and the playground: every JSON body and SSE
//! payload is defined here once, so both sides agree by construction.

use serde::{Deserialize, Serialize};

/// Body of `GET /health`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Health {
    /// Always `"ok"` while the server answers.
    pub status: String,
    /// The server's crate version.
    pub version: String,
}
