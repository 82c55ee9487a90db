//! The attention phase: RoPE and attention over the KV cache, flash-decoding splits
//! merged by the last block of each head (helpers in phases/head_qkv.cuh).
#pragma once
#include "decode_state.cuh"

/// RoPE and attention of layer `l`: (head, position split) items over the grid, the splits merged by the last to finish.
__device__ __forceinline__ void Decode::attention_phase() {
  // Flash-decoding split: enough splits that each block does about one pass of
  // loads, at most what the grid and the partial buffer hold.
  // Positions attended, the current one included: from `first` (a windowed layer's
  // oldest key) to s. Cache rows are addressed from `first` (`win`) in this section.
  const int first = first_key(l, (int)s + 1);
  const int n = (int)s + 1 - first;
  const size_t win = (size_t)first * HD;
  // attn_own: attention on the blocks after the row grid only (OWN_FAST: up to
  // OWN_MAX positions, on every block past it).
  int attn_first = 0;
  if constexpr (ATTN_OWN > 0) attn_first = row_grid() < (int)G && (!OWN_FAST || n <= OWN_MAX) ? row_grid() : 0;
  const bool own_fast = OWN_FAST && attn_first > 0;
  const int attn_blocks = (int)G - attn_first;
  const int attn_block = (int)rank_block() - attn_first;
  const int splits = min((n + ATTN_PASS - 1) / ATTN_PASS, max(1, min(PG_ATTN_MAX_SPLITS, attn_blocks / NH)));
  const int chunk = (n + splits - 1) / splits;
  const int sp_cur = (n - 1) / chunk;
  const int items = NH * splits;
  if (attn_block < items && (ATTN_OWN == 0 || attn_block >= 0)) {
    // stage: the cached k/v rows of this block's first item's first pass (written in
    // earlier steps) into the stage slots while waiting for this step's q/k/v.
    uint4* kv_stage = ATTN_STAGE ? reinterpret_cast<uint4*>(sm + STAGE_OFF) : nullptr;
    // own_fast: every cached row that fits.
    uint4* own_kv = reinterpret_cast<uint4*>(sm + STAGE_OFF);
    if (own_fast) {
      const int g0 = attn_block / GROUP;
      own_stage<THREADS, HD>(kc + (size_t)g0 * KV_CAP * HD + win, vc + (size_t)g0 * KV_CAP * HD + win, n - 1, OWN_CAP, own_kv);
    } else if (ATTN_STAGE) {
      const int h0 = attn_block % NH, sp0 = attn_block / NH, g0 = h0 / GROUP;
      const int a0 = sp0 * chunk;
      attend_stage<THREADS, HD>(kc + (size_t)g0 * KV_CAP * HD + win, vc + (size_t)g0 * KV_CAP * HD + win, a0,
                                splits == 1 ? n - 1 : min(n - 1, a0 + chunk), kv_stage);
    }
    u64* ev = trace_event(tr, l * PHASES + PH_ATTN);
    // This thread's rope pair's sin and cos (tagged: before the wait; the position is known).
    float rope_s = 0.f, rope_c = 1.f;
    // (Threads < HD: q's pairs, then k's; head_qkv.)
    if (TAGGED && threadIdx.x < HD) rope_angle<HD>(threadIdx.x % (HD / 2), s, inv_freq, rope_s, rope_c);
    if (!TAGGED) {
      block_wait(layer_ctr(ctr, l, PH_QKV), done, ev);
      if (threadIdx.x < HD) rope_angle<HD>(threadIdx.x % (HD / 2), s, inv_freq, rope_s, rope_c);
    }
    trace_wait_start(TAGGED ? ev : nullptr);
    float* q_s = sm;
    float* kv_s = sm + HD;  // k then v, HD each
    float* scratch = sm + 3 * HD;
    float* out_s = sm + ATTN_OUT;  // tagged: the head's output before it goes out
    // tagged: head h's output, complete in out_s, out as this step's words.
    auto publish_head = [&](int h) {
      if (TAGGED)
        for (int d = threadIdx.x; d < HD; d += THREADS) st_tagged(tl + T_ATTN + h * HD + d, out_s[d], tag);
    };
    for (int item = attn_block; item < items; item += attn_blocks) {
      const int h = item % NH, sp = item / NH, g = h / GROUP;
      const bool with_current = sp == sp_cur;
      if (TAGGED) {
        head_qkv([&](int a, int b, float& x, float& y) { wait_tagged2(tl + T_QKV + a, tl + T_QKV + b, tag, x, y); }, h,
                 with_current, rope_s, rope_c, q_s, kv_s);
        if (item == attn_block) trace_wait_end(ev);
      } else {
        head_qkv(
            [&](int a, int b, float& x, float& y) {
              x = ld_shared_f32(qkv + a);
              y = ld_shared_f32(qkv + b);
            },
            h, with_current, rope_s, rope_c, q_s, kv_s);
      }
      // tagged: the head's output goes to shared memory first, then out as tagged words.
      float* head_out = TAGGED ? out_s : attn + h * HD;
      // The staged first pass belongs to the block's first item.
      const uint4* staged = item == attn_block ? kv_stage : nullptr;
      bf16_t* kg = kc + (size_t)g * KV_CAP * HD;
      bf16_t* vg = vc + (size_t)g * KV_CAP * HD;
      if (with_current && h % GROUP == 0) {
        // The group's first head stores this position; the others use kv_s.
        for (int d = threadIdx.x; d < HD; d += THREADS) {
          kg[(size_t)s * HD + d] = f32_to_bf16(kv_s[d]);
          vg[(size_t)s * HD + d] = f32_to_bf16(kv_s[HD + d]);
        }
      }
      const int p0 = sp * chunk, p1 = min(n - 1, p0 + chunk);
      if (splits == 1) {
        if constexpr (OWN_FAST) {
          if (own_fast) attend_own<THREADS, HD>(q_s, kv_s, n, OWN_CAP, own_kv, scratch, head_out);
        }
        if (!own_fast)
          attend_range<THREADS, HD>(q_s, kv_s, kv_s + HD, true, kg + win, vg + win, 0, n - 1, nullptr, head_out, scratch, staged);
        publish_head(h);
      } else {
        float* head_parts = attn_part + (size_t)h * PG_ATTN_MAX_SPLITS * (HD + 2);
        attend_range<THREADS, HD>(q_s, kv_s, kv_s + HD, with_current, kg + win, vg + win, p0, p1, head_parts + sp * (HD + 2), nullptr,
                                  scratch, staged);
        // The last split of this head to finish merges all of them.
        u32* flag = reinterpret_cast<u32*>(red);
        if (threadIdx.x == 0) *flag = ticket_is_last(tickets + l * NH + h, (u32)splits) ? 1u : 0u;
        __syncthreads();
        if (*flag) {
          merge_states<THREADS, HD>(head_parts, splits, head_out);
          publish_head(h);  // (each thread reads back only the dimensions it wrote)
        }
        __syncthreads();
      }
    }
  }
  phase_end(layer_ctr(ctr, l, PH_ATTN), trace_event(tr, l * PHASES + PH_ATTN));
}
