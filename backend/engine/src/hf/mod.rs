//! Hugging Face model directories: config.json and safetensors weights.
