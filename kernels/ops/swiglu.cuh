//! SwiGLU activation: silu(gate) · up, as the CPU reference computes it
//! (x / (1 + e^-x), accurate expf).
#pragma once

__device__ __forceinline__ float swiglu(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }
