//! Chat templates rendered with minijinja from the model's own template.
