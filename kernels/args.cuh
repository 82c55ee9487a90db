//! The decode kernel's argument block: one u64 per slot, slot numbers from the
//! engine's PG_ARG_* defines, and the accessors every part of the kernel reads it with.
#pragma once
#include "common.cuh"

/// One u64 per slot; slot numbers are the PG_ARG_* defines.
struct Args {
  u64 a[PG_NUM_ARGS];
};
#define ARG_PTR(T, NAME) (reinterpret_cast<T>(args.a[PG_ARG_##NAME]))
#define ARG_U32(NAME) ((u32)args.a[PG_ARG_##NAME])
#define ARG_F32(NAME) (__uint_as_float((u32)args.a[PG_ARG_##NAME]))
#define LAYER_PTR(T, LW, SLOT) (reinterpret_cast<T>(__ldg((LW) + PG_LW_##SLOT)))
