//! Kernel builds by name, as the GPU tests and `gpu_check` take them (`--kernel`,
//! `--variants`, PEREGRINE_GPU_VARIANTS): `default`, then `+` modifiers.

use crate::cuda::KernelOptions;
use crate::error::{Error, Result};

/// `default` (or `v10`, its name when the earlier kernels were still kept), then `+`
/// modifiers: `threadsN` (threads per block), `tp-evict` / `tp-waves` (the
/// tensor-parallel switches), `q-pipe` (quantized rows' loads one chunk ahead),
/// `one-launch` (ranks sharing a GPU as one kernel), `trace`,
/// `chaos`, `nosplit` (one block per attention head).
pub fn kernel_variant(name: &str) -> Result<KernelOptions> {
    let (first, mods) = name.split_once('+').unwrap_or((name, ""));
    if !matches!(first, "default" | "v10") {
        return Err(Error::InvalidRequest(format!("unknown kernel {first} (the older ones are gone: docs/history.md)")));
    }
    let mut o = KernelOptions::default();
    for m in mods.split('+').filter(|m| !m.is_empty()) {
        match m {
            "tp-evict" => o.tp_weights_evict_first = true,
            "tp-waves" => o.tp_down_waves = true,
            "q-pipe" => o.quant_pipeline = true,
            "one-launch" => o.one_launch = true,
            "trace" => o.diagnostics.trace = true,
            "chaos" => o.diagnostics.chaos = true,
            "nosplit" => o.attn_max_splits = 1,
            _ => match m.strip_prefix("threads").and_then(|n| n.parse().ok()) {
                Some(n) => o.threads = n,
                None => return Err(Error::InvalidRequest(format!("unknown variant modifier {m} in {name}"))),
            },
        }
    }
    Ok(o)
}

/// `base` with the chaos delays, attention split as `base` splits it or not at all.
pub fn with_chaos(base: &KernelOptions, split: bool) -> KernelOptions {
    let splits = if split { base.attn_max_splits } else { 1 };
    let mut o = KernelOptions { attn_max_splits: splits, ..base.clone() };
    o.diagnostics.chaos = true;
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_build_their_options_and_unknown_ones_are_errors() {
        assert_eq!(kernel_variant("default").expect("default"), KernelOptions::default());
        let o = kernel_variant("v10+threads384+nosplit+tp-evict").expect("variant");
        assert_eq!((o.threads, o.attn_max_splits, o.tp_weights_evict_first), (384, 1, true));
        assert!(kernel_variant("v9").is_err());
        assert!(kernel_variant("default+fast").is_err());
        let chaos = with_chaos(&o, true);
        assert!(chaos.diagnostics.chaos && chaos.attn_max_splits == 1);
    }
}
