//! Prints the decode kernel's `-D` flags for a preset shape, one per line, so nvcc can
//! compile-check kernels/decode.cu outside NVRTC: `kernel_defines <preset> [formats-mask lm-format]`.

use peregrine_engine::cuda::{layout, KernelOptions};
use peregrine_engine::synthetic::preset;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(config) = args.first().and_then(|n| preset(n)) else {
        eprintln!("usage: kernel_defines <preset> [weight-formats-mask lm-head-format]");
        std::process::exit(2);
    };
    let num = |i: usize| args.get(i).and_then(|v| v.parse::<u8>().ok()).unwrap_or(0);
    let options = KernelOptions { weight_formats: num(1), lm_head_format: num(2), ..KernelOptions::default() };
    for (name, value) in layout::defines(&config, &options) {
        // nvcc splits -D values on commas; escape them.
        println!("-D{name}={}", value.replace(',', "\\,"));
    }
}
