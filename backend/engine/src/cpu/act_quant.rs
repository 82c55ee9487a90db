//! Activations quantized to 8 bits per 32-element block, as llama.cpp's `q8_1`
//! (`d = amax/127`, `q = round(x/d)`, plus block sums for the weights' offsets).
//! Rounding is to nearest-even on every instruction set, so all give the same bytes.

use crate::cpu::isa::Isa;

/// Elements per activation block (one scale each).
pub const QBLOCK: usize = 32;
/// Elements per half block: the finest sub-block a weight format uses (Q6_K).
pub const HALF_BLOCK: usize = 16;
/// Largest code magnitude (symmetric, so the AVX2 sign trick never sees -128).
const QMAX: f32 = 127.0;

/// Quantized activations of up to `capacity` tokens of `cols` elements each.
pub struct QuantActs {
    cols: usize,
    capacity: usize,
    qs: Vec<i8>,
    d: Vec<f32>,
    /// `d · Σq` per 32-block and per 16-half (what offset terms multiply).
    s32: Vec<f32>,
    s16: Vec<f32>,
    /// `Σq` per 16-half (the AVX2 kernel corrects its signed dot with it).
    isum16: Vec<i32>,
}

impl QuantActs {
    /// Buffers for `capacity` tokens; `cols` must be a multiple of [`QBLOCK`].
    pub fn new(cols: usize, capacity: usize) -> QuantActs {
        assert_eq!(cols % QBLOCK, 0, "activation length {cols} is not whole blocks");
        let (b32, b16) = (cols / QBLOCK, cols / HALF_BLOCK);
        QuantActs {
            cols,
            capacity,
            qs: vec![0; capacity * cols],
            d: vec![0.0; capacity * b32],
            s32: vec![0.0; capacity * b32],
            s16: vec![0.0; capacity * b16],
            isum16: vec![0; capacity * b16],
        }
    }

    /// Elements per token.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Tokens it can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Raw view for threads that each fill and read disjoint blocks between barriers.
    pub fn view(&mut self) -> QuantView {
        QuantView {
            cols: self.cols,
            capacity: self.capacity,
            qs: self.qs.as_mut_ptr(),
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
    qs: *mut i8,
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
    pub qs: *const i8,
    /// Per 32-block.
    pub d: *const f32,
    pub s32: *const f32,
    /// Per 16-half.
    pub s16: *const f32,
    pub isum16: *const i32,
}

impl QuantView {
    /// Token `t`'s pointers.
    pub fn token(&self, t: usize) -> TokenActs {
        assert!(t < self.capacity);
        let (b32, b16) = (self.cols / QBLOCK, self.cols / HALF_BLOCK);
        // SAFETY: t < capacity, so every offset is inside its buffer.
        unsafe {
            TokenActs {
                qs: self.qs.add(t * self.cols),
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
        assert!(t < self.capacity && at % QBLOCK == 0 && x.len() % QBLOCK == 0 && at + x.len() <= self.cols);
        let (b0, n) = (at / QBLOCK, x.len() / QBLOCK);
        let tok = self.token(t);
        // SAFETY: the asserts keep every range inside token t's slices; the caller
        // guarantees exclusive access to them.
        let out = unsafe {
            BlocksMut {
                qs: std::slice::from_raw_parts_mut(tok.qs.cast_mut().add(at), x.len()),
                d: std::slice::from_raw_parts_mut(tok.d.cast_mut().add(b0), n),
                s32: std::slice::from_raw_parts_mut(tok.s32.cast_mut().add(b0), n),
                s16: std::slice::from_raw_parts_mut(tok.s16.cast_mut().add(2 * b0), 2 * n),
                isum16: std::slice::from_raw_parts_mut(tok.isum16.cast_mut().add(2 * b0), 2 * n),
            }
        };
        quantize_blocks(isa, x, out);
    }
}

/// Destination of [`quantize_blocks`].
pub struct BlocksMut<'a> {
    pub qs: &'a mut [i8],
    pub d: &'a mut [f32],
    pub s32: &'a mut [f32],
    pub s16: &'a mut [f32],
    pub isum16: &'a mut [i32],
}

/// Quantizes whole blocks of `x` with the given instruction set.
pub fn quantize_blocks(isa: Isa, x: &[f32], out: BlocksMut<'_>) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => {
            // SAFETY: the caller picked an Isa that `is_supported` on this CPU.
            unsafe { quantize_avx512(x, out) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: as above.
            unsafe { quantize_avx2(x, out) }
        }
        _ => quantize_portable(x, out),
    }
}

/// The scale of a block and its reciprocal (0 for an all-zero block, as ggml).
#[inline(always)]
fn block_scale(amax: f32) -> (f32, f32) {
    let d = amax / QMAX;
    (d, if d != 0.0 { 1.0 / d } else { 0.0 })
}

#[inline(always)]
fn quantize_portable(x: &[f32], out: BlocksMut<'_>) {
    let mut rest = BlocksMutRef { d: out.d, s32: out.s32, s16: out.s16, isum16: out.isum16 };
    for (b, xb) in x.chunks_exact(QBLOCK).enumerate() {
        let amax = xb.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let (d, id) = block_scale(amax);
        let q = &mut out.qs[b * QBLOCK..(b + 1) * QBLOCK];
        for (q, &v) in q.iter_mut().zip(xb) {
            *q = (v * id).round_ties_even() as i8;
        }
        let sums = [0, 1].map(|h| q[h * HALF_BLOCK..(h + 1) * HALF_BLOCK].iter().map(|&v| v as i32).sum::<i32>());
        finish_block(b, d, sums, &mut rest);
    }
}

/// The per-block outputs besides the codes.
struct BlocksMutRef<'a> {
    d: &'a mut [f32],
    s32: &'a mut [f32],
    s16: &'a mut [f32],
    isum16: &'a mut [i32],
}

#[inline(always)]
fn finish_block(b: usize, d: f32, sums: [i32; 2], out: &mut BlocksMutRef<'_>) {
    out.d[b] = d;
    out.s32[b] = d * (sums[0] + sums[1]) as f32;
    for (h, &s) in sums.iter().enumerate() {
        out.s16[2 * b + h] = d * s as f32;
        out.isum16[2 * b + h] = s;
    }
}

/// The portable code compiled for AVX2 (the compiler vectorises its loops).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn quantize_avx2(x: &[f32], out: BlocksMut<'_>) {
    quantize_portable(x, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
fn quantize_avx512(x: &[f32], out: BlocksMut<'_>) {
    use std::arch::x86_64::*;
    let mut rest = BlocksMutRef { d: out.d, s32: out.s32, s16: out.s16, isum16: out.isum16 };
    for (b, xb) in x.chunks_exact(QBLOCK).enumerate() {
        // SAFETY: xb has 32 floats (two unaligned 16-float loads) and the code slice
        // 32 bytes (two 16-byte stores); AVX-512 F/BW is enabled on this function.
        unsafe {
            let v0 = _mm512_loadu_ps(xb.as_ptr());
            let v1 = _mm512_loadu_ps(xb.as_ptr().add(HALF_BLOCK));
            let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            let (d, id) = block_scale(amax);
            let idv = _mm512_set1_ps(id);
            // Default MXCSR rounding: nearest-even, as `round_ties_even`.
            let q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, idv));
            let q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, idv));
            let dst = out.qs.as_mut_ptr().add(b * QBLOCK);
            _mm_storeu_si128(dst.cast(), _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128(dst.add(HALF_BLOCK).cast(), _mm512_cvtepi32_epi8(q1));
            let sums = [_mm512_reduce_add_epi32(q0), _mm512_reduce_add_epi32(q1)];
            finish_block(b, d, sums, &mut rest);
        }
    }
}
