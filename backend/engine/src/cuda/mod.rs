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

    /// The variants other than the default (`trace`, `fuse_o` and `fuse_down` on v4,
    /// the earlier v3 and v4 kernels, the default with chaos delays split and unsplit)
    /// compile for every benchmark shape and the tiny check shapes'
    /// head dims; fuse_o under tensor parallelism is refused with a message, not
    /// compiled; the default compiles under TP 2 (tagged dropped) and stage under DTP.
    #[test]
    fn off_by_default_variants_compile_with_nvrtc_for_every_preset() {
        if !nvrtc_loads() {
            return;
        }
        let base = KernelOptions::default();
        // fuse_o and fuse_down need the phase counters: they build on v4.
        let v4 = KernelOptions::v4();
        let variants = [
            ("trace", KernelOptions { trace: true, ..base.clone() }),
            ("fuse_o", KernelOptions { fuse_o: true, ..v4.clone() }),
            ("fuse_o+prefetch", KernelOptions { fuse_o: true, prefetch: true, ..v4.clone() }),
            ("fuse_o+chaos unsplit", KernelOptions { fuse_o: true, chaos: true, attn_max_splits: 1, ..v4.clone() }),
            ("v3", KernelOptions::v3()),
            ("v4", v4.clone()),
            ("v4+chaos", KernelOptions { chaos: true, ..v4.clone() }),
            // The default (v6): v5 with attention on blocks of its own (attend_own).
            ("chaos", KernelOptions { chaos: true, ..base.clone() }),
            ("chaos unsplit", KernelOptions { chaos: true, attn_max_splits: 1, ..base.clone() }),
            // v5: tagged phase outputs + staging ahead, on v4's staging.
            ("v5+chaos", KernelOptions { chaos: true, ..KernelOptions::v5() }),
            ("fuse_down", KernelOptions { fuse_down: true, ..v4.clone() }),
            ("fuse_down+chaos", KernelOptions { fuse_down: true, chaos: true, ..v4.clone() }),
            ("v9", KernelOptions::v9()),
            ("down_waves+chaos+trace", KernelOptions { chaos: true, trace: true, ..base.clone() }),
        ];
        let configs = presets_and_head_dims();
        for config in &configs {
            for (label, options) in &variants {
                let (cubin, _) =
                    nvrtc::cubin("sm_90a", &layout::defines(config, options)).unwrap_or_else(|e| panic!("{} {label}: {e}", config.name));
                assert!(!cubin.is_empty(), "{} {label}: empty cubin", config.name);
            }
        }
        // The trace variant also under tensor parallelism (rank 0 records).
        let llama = crate::synthetic::preset("llama-3.2-1b").expect("preset");
        compile_only_tp(&llama, &variants[0].1, 2, None, "sm_90a").unwrap_or_else(|e| panic!("trace tp 2: {e}"));
        let err = compile_only_tp(&llama, &variants[1].1, 2, None, "sm_90a").expect_err("fuse_o under TP");
        assert!(err.to_string().contains("one GPU"), "{err}");
        // The default (tagged) under TP: the ranks compile with their counters.
        compile_only_tp(&llama, &base, 2, None, "sm_90a").unwrap_or_else(|e| panic!("default tp 2: {e}"));
        // down_waves under TP (tagged activations, counters elsewhere), with chaos.
        let tp_waves = KernelOptions { tp_down_waves: true, chaos: true, ..base.clone() };
        compile_only_tp(&llama, &tp_waves, 2, None, "sm_90a").unwrap_or_else(|e| panic!("tp_down_waves tp 2: {e}"));
        // stage (+ resid_smem, ignored there) composes with tensor parallelism (rank-local weights) and DTP.
        let staged = KernelOptions { stage_iters: 8, resid_smem: true, lm_rows_per_warp: 4, ..base.clone() };
        compile_only_tp(&llama, &staged, 2, None, "sm_90a").unwrap_or_else(|e| panic!("stage tp 2: {e}"));
        let shape = crate::synthetic::preset("dtp-2b").expect("preset");
        let dtp = crate::synthetic::dtp_preset("dtp-2b").expect("dtp preset");
        let sched = crate::dtp::DtpSchedule::new(&dtp, &shape, 2).expect("schedule");
        compile_only_tp(&shape, &staged, 2, Some(&sched), "sm_90a").unwrap_or_else(|e| panic!("stage dtp: {e}"));
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
