//! The apparatus's one error type: the engine's and the CLI's errors, plus its own.

/// Why a measurement could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Engine(#[from] peregrine_engine::Error),
    #[error(transparent)]
    Cli(#[from] peregrine_server::error::Error),
    /// A flag's value that cannot work, naming the flag.
    #[error("--{param}: {message}")]
    Bad { param: String, message: String },
    /// The measurement itself failed.
    #[error("{0}")]
    Request(String),
}

impl Error {
    /// A bad value of flag `param`.
    pub fn bad(param: &str, message: impl Into<String>) -> Error {
        Error::Bad { param: param.to_string(), message: message.into() }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
