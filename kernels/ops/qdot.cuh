//! Integer dot products of quantized rows with the input in block fixed point: each
//! 32-element chunk of the input becomes 24-bit integers under one float scale, held as
//! three byte planes, so a row's codes meet it through dp4a (4 products per
//! instruction) instead of a float conversion and a multiply-add per element. The
//! planes' byte order is the order in which a chunk's codes fall out of their words
//! (docs/quantized.md), so no code is moved before its dot product.
#pragma once
#include "common.cuh"

/// Bytes of one prepared input chunk: planes A (signed high byte), B, D (unsigned middle
/// and low bytes) of 32 bytes each, then the scale, Σx and Σx over the first 16
/// original elements. 112 bytes keeps eight lanes' 16-byte reads on distinct banks.
constexpr int XQ_CHUNK = 112;
/// The largest integer magnitude of an input element (below 2^23, so the high byte
/// stays a signed byte after rounding).
constexpr float XQ_MAX = 8388600.f;

/// Shared-memory bytes of a K-element prepared input.
__host__ __device__ constexpr int xq_bytes(int k) { return k / 32 * XQ_CHUNK; }

/// The input `x` (K floats, shared or global) as prepared chunks in `xq` (shared).
/// Every thread of the block calls it; the caller synchronises before reading `xq`.
/// Element e of original group g in chunk c lies in stored group sg = (g − c) mod 8
/// (the weights' rotation); in each plane it is byte 2·(sg & 1) + (e >> 1) of word
/// 2·(sg >> 1) + (e & 1): codes split into low and high nibbles land that way.
template <int THREADS, int K>
__device__ __forceinline__ void q_prep_x(const float* x, unsigned char* xq) {
  for (int i = threadIdx.x; i < K / 4; i += THREADS) {
    const int c = i / 8, g = i % 8;
    const float* xc = x + 32 * c;
    float mx = 0.f, sx = 0.f, sx1 = 0.f;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float4 v = *reinterpret_cast<const float4*>(xc + 4 * k);
      mx = fmaxf(mx, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
      const float s4 = (v.x + v.y) + (v.z + v.w);
      sx += s4;
      if (k < 4) sx1 += s4;
    }
    const float inv = mx > 0.f ? XQ_MAX / mx : 0.f;
    const float4 v = *reinterpret_cast<const float4*>(xc + 4 * g);
    const int m[4] = {__float2int_rn(v.x * inv), __float2int_rn(v.y * inv), __float2int_rn(v.z * inv), __float2int_rn(v.w * inv)};
    unsigned char* base = xq + c * XQ_CHUNK;
    const int sg = (g - c) & 7;
    const int lo = 8 * (sg >> 1) + 2 * (sg & 1), hi = lo + 4;
#pragma unroll
    for (int p = 0; p < 3; ++p) {
      const int sh = 16 - 8 * p;
      const u32 b0 = (u32)(m[0] >> sh) & 0xFF, b1 = (u32)(m[1] >> sh) & 0xFF, b2 = (u32)(m[2] >> sh) & 0xFF, b3 = (u32)(m[3] >> sh) & 0xFF;
      *reinterpret_cast<unsigned short*>(base + 32 * p + lo) = (unsigned short)(b0 | b2 << 8);
      *reinterpret_cast<unsigned short*>(base + 32 * p + hi) = (unsigned short)(b1 | b3 << 8);
    }
    if (g == 0) *reinterpret_cast<float4*>(base + 96) = make_float4(mx > 0.f ? mx / XQ_MAX : 0.f, sx, sx1, 0.f);
  }
}

/// One lane's prepared input chunk.
struct QX {
  uint4 a[2], b[2], d[2];
  float4 t;  // scale, Σx, Σx of the first half
};

__device__ __forceinline__ QX qx_load(const unsigned char* xq, int c) {
  const uint4* p = reinterpret_cast<const uint4*>(xq + c * XQ_CHUNK);
  QX x;
  x.a[0] = p[0];
  x.a[1] = p[1];
  x.b[0] = p[2];
  x.b[1] = p[3];
  x.d[0] = p[4];
  x.d[1] = p[5];
  x.t = *reinterpret_cast<const float4*>(p + 6);
  return x;
}

/// Word w (0..7) of a plane's two uint4.
__device__ __forceinline__ u32 qx_word(const uint4 (&p)[2], int w) {
  const uint4 v = p[w >> 2];
  return (w & 3) == 0 ? v.x : (w & 3) == 1 ? v.y : (w & 3) == 2 ? v.z : v.w;
}

/// acc + Σ of 4 byte products: signed codes (SIGNED) or unsigned ones, times signed
/// (A plane) or unsigned (B, D planes) input bytes.
template <bool SIGNED_CODES, bool SIGNED_X>
__device__ __forceinline__ int dp4(u32 codes, u32 x, int acc) {
  int r;
  if constexpr (SIGNED_CODES && SIGNED_X) asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(codes), "r"(x), "r"(acc));
  else if constexpr (SIGNED_CODES) asm("dp4a.s32.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(codes), "r"(x), "r"(acc));
  else if constexpr (SIGNED_X) asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(codes), "r"(x), "r"(acc));
  else asm("dp4a.u32.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(codes), "r"(x), "r"(acc));
  return r;
}

/// Integer sums of one chunk's codes against the three planes.
struct QSum {
  int a, b, d;
};

/// s += codes word `w` (plane word index) · the chunk's input words w.
template <bool SIGNED_CODES>
__device__ __forceinline__ void qsum_add(QSum& s, u32 codes, const QX& x, int w) {
  s.a = dp4<SIGNED_CODES, true>(codes, qx_word(x.a, w), s.a);
  s.b = dp4<SIGNED_CODES, false>(codes, qx_word(x.b, w), s.b);
  s.d = dp4<SIGNED_CODES, false>(codes, qx_word(x.d, w), s.d);
}

/// A small integer (|v| < 2^22) as a float, exactly, without the quarter-rate conversion.
__device__ __forceinline__ float small_int_f(int v) { return __int_as_float(0x4B400000 + v) - 12582912.f; }

/// Σ codes · x of a chunk in input units: the planes' sums recombined, times the scale.
__device__ __forceinline__ float qsum_value(const QSum& s, float scale) {
  return scale * fmaf(small_int_f(s.a), 65536.f, fmaf(small_int_f(s.b), 256.f, small_int_f(s.d)));
}
