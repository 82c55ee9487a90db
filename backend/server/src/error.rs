//! The server's error type and its one mapping to HTTP responses.

/// Errors the server reports to a user (start-up) or a client (requests).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding or serving the listening socket failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// A request failed inside the engine.
    #[error("{0}")]
    Request(String),
    /// The engine reported an error.
    #[error(transparent)]
    Engine(#[from] peregrine_engine::Error),
}

/// The server's result alias.
pub type Result<T> = std::result::Result<T, Error>;
