//! The model's shape as compile-time constants, from the -D defines the engine generates
//! (backend/engine/src/cuda/layout.rs), shared by the decode and prefill kernels. Under
//! tensor parallelism NH, NKV, F and V are this rank's shard; D, L and HD stay whole.
#pragma once

constexpr int D = PG_D;
constexpr int F = PG_F;
constexpr int L = PG_L;
constexpr int NH = PG_NH;
constexpr int NKV = PG_NKV;
constexpr int HD = PG_HD;
constexpr int V = PG_V;
constexpr int KV_CAP = PG_KV_CAP;
constexpr float EPS = PG_EPS;
constexpr int QD = NH * HD;
constexpr int KVD = NKV * HD;
constexpr int QKV = QD + 2 * KVD;
constexpr int GROUP = NH / NKV;
static_assert(NH % NKV == 0, "query heads must be a multiple of KV heads");
