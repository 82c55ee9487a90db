//! Prints the decode kernel's `-D` flags for a preset shape, one per line, so nvcc can
//! compile-check kernels/decode.cu outside NVRTC:
//! `kernel_defines <preset> [formats-mask lm-format [tp [dtp]]]` (rank 0's kernel; `dtp`:
//! a Laneformer preset's own lanes, `tp` its lane count; without it the preset's
//! matrices as an ordinary model), for sm_90a.

use peregrine_engine::cuda::{layout, nvrtc, KernelOptions};
use peregrine_engine::dtp::DtpSchedule;
use peregrine_engine::lab::synthetic::{ordinary, preset};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(declared) = args.first().and_then(|n| preset(n)) else {
        eprintln!("usage: kernel_defines <preset> [weight-formats-mask lm-head-format [tp [dtp]]]");
        std::process::exit(2);
    };
    let num = |i: usize| args.get(i).and_then(|v| v.parse::<u8>().ok()).unwrap_or(0);
    let options = KernelOptions { weight_formats: num(1), lm_head_format: num(2), ..KernelOptions::default() };
    let tp = (num(3) as usize).max(1);
    let (config, sched) = if args.get(4).map(String::as_str) == Some("dtp") {
        let lanes = declared.lanes.count;
        assert!(lanes > 1 && lanes == tp, "dtp: needs a Laneformer preset and its lane count as tp ({} has {lanes})", declared.name);
        let sched = DtpSchedule::of_laneformer(&declared).unwrap_or_else(|e| panic!("dtp: {e}"));
        (declared, Some(sched))
    } else {
        (ordinary(&declared), None)
    };
    let shard = layout::shard(&config, tp).unwrap_or_else(|e| panic!("tp {tp}: {e}"));
    for (name, value) in layout::defines_tp(&shard, &options, tp, config.vocab_size, sched.as_ref(), nvrtc::shared_per_block_of("sm_90a")) {
        // nvcc splits -D values on commas; escape them.
        println!("-D{name}={}", value.replace(',', "\\,"));
    }
}
