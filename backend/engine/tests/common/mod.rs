pub mod gguf_writer;
pub mod llamacpp;
