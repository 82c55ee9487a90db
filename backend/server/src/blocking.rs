//! Tokenizer and template work off the async threads, on at most
//! [`TOKENIZER_THREADS`] blocking threads at once: a burst of large tokenize requests
//! waits its turn instead of taking every core and gigabytes of memory together.

use tokio::sync::Semaphore;

use crate::error::{Error, Result};

/// Tokenizer jobs that run at once (the others wait).
pub const TOKENIZER_THREADS: usize = 2;

static TOKENIZERS: Semaphore = Semaphore::const_new(TOKENIZER_THREADS);

/// Runs `work` on a blocking thread once one of the tokenizer slots is free.
pub async fn tokenizer_task<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    let _slot = TOKENIZERS.acquire().await.map_err(|e| Error::Internal(format!("tokenizer pool closed: {e}")))?;
    tokio::task::spawn_blocking(work).await.map_err(|e| Error::Internal(format!("tokenizer task failed: {e}")))
}
