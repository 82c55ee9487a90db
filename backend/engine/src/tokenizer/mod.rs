//! Tokenizer: the `tokenizers` crate, built from tokenizer.json or GGUF metadata.
