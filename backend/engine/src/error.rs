//! The engine's one error type; every fallible engine call returns [`Result`].

/// Everything that can go wrong inside the engine, with a message a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O error on a named file.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The engine's result alias.
pub type Result<T> = std::result::Result<T, Error>;
