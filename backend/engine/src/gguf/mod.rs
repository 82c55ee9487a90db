//! GGUF v3 reader: header, metadata, tensor index over a memory map (owned by the loader work).
