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
    /// A model file whose bytes do not follow its format (bad magic, lengths past the end, ...).
    #[error("{path}: corrupt or truncated model file: {reason}")]
    CorruptModel { path: String, reason: String },
    /// A model family the runtimes do not implement.
    #[error("{path}: unknown architecture `{arch}` (supported: llama, qwen2)")]
    UnknownArchitecture { path: String, arch: String },
    /// A tensor stored in a type the loaders cannot read.
    #[error("{path}: tensor `{tensor}` has unsupported quant type {dtype}")]
    UnsupportedDType { path: String, tensor: String, dtype: String },
    /// A tensor the model needs is not in the file.
    #[error("{path}: missing tensor `{name}`")]
    MissingTensor { path: String, name: String },
    /// A tensor whose shape disagrees with the model config.
    #[error("{path}: shape mismatch for tensor `{tensor}`: expected {expected:?}, found {found:?}")]
    ShapeMismatch { path: String, tensor: String, expected: Vec<usize>, found: Vec<usize> },
    /// A required config value is absent or has the wrong type.
    #[error("{path}: bad model config: {reason}")]
    BadConfig { path: String, reason: String },
    /// A request the engine cannot serve as asked (bad parameter ranges, empty prompt...).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// Prompt plus requested tokens exceed the model's context.
    #[error("this model's context is {context} tokens, but the prompt has {prompt} tokens and max_tokens is {max_tokens}; shorten the prompt or lower max_tokens")]
    ContextOverflow { prompt: usize, max_tokens: usize, context: usize },
    /// The engine thread is gone or refused the request (shutting down, queue full).
    #[error("engine unavailable: {0}")]
    Unavailable(String),
    /// A GPU backend failure (driver, compilation, launch).
    #[error("cuda: {0}")]
    Cuda(String),
    /// A tokenizer file or GGUF tokenizer metadata that cannot be turned into a tokenizer.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A tokenizer kind the engine does not implement (e.g. SentencePiece in GGUF).
    #[error("unsupported tokenizer: {0}")]
    UnsupportedTokenizer(String),
    /// A token id past the end of the vocabulary.
    #[error("token id {id} is outside the vocabulary (size {vocab_size})")]
    TokenOutOfRange { id: u32, vocab_size: usize },
    /// A chat template that fails to compile or render.
    #[error("chat template: {0}")]
    Template(String),
    /// Tensor bytes that do not match the tensor's type and shape.
    #[error("tensor `{tensor}`: {reason}")]
    TensorData { tensor: String, reason: String },
}

/// The engine's result alias.
pub type Result<T> = std::result::Result<T, Error>;
