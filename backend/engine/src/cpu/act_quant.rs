//! Activations quantized per 32-element block for the integer kernels, in one of
//! two precisions:
//! - [`ActPrecision::Int8`]: llama.cpp's `q8_1` (`d = amax/127`, `q = round(x/d)`).
//! - [`ActPrecision::Int16`]: a 15-bit code `q = round(x/d)`, `d = amax/(127·128)`,
//!   stored as two signed byte planes `q = 128·hi + lo` (`hi` ∈ ±127, `lo` ∈ [-64, 63])
//!   so the same `vpdpbusd` kernels run it with one extra dot per weight vector.
//!   8-bit activations alone put the default model's logits ~2 % off float32.
//!
//! Rounding is to nearest-even on every instruction set, so all give the same bytes.

use crate::cpu::isa::Isa;

/// Elements per activation block (one scale each).
pub const QBLOCK: usize = 32;
/// Elements per half block: the finest sub-block a weight format uses (Q6_K).
pub const HALF_BLOCK: usize = 16;
/// Largest 8-bit code magnitude (symmetric, so the AVX2 sign trick never sees -128).
const QMAX: f32 = 127.0;
/// Weight of the high plane in a 15-bit code.
pub const HI_SCALE: i32 = 128;
/// log2 of [`HI_SCALE`] (the kernels shift instead of multiplying).
pub const HI_SHIFT: u32 = 7;

/// How finely activations are quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ActPrecision {
    /// One byte per element (llama.cpp's choice).
    Int8,
    /// A 15-bit code in two byte planes (the default: float32 fidelity).
    #[default]
    Int16,
}

impl ActPrecision {
    /// Largest code magnitude.
    fn qmax(self) -> f32 {
        match self {
            ActPrecision::Int8 => QMAX,
            ActPrecision::Int16 => QMAX * HI_SCALE as f32,
        }
    }
}

/// Quantized activations of up to `capacity` tokens of `cols` elements each.
pub struct QuantActs {
    cols: usize,
    capacity: usize,
    precision: ActPrecision,
    /// The codes (Int8) or their high plane (Int16).
    hi: Vec<i8>,
    /// The low plane (Int16 only).
    lo: Vec<i8>,
    d: Vec<f32>,
    /// `d · Σq` per 32-block and per 16-half (what offset terms multiply).
    s32: Vec<f32>,
    s16: Vec<f32>,
    /// `Σq` per 16-half (the AVX2 kernel corrects its signed dot with it).
    isum16: Vec<i32>,
}

impl QuantActs {
    /// Buffers for `capacity` tokens; `cols` must be a multiple of [`QBLOCK`].
    pub fn new(cols: usize, capacity: usize, precision: ActPrecision) -> QuantActs {
        assert_eq!(cols % QBLOCK, 0, "activation length {cols} is not whole blocks");
        let (b32, b16) = (cols / QBLOCK, cols / HALF_BLOCK);
        let lo = if precision == ActPrecision::Int16 { capacity * cols } else { 0 };
        QuantActs {
            cols,
            capacity,
            precision,
            hi: vec![0; capacity * cols],
            lo: vec![0; lo],
            d: vec![0.0; capacity * b32],
            s32: vec![0.0; capacity * b32],
            s16: vec![0.0; capacity * b16],
            isum16: vec![0; capacity * b16],
        }
    }

    /// Elements per token.
    #[cfg(feature = "lab")]
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Tokens it can hold.
    #[cfg(feature = "lab")]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Raw view for threads that each fill and read disjoint blocks between barriers.
    pub fn view(&mut self) -> QuantView {
        QuantView {
            cols: self.cols,
            capacity: self.capacity,
            precision: self.precision,
            hi: self.hi.as_mut_ptr(),
            lo: if self.precision == ActPrecision::Int16 { self.lo.as_mut_ptr() } else { std::ptr::null_mut() },
            d: self.d.as_mut_ptr(),
            s32: self.s32.as_mut_ptr(),
            s16: self.s16.as_mut_ptr(),
            isum16: self.isum16.as_mut_ptr(),
        }
    }
}

/// Pointers into a [`QuantActs`]; valid while it lives and is not moved or resized.
#[derive(Debug, Clone, Copy)]
pub struct QuantView {
    cols: usize,
    capacity: usize,
    precision: ActPrecision,
    hi: *mut i8,
    lo: *mut i8,
    d: *mut f32,
    s32: *mut f32,
    s16: *mut f32,
    isum16: *mut i32,
}

// SAFETY: a view is a bundle of pointers; the forward pass hands disjoint blocks to
// threads and separates writers from readers with barriers.
unsafe impl Send for QuantView {}
// SAFETY: as above.
unsafe impl Sync for QuantView {}

/// One token's quantized activations, as the matmul kernels read them.
#[derive(Debug, Clone, Copy)]
pub struct TokenActs {
    /// Codes (Int8) or high plane (Int16).
    pub hi: *const i8,
    /// Low plane; null for Int8.
    pub lo: *const i8,
    /// Per 32-block.
    pub d: *const f32,
    pub s32: *const f32,
    /// Per 16-half.
    pub s16: *const f32,
    pub isum16: *const i32,
}

impl QuantView {
    /// The precision the buffers hold.
    pub fn precision(&self) -> ActPrecision {
        self.precision
    }

    /// Token `t`'s pointers.
    pub fn token(&self, t: usize) -> TokenActs {
        assert!(t < self.capacity);
        let (b32, b16) = (self.cols / QBLOCK, self.cols / HALF_BLOCK);
        // SAFETY: t < capacity, so every offset is inside its buffer (`lo` only when
        // it exists).
        unsafe {
            TokenActs {
                hi: self.hi.add(t * self.cols),
                lo: if self.lo.is_null() { std::ptr::null() } else { self.lo.add(t * self.cols) },
                d: self.d.add(t * b32),
                s32: self.s32.add(t * b32),
                s16: self.s16.add(t * b16),
                isum16: self.isum16.add(t * b16),
            }
        }
    }

    /// Quantizes `x` (whole blocks) into token `t`, starting at element `at`.
    ///
    /// # Safety
    /// No other thread may read or write these blocks until a barrier.
    pub unsafe fn quantize(&self, isa: Isa, t: usize, at: usize, x: &[f32]) {
        assert!(t < self.capacity && at.is_multiple_of(QBLOCK) && x.len().is_multiple_of(QBLOCK) && at + x.len() <= self.cols);
        let (b0, n) = (at / QBLOCK, x.len() / QBLOCK);
        let tok = self.token(t);
        // SAFETY: the asserts keep every range inside token t's slices; the caller
        // guarantees exclusive access to them.
        let out = unsafe {
            BlocksMut {
                hi: std::slice::from_raw_parts_mut(tok.hi.cast_mut().add(at), x.len()),
                lo: if tok.lo.is_null() { &mut [] } else { std::slice::from_raw_parts_mut(tok.lo.cast_mut().add(at), x.len()) },
                d: std::slice::from_raw_parts_mut(tok.d.cast_mut().add(b0), n),
                s32: std::slice::from_raw_parts_mut(tok.s32.cast_mut().add(b0), n),
                s16: std::slice::from_raw_parts_mut(tok.s16.cast_mut().add(2 * b0), 2 * n),
                isum16: std::slice::from_raw_parts_mut(tok.isum16.cast_mut().add(2 * b0), 2 * n),
            }
        };
        quantize_blocks(isa, self.precision, x, out);
    }
}

/// Destination of [`quantize_blocks`] (`lo` empty for Int8).
pub struct BlocksMut<'a> {
    pub hi: &'a mut [i8],
    pub lo: &'a mut [i8],
    pub d: &'a mut [f32],
    pub s32: &'a mut [f32],
    pub s16: &'a mut [f32],
    pub isum16: &'a mut [i32],
}

/// Quantizes whole blocks of `x` with the given instruction set.
pub fn quantize_blocks(isa: Isa, precision: ActPrecision, x: &[f32], out: BlocksMut<'_>) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => {
            // SAFETY: the caller picked an Isa that `is_supported` on this CPU.
            unsafe { quantize_avx512(precision, x, out) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: as above.
            unsafe { quantize_avx2(precision, x, out) }
        }
        _ => quantize_portable(precision, x, out),
    }
}

/// The scale of a block and its reciprocal (0 for an all-zero block, as ggml).
#[inline(always)]
fn block_scale(amax: f32, precision: ActPrecision) -> (f32, f32) {
    let d = amax / precision.qmax();
    (d, if d != 0.0 { 1.0 / d } else { 0.0 })
}

/// Splits a 15-bit code into its planes: `hi = round(q / 128)` (halves up), `lo = q − 128·hi`.
#[inline(always)]
fn split_code(q: i32) -> (i8, i8) {
    let hi = (q + HI_SCALE / 2) >> HI_SHIFT;
    (hi as i8, (q - HI_SCALE * hi) as i8)
}

#[inline(always)]
fn quantize_portable(precision: ActPrecision, x: &[f32], out: BlocksMut<'_>) {
    let mut rest = BlockSums { d: out.d, s32: out.s32, s16: out.s16, isum16: out.isum16 };
    for (b, xb) in x.chunks_exact(QBLOCK).enumerate() {
        let amax = xb.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let (d, id) = block_scale(amax, precision);
        let mut q = [0i32; QBLOCK];
        for (q, &v) in q.iter_mut().zip(xb) {
            *q = (v * id).round_ties_even() as i32;
        }
        let hi = &mut out.hi[b * QBLOCK..(b + 1) * QBLOCK];
        match precision {
            ActPrecision::Int8 => hi.iter_mut().zip(&q).for_each(|(h, &q)| *h = q as i8),
            ActPrecision::Int16 => {
                let lo = &mut out.lo[b * QBLOCK..(b + 1) * QBLOCK];
                for ((h, l), &q) in hi.iter_mut().zip(lo.iter_mut()).zip(&q) {
                    (*h, *l) = split_code(q);
                }
            }
        }
        let sums = [0, 1].map(|h| q[h * HALF_BLOCK..(h + 1) * HALF_BLOCK].iter().sum::<i32>());
        rest.finish(b, d, sums);
    }
}

/// The per-block outputs besides the codes.
struct BlockSums<'a> {
    d: &'a mut [f32],
    s32: &'a mut [f32],
    s16: &'a mut [f32],
    isum16: &'a mut [i32],
}

impl BlockSums<'_> {
    #[inline(always)]
    fn finish(&mut self, b: usize, d: f32, sums: [i32; 2]) {
        self.d[b] = d;
        self.s32[b] = d * (sums[0] + sums[1]) as f32;
        for (h, &s) in sums.iter().enumerate() {
            self.s16[2 * b + h] = d * s as f32;
            self.isum16[2 * b + h] = s;
        }
    }
}

/// The AVX-512 code's steps on 8-float registers. AVX2 has no `i32 → i8` narrowing
/// store, so codes go through two saturating packs (never saturating: every code is
/// within ±127) and one lane permute back into element order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn quantize_avx2(precision: ActPrecision, x: &[f32], out: BlocksMut<'_>) {
    use std::arch::x86_64::*;
    let mut rest = BlockSums { d: out.d, s32: out.s32, s16: out.s16, isum16: out.isum16 };
    let half = _mm256_set1_epi32(HI_SCALE / 2);
    let abs_mask = _mm256_set1_ps(f32::from_bits(0x7FFF_FFFF));
    // packs interleave 128-bit lanes; this puts the four source registers back in order.
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let narrow = |q: [__m256i; 4]| {
        let w = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_permutevar8x32_epi32(w, order)
    };
    let hsum = |v: __m256i| {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s)))
    };
    for (b, xb) in x.chunks_exact(QBLOCK).enumerate() {
        // SAFETY: xb has 32 floats (four unaligned 8-float loads) and each plane 32
        // bytes at b·32 (one 32-byte store); AVX2 is enabled on this function.
        unsafe {
            let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(xb.as_ptr().add(8 * i)));
            let m = _mm256_max_ps(
                _mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
                _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)),
            );
            let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
            let (d, id) = block_scale(amax, precision);
            let idv = _mm256_set1_ps(id);
            // Default MXCSR rounding: nearest-even, as `round_ties_even`.
            let q: [__m256i; 4] = std::array::from_fn(|i| _mm256_cvtps_epi32(_mm256_mul_ps(v[i], idv)));
            let sums = [hsum(_mm256_add_epi32(q[0], q[1])), hsum(_mm256_add_epi32(q[2], q[3]))];
            let at = b * QBLOCK;
            let hi = match precision {
                ActPrecision::Int8 => q,
                ActPrecision::Int16 => {
                    let hi = q.map(|q| _mm256_srai_epi32::<{ HI_SHIFT as i32 }>(_mm256_add_epi32(q, half)));
                    let lo: [__m256i; 4] = std::array::from_fn(|i| _mm256_sub_epi32(q[i], _mm256_slli_epi32::<{ HI_SHIFT as i32 }>(hi[i])));
                    _mm256_storeu_si256(out.lo.as_mut_ptr().add(at).cast(), narrow(lo));
                    hi
                }
            };
            _mm256_storeu_si256(out.hi.as_mut_ptr().add(at).cast(), narrow(hi));
            rest.finish(b, d, sums);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn quantize_avx512(precision: ActPrecision, x: &[f32], mut out: BlocksMut<'_>) {
    use std::arch::x86_64::*;
    let ganged = x.len() / (QBLOCK * GANG) * GANG;
    for g in 0..ganged / GANG {
        // SAFETY: gang g's 16 blocks lie inside x and every output (caller's lengths).
        unsafe { quantize_gang_avx512(precision, g * GANG, x, &mut out) };
    }
    let mut rest = BlockSums { d: out.d, s32: out.s32, s16: out.s16, isum16: out.isum16 };
    let half = _mm512_set1_epi32(HI_SCALE / 2);
    for (b, xb) in x.chunks_exact(QBLOCK).enumerate().skip(ganged) {
        // SAFETY: xb has 32 floats (two unaligned 16-float loads) and each plane 32
        // bytes at b·32 (16-byte stores); AVX-512 F/BW is enabled on this function.
        unsafe {
            let v = [_mm512_loadu_ps(xb.as_ptr()), _mm512_loadu_ps(xb.as_ptr().add(HALF_BLOCK))];
            let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
            let (d, id) = block_scale(amax, precision);
            let q = v.map(|v| _mm512_cvtps_epi32(_mm512_mul_ps(v, _mm512_set1_ps(id))));
            store_codes_avx512(precision, q, b * QBLOCK, out.hi.as_mut_ptr(), out.lo.as_mut_ptr(), half);
            rest.finish(b, d, q.map(|q| _mm512_reduce_add_epi32(q)));
        }
    }
}

/// Blocks the AVX-512 path quantizes together: their maxima and sums are reduced in one
/// butterfly of vertical operations instead of one horizontal reduction each.
const GANG: usize = 16;

/// Blocks `b0..b0 + 16`, as the per-block code would (same bits: maxima and integer
/// sums do not depend on the order, and scales are IEEE divisions either way).
///
/// # Safety
/// The blocks lie inside `x` and every output slice.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn quantize_gang_avx512(precision: ActPrecision, b0: usize, x: &[f32], out: &mut BlocksMut<'_>) {
    use std::arch::x86_64::*;
    let half = _mm512_set1_epi32(HI_SCALE / 2);
    // SAFETY: 32 floats per block from b0·32, 16 block entries from b0, 32 half
    // entries from 2·b0 (caller).
    unsafe {
        let base = x.as_ptr().add(b0 * QBLOCK);
        let v: [[__m512; 2]; GANG] = std::array::from_fn(|j| {
            let p = base.add(j * QBLOCK);
            [_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(HALF_BLOCK))]
        });
        let amax = reduce_lanes(v.map(|[a, b]| _mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b))), |a, b| _mm512_max_ps(a, b));
        let d = _mm512_div_ps(amax, _mm512_set1_ps(precision.qmax()));
        let id = _mm512_maskz_div_ps(_mm512_cmp_ps_mask::<_CMP_NEQ_OQ>(d, _mm512_setzero_ps()), _mm512_set1_ps(1.0), d);
        let mut ids = [0.0f32; GANG];
        _mm512_storeu_ps(ids.as_mut_ptr(), id);
        // Default MXCSR rounding: nearest-even, as `round_ties_even`.
        let q: [[__m512i; 2]; GANG] = std::array::from_fn(|j| v[j].map(|v| _mm512_cvtps_epi32(_mm512_mul_ps(v, _mm512_set1_ps(ids[j])))));
        for (j, q) in q.iter().enumerate() {
            store_codes_avx512(precision, *q, (b0 + j) * QBLOCK, out.hi.as_mut_ptr(), out.lo.as_mut_ptr(), half);
        }
        let add = |a: __m512, b: __m512| _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
        let [s0, s1] = [0, 1].map(|h| _mm512_castps_si512(reduce_lanes(q.map(|q| _mm512_castsi512_ps(q[h])), add)));
        _mm512_storeu_ps(out.d.as_mut_ptr().add(b0), d);
        _mm512_storeu_ps(out.s32.as_mut_ptr().add(b0), _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1))));
        // Half sums interleaved: entry 2b + h.
        let (first, second) = (
            _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23),
            _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31),
        );
        for (k, idx) in [first, second].into_iter().enumerate() {
            let isum = _mm512_permutex2var_epi32(s0, idx, s1);
            let dd = _mm512_permutex2var_ps(d, idx, d);
            _mm512_storeu_si512(out.isum16.as_mut_ptr().add(2 * b0 + k * GANG).cast(), isum);
            _mm512_storeu_ps(out.s16.as_mut_ptr().add(2 * b0 + k * GANG), _mm512_mul_ps(dd, _mm512_cvtepi32_ps(isum)));
        }
    }
}

/// Lane `j` of the result is `op` over the 16 lanes of `v[j]` (`op` associative and
/// commutative: max, or an integer add on the bits), by a butterfly of shuffles.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn reduce_lanes(v: [std::arch::x86_64::__m512; GANG], op: impl Fn(std::arch::x86_64::__m512, std::arch::x86_64::__m512) -> std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    // 256-bit halves, then 128-bit quarters, then pairs, then single lanes: after the
    // four levels, lane 4q + k holds vector 4k + q.
    let l1: [__m512; 8] = std::array::from_fn(|i| {
        let (a, b) = (v[2 * i], v[2 * i + 1]);
        op(_mm512_shuffle_f32x4::<0x44>(a, b), _mm512_shuffle_f32x4::<0xEE>(a, b))
    });
    let l2: [__m512; 4] = std::array::from_fn(|i| {
        let (a, b) = (l1[2 * i], l1[2 * i + 1]);
        op(_mm512_shuffle_f32x4::<0x88>(a, b), _mm512_shuffle_f32x4::<0xDD>(a, b))
    });
    let l3: [__m512; 2] = std::array::from_fn(|i| {
        let (a, b) = (l2[2 * i], l2[2 * i + 1]);
        op(_mm512_shuffle_ps::<0x44>(a, b), _mm512_shuffle_ps::<0xEE>(a, b))
    });
    let l4 = op(_mm512_shuffle_ps::<0x88>(l3[0], l3[1]), _mm512_shuffle_ps::<0xDD>(l3[0], l3[1]));
    _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), l4)
}

/// Block codes `q` (two halves) into the planes at element `at`.
///
/// # Safety
/// Each plane has 32 bytes at `at` (`lo` only for Int16).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn store_codes_avx512(precision: ActPrecision, q: [std::arch::x86_64::__m512i; 2], at: usize, hi_plane: *mut i8, lo_plane: *mut i8, half: std::arch::x86_64::__m512i) {
    use std::arch::x86_64::*;
    for (h, q) in q.into_iter().enumerate() {
        let at = at + h * HALF_BLOCK;
        // SAFETY: 16 bytes at `at` in each plane (caller).
        unsafe {
            let hi = match precision {
                ActPrecision::Int8 => q,
                ActPrecision::Int16 => {
                    let hi = _mm512_srai_epi32::<{ HI_SHIFT }>(_mm512_add_epi32(q, half));
                    let lo = _mm512_sub_epi32(q, _mm512_slli_epi32::<{ HI_SHIFT }>(hi));
                    _mm_storeu_si128(lo_plane.add(at).cast(), _mm512_cvtepi32_epi8(lo));
                    hi
                }
            };
            _mm_storeu_si128(hi_plane.add(at).cast(), _mm512_cvtepi32_epi8(hi));
        }
    }
}
