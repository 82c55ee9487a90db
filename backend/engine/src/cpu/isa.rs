//! Which SIMD instruction set the fast CPU kernels use, detected at run time
//! (`is_x86_feature_detected!`), with `PEREGRINE_CPU_ISA` to force a lower one
//! for bisecting or benchmarking (as ggml's `GGML_NATIVE=OFF` builds do at compile time).

/// A kernel family. Every family computes bit-identical results (same integer dot
/// products, same float operation order), so the choice changes speed only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Plain Rust; any CPU.
    Portable,
    /// AVX2 + FMA + F16C: `vpmaddubsw` integer dots, 256-bit floats.
    Avx2,
    /// AVX-512 F/BW/VL + VNNI: `vpdpbusd` integer dots, 512-bit floats.
    Avx512Vnni,
}

impl Isa {
    /// Every family, slowest first.
    pub const ALL: [Isa; 3] = [Isa::Portable, Isa::Avx2, Isa::Avx512Vnni];

    /// The best family this CPU runs, at most `cap`.
    pub fn detect(cap: Option<Isa>) -> Isa {
        let best = Isa::ALL.into_iter().filter(|i| i.is_supported()).max().unwrap_or(Isa::Portable);
        cap.map_or(best, |c| best.min(c))
    }

    /// Every family this CPU runs (tests compare them all against `Portable`).
    pub fn available() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.is_supported()).collect()
    }

    /// Whether this CPU has the instructions the family needs.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => {
                Isa::Avx2.is_supported()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Short name (the values `PEREGRINE_CPU_ISA` accepts).
    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::Avx512Vnni => "avx512",
        }
    }

    /// Parses a short name.
    pub fn from_name(name: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|i| i.name() == name.trim())
    }
}
