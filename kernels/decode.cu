//! The persistent decode kernel: ONE launch per request runs every step (prompt
//! tokens, then generated ones) and streams tokens to the host through host-mapped
//! memory. This file is the step loop; the state it carries is decode_state.cuh, each
//! phase's schedule (which block does what, what it waits on) one file in phases/, the
//! math in ops/*.cuh, the compile-time schedule in schedule.cuh, shared memory in
//! smem_plan.cuh, the design in docs/kernel.md. The shape and slots are -D defines from
//! the engine (cuda/layout); without them (scripts/check-kernels.sh) the file is empty.
#ifdef PG_D
#include "common.cuh"
#include "shape.cuh"
#include "sync.cuh"
#include "ops/allreduce.cuh"
#include "ops/attend_own.cuh"
#include "ops/attention.cuh"
#include "ops/emit.cuh"
#include "ops/lm_head.cuh"
#include "ops/matvec.cuh"
#include "ops/rmsnorm.cuh"
#include "ops/rope.cuh"
#include "ops/token_choice.cuh"
#include "ops/select.cuh"
#include "ops/swiglu.cuh"
#include "ops/tagged.cuh"
#include "ops/trace.cuh"
#include "schedule.cuh"
#include "smem_plan.cuh"
#include "args.cuh"
#include "phases/common.cuh"
#include "phases/exchange.cuh"
#include "phases/head_qkv.cuh"
#include "phases/down_waves.cuh"
#include "decode_state.cuh"
#include "phases/qkv.cuh"
#include "phases/attend.cuh"
#include "phases/o_proj.cuh"
#include "phases/gate_up.cuh"
#include "phases/down_proj.cuh"
#include "phases/lm_head.cuh"
#include "phases/sampler.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, 1) pg_decode(const Args args) {
#if PG_VRANKS > 1
  // Ranks sharing one launch: each reads its own argument block from the table rank 0's names.
  Decode k(reinterpret_cast<const Args*>(args.a[PG_ARG_RANK_ARGS])[launch_rank()]);
#else
  Decode k(args);
#endif
  for (u32 s = k.start; s < k.steps; ++s) {
    if (!k.begin_step(s)) return;
    for (int l = 0; l < L; ++l) {
      k.begin_layer(l);
      k.qkv_phase();
      k.attention_phase();
      k.o_phase();
      k.gate_up_phase();
      k.down_phase();
    }
    if (!k.lm_here) {
      // tagged: a prompt step without LM head still arrives on the last layer's DOWN
      // counter (after phase_end's barrier): the next step's chain waits on it.
      if (TAGGED && threadIdx.x == 0) red_release_gpu(layer_ctr(k.ctr, L - 1, PH_DOWN), 1);
      continue;
    }
    const u32 host_stop = k.lm_head_phase();
    if (k.score || rank_block() != 0) continue;
    k.sampler_phase(host_stop);
  }
}

#endif  // PG_D
