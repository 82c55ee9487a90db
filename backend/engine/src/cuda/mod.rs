//! The CUDA runtime: the whole token loop in one persistent kernel per request
//! (kernels/decode.cu), launched through cudarc with the driver and NVRTC loaded at
//! run time, so the same binary runs with or without a GPU. Built without the
//! `cuda` feature, the same API exists and every constructor returns a clear error
//! (candle's dummy backend pattern).

pub mod bench;
pub mod layout;
mod run_stats;
pub mod torch_baseline;
pub mod trace;
pub mod tune;

#[cfg(feature = "cuda")]
pub mod cublas;
#[cfg(feature = "cuda")]
mod hung;
#[cfg(feature = "cuda")]
pub mod nvrtc;
#[cfg(feature = "cuda")]
pub mod prefill;
#[cfg(feature = "cuda")]
mod runtime;
#[cfg(feature = "cuda")]
pub use runtime::{compile_only, compile_only_tp, devices, measure_copy_bandwidth, CudaRuntime, DEFAULT_STALL_TIMEOUT};

#[cfg(not(feature = "cuda"))]
mod stub;
#[cfg(not(feature = "cuda"))]
pub use stub::{compile_only, compile_only_tp, devices, measure_copy_bandwidth, CudaRuntime};

pub use layout::KernelOptions;
pub use run_stats::{PrefillSplit, RunStats};

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::*;

    /// Whether NVRTC loads; without it the compile tests skip with the reason, except
    /// where `make test` points PEREGRINE_NVRTC_DIR at the pinned wheel: there a missing
    /// NVRTC is a failure, not a skip.
    fn nvrtc_loads() -> bool {
        match nvrtc::preload() {
            Ok(_) => true,
            Err(e) => {
                assert!(std::env::var_os(nvrtc::NVRTC_DIR_ENV).is_none(), "{} is set but NVRTC does not load: {e}", nvrtc::NVRTC_DIR_ENV);
                eprintln!("skipped: {e}");
                false
            }
        }
    }

    /// Every preset plus the smallest one with the other head dims the kernels special-case
    /// (96 MHA, 128 GQA with q/k/v bias, 256 MQA).
    fn presets_and_head_dims() -> Vec<crate::config::ModelConfig> {
        let mut configs: Vec<_> = crate::synthetic::PRESET_NAMES.iter().map(|n| crate::synthetic::preset(n).expect("preset")).collect();
        let small = configs[0].clone();
        for (hd, heads, kv_heads, bias) in [(96, 4, 4, false), (128, 4, 2, true), (256, 4, 1, false)] {
            configs.push(crate::config::ModelConfig {
                name: format!("hd{hd}"),
                head_dim: hd,
                num_heads: heads,
                num_kv_heads: kv_heads,
                attention_bias: bias,
                ..small.clone()
            });
        }
        configs
    }

    /// CI's check that the kernel compiles through the engine's own NVRTC path for
    /// every benchmark shape (no GPU needed; skipped with a reason without libnvrtc).
    #[test]
    fn decode_kernel_compiles_with_nvrtc_for_every_preset() {
        if !nvrtc_loads() {
            return;
        }
        for name in crate::synthetic::PRESET_NAMES {
            let config = crate::synthetic::preset(name).expect("preset");
            let bytes = compile_only(&config, &KernelOptions::default(), "sm_90a").unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(bytes > 0, "{name}: empty cubin");
        }
        // Tensor parallelism: every rank's kernel at TP 2 for the shapes whose heads split.
        for name in ["qwen2.5-coder-1.5b", "smollm2-1.7b", "llama-3.2-1b", "dtp-2b"] {
            let config = crate::synthetic::preset(name).expect("preset");
            let bytes =
                compile_only_tp(&config, &KernelOptions::default(), 2, None, "sm_90a").unwrap_or_else(|e| panic!("{name} tp 2: {e}"));
            assert!(bytes > 0, "{name}: empty cubin");
        }
        // DTP (dtp-2b's schedule) at 2 lanes, and its `none` early-layer variant.
        let shape = crate::synthetic::preset("dtp-2b").expect("preset");
        let mut dtp = crate::synthetic::dtp_preset("dtp-2b").expect("dtp preset");
        for early in [crate::dtp::EarlyLayers::Present, crate::dtp::EarlyLayers::None] {
            dtp.early_layers = early;
            let sched = crate::dtp::DtpSchedule::new(&dtp, &shape, 2).expect("schedule");
            let bytes =
                compile_only_tp(&shape, &KernelOptions::default(), 2, Some(&sched), "sm_90a").unwrap_or_else(|e| panic!("dtp: {e}"));
            assert!(bytes > 0, "dtp: empty cubin");
        }
        let odd = crate::synthetic::preset("smollm2-135m").expect("preset");
        let err = compile_only_tp(&odd, &KernelOptions::default(), 2, None, "sm_90a").expect_err("9 heads do not split over 2");
        assert!(err.to_string().contains("query heads"), "{err}");
    }

    /// The diagnostics builds (chaos delays, the phase trace, both) compile for every
    /// benchmark shape and the tiny check shapes' head dims, and under TP 2 with the two
    /// tensor-parallel switches not yet on by default.
    #[test]
    fn diagnostic_builds_compile_with_nvrtc_for_every_preset() {
        if !nvrtc_loads() {
            return;
        }
        let base = KernelOptions::default();
        let checked = KernelOptions { diagnostics: layout::Diagnostics { chaos: true, trace: true, chaos_rank: 0 }, ..base.clone() };
        for config in &presets_and_head_dims() {
            // (The presets' default kernels are the compile test above.)
            let is_preset = crate::synthetic::PRESET_NAMES.contains(&config.name.as_str());
            let builds = if is_preset { vec![("chaos+trace", &checked)] } else { vec![("default", &base), ("chaos+trace", &checked)] };
            for (label, options) in builds {
                let (cubin, _) =
                    nvrtc::cubin("sm_90a", &layout::defines(config, options)).unwrap_or_else(|e| panic!("{} {label}: {e}", config.name));
                assert!(!cubin.is_empty(), "{} {label}: empty cubin", config.name);
            }
        }
        let llama = crate::synthetic::preset("llama-3.2-1b").expect("preset");
        compile_only_tp(&llama, &checked, 2, None, "sm_90a").unwrap_or_else(|e| panic!("chaos+trace tp 2: {e}"));
        let tp_switches = KernelOptions { tp_down_waves: true, tp_weights_evict_first: true, ..checked };
        compile_only_tp(&llama, &tp_switches, 2, None, "sm_90a").unwrap_or_else(|e| panic!("tp switches tp 2: {e}"));
    }

    /// The batched prefill's kernels compile for every benchmark shape and for the other
    /// head-dim splits (96 and 128 over two lanes, 256 over four, without the tensor-core
    /// attention), and the cubin exports each entry point prefill.rs loads.
    #[test]
    fn prefill_kernels_compile_with_nvrtc() {
        if !nvrtc_loads() {
            return;
        }
        let configs = presets_and_head_dims();
        for config in &configs {
            let options = KernelOptions::default();
            assert!(layout::prefill_shape(config).is_ok(), "{}", config.name);
            let (cubin, _) = nvrtc::cubin_of(nvrtc::PREFILL_SOURCE, "sm_90a", &layout::defines(config, &options))
                .unwrap_or_else(|e| panic!("{}: {e}", config.name));
            let has = |name: &str| cubin.windows(name.len()).any(|w| w == name.as_bytes());
            for name in ["pg_pf_embed", "pg_pf_rmsnorm", "pg_pf_qkv_rope", "pg_pf_attention", "pg_pf_swiglu", "pg_pf_add_parts"] {
                assert!(has(name), "{}: cubin lacks {name}", config.name);
            }
            let mma = layout::prefill_shape(config).map(|p| p.mma).unwrap_or(false);
            assert_eq!(has("pg_pf_attention_mma"), mma, "{}: tensor-core attention present iff the shape allows it", config.name);
        }
    }
}
