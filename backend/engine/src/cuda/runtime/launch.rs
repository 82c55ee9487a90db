//! One run of the decode kernel: argument set-up, the launch on every rank, the host
//! loop that reads the token ring, and waiting for (or giving up on) the kernels.

use std::time::{Duration, Instant};

use cudarc::driver::{sys, CudaSlice, DevicePtrMut, DriverError, LaunchConfig, PushKernelArg};

use super::kernel::KernelArgs;
use super::prefill::Prefill;
use super::{check, cuda_err, CudaRuntime};
use crate::admission::check_fits;
use crate::cuda::layout::PEER_SENTINEL;
use crate::cuda::layout::{self, ctl, end, rec, Arg, MAX_DEVICE_STOP_TOKENS};
use crate::cuda::trace::{RawTrace, WORDS_PER_EVENT};
use crate::cuda::RunStats;
use crate::error::{CudaError, Error, Result};
use crate::runtime::{reusable_prefix, DecodeJob, Flow, RunEnd};
use crate::sampling::{Sampled, SamplingParams, TokenLogprob, MAX_TOP_LOGPROBS};

/// A run that publishes nothing for this long is reported as a hung kernel.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Polls of the ring between yields of the host thread.
const SPINS_PER_YIELD: u32 = 256;
/// Sleep between stream-status polls while scoring (no tokens to stream).
const KERNEL_POLL_US: u64 = 50;
/// Polls of the ring between checks that the kernel is still running.
const STATUS_EVERY_SPINS: u32 = 4096;

impl CudaRuntime {
    fn host_word(&self, i: usize) -> u32 {
        // SAFETY: `i` is inside the mapping (callers use ctl/rec offsets); volatile
        // because the GPU writes it concurrently.
        unsafe { std::ptr::read_volatile(self.host_ptr.add(i)) }
    }

    fn set_host_word(&self, i: usize, v: u32) {
        // SAFETY: as in `host_word`; the kernel reads these words with volatile loads.
        unsafe { std::ptr::write_volatile(self.host_ptr.add(i), v) }
    }

    /// Common launch: uploads the tokens and `seen` to every rank, zeroes counters,
    /// exchange regions and control words, fills each rank's arguments. Returns after
    /// every rank's stream is idle, so no kernel can write into a peer's region
    /// before that peer's counters are zeroed.
    pub(super) fn prepare(
        &mut self,
        prompt: &[u32],
        job_args: impl Fn(&mut KernelArgs),
        debug_rows: usize,
    ) -> Result<(Vec<KernelArgs>, Vec<CudaSlice<f32>>)> {
        if let Some(why) = &self.poisoned {
            return Err(CudaError::Kernel(format!("the GPU runtime is unusable after an earlier failure: {why}")).into());
        }
        // Admission checked the ids; this guards the device's memory (embedding rows, `seen`).
        let v = self.config.vocab_size;
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= v) {
            return Err(Error::TokenOutOfRange { id: bad, vocab_size: v });
        }
        let mut seen = vec![0u8; v];
        prompt.iter().for_each(|&t| seen[t as usize] = 1);
        for i in 0..ctl::WORDS {
            self.set_host_word(i, 0);
        }
        let tp = self.ranks.len();
        let mut all_args = Vec::with_capacity(tp);
        let mut dbgs = Vec::new();
        let trace_step = prompt.len() + layout::TRACE_AFTER_PROMPT;
        let mut trace_buf = None;
        self.last_trace = None;
        for (rank, r) in self.ranks.iter_mut().enumerate() {
            let stream = r.stream.clone();
            let st = &mut *r.state;
            stream.memcpy_htod(&seen, &mut st.seen).map_err(cuda_err("upload seen"))?;
            let mut toks = st.tokens.slice_mut(..prompt.len());
            stream.memcpy_htod(prompt, &mut toks).map_err(cuda_err("upload prompt"))?;
            stream.memset_zeros(&mut st.counters).map_err(cuda_err("zero counters"))?;
            stream.memset_zeros(&mut st.exchange).map_err(cuda_err("zero exchange"))?;
            // Tag 0 is never a step's: last run's words must not pass for this run's.
            if layout::tagged_words_used(&self.options, tp) {
                stream.memset_zeros(&mut st.tagged).map_err(cuda_err("zero tagged words"))?;
            }
            // The receive slots start as the sentinel the kernel's peer loads wait past.
            let rx_len = st.rx.len();
            let filled = {
                let (rx_ptr, _guard) = st.rx.device_ptr_mut(&stream);
                // SAFETY: `rx_ptr` addresses `st.rx`'s live allocation of `rx_len` f32 on this stream's context.
                unsafe { sys::cuMemsetD32Async(rx_ptr, PEER_SENTINEL, rx_len, stream.cu_stream()) }
            };
            check("fill receive slots", filled)?;
            if debug_rows > 0 {
                dbgs.push(stream.alloc_zeros::<f32>(debug_rows * self.shard.vocab_size).map_err(cuda_err("debug logits"))?);
            }
            let mut a = KernelArgs([0; Arg::COUNT]);
            let r = &*r;
            let st = &r.state;
            let w = &r.weights;
            a.set(Arg::Layers, r.dptr(&w.layer_table));
            a.set(Arg::Embed, w.embed);
            a.set(Arg::LmHead, w.lm_head);
            a.set(Arg::FinalNorm, w.final_norm);
            a.set(Arg::InvFreq, w.inv_freq);
            for (slot, buf) in [
                (Arg::X, &st.x),
                (Arg::Resid, &st.resid),
                (Arg::Qkv, &st.qkv),
                (Arg::Attn, &st.attn),
                (Arg::AttnPart, &st.attn_part),
                (Arg::Act, &st.act),
                (Arg::Logits, &st.logits),
                (Arg::Adj, &st.adj),
                (Arg::Partials, &st.partials),
            ] {
                a.set(slot, r.dptr(buf));
            }
            a.set(Arg::Kv, r.dptr(&st.kv));
            a.set(Arg::Counters, r.dptr(&st.counters));
            a.set(Arg::Tokens, r.dptr(&st.tokens));
            a.set(Arg::Seen, r.dptr(&st.seen));
            // A run without a logit bias sets this to 0 in `job_args`.
            a.set(Arg::LogitBias, r.dptr(&st.logit_bias));
            a.set(Arg::Counts, r.dptr(&st.counts));
            a.set(Arg::StopIds, r.dptr(&st.stop_ids));
            a.set(Arg::Peers, r.dptr(&st.peers));
            a.set(Arg::Rank, rank as u64);
            a.set(Arg::DebugLogits, dbgs.last().filter(|_| debug_rows > 0).map_or(0, |b| r.dptr(b)));
            a.set(Arg::Tagged, r.dptr(&st.tagged));
            if self.options.diagnostics.trace && rank == 0 {
                let words = self.grid as usize * r.kernel.trace_events * WORDS_PER_EVENT;
                let buf = stream.alloc_zeros::<u64>(words.max(1)).map_err(cuda_err("trace buffer"))?;
                a.set(Arg::Trace, r.dptr(&buf));
                a.set(Arg::TraceStep, trace_step as u64);
                trace_buf = Some((buf, trace_step));
            }
            // Only rank 0 talks to the host.
            if rank == 0 {
                a.set(Arg::HostCtl, self.host_dev);
                a.set(Arg::Ring, self.host_dev + (ctl::WORDS * std::mem::size_of::<u32>()) as u64);
            }
            a.set(Arg::NPrompt, prompt.len() as u64);
            a.set_f32(Arg::RepetitionPenalty, 1.0);
            job_args(&mut a);
            all_args.push(a);
        }
        for r in &self.ranks {
            r.stream.synchronize().map_err(cuda_err("prepare"))?;
        }
        self.trace_buf = trace_buf;
        Ok((all_args, dbgs))
    }

    /// Launches every rank's kernel back to back (rank 0 first; each waits for the
    /// others inside the kernel).
    pub(super) fn launch(&mut self, args: &[KernelArgs]) -> Result<()> {
        for (i, (r, a)) in self.ranks.iter().zip(args).enumerate() {
            let cfg = LaunchConfig {
                grid_dim: (self.grid, 1, 1),
                block_dim: (self.options.threads, 1, 1),
                shared_mem_bytes: r.kernel.smem_bytes,
            };
            let mut b = r.stream.launch_builder(&r.kernel.func);
            b.arg(a);
            // SAFETY: `a` holds pointers to live buffers of the sizes the kernel was
            // compiled for (peers' through enabled peer access); a cooperative launch
            // guarantees every block is resident, which the kernel's inter-block waits
            // need (it never uses a grid-wide barrier).
            let launched = if self.shared_gpu { unsafe { b.launch(cfg) }.map(|_| None) } else { unsafe { b.launch_cooperative(cfg) } };
            if let Err(source) = launched {
                let err = CudaError::Driver { context: format!("launch decode kernel on rank {i}"), source };
                if i > 0 {
                    // The ranks already launched wait for this one forever.
                    self.poisoned = Some(err.to_string());
                }
                return Err(err.into());
            }
        }
        Ok(())
    }

    /// None while any rank's kernel runs and none failed; else the first failure, or
    /// success once every rank's kernel has ended.
    fn kernel_status(&self) -> Option<sys::CUresult> {
        let mut running = false;
        for r in &self.ranks {
            // SAFETY: querying a live stream of this context has no other preconditions.
            let status = unsafe { sys::cuStreamQuery(r.stream.cu_stream()) };
            match status {
                sys::CUresult::CUDA_ERROR_NOT_READY => running = true,
                sys::CUresult::CUDA_SUCCESS => {}
                failed => return Some(failed),
            }
        }
        if running {
            None
        } else {
            Some(sys::CUresult::CUDA_SUCCESS)
        }
    }

    /// A stall (`why`): the runtime is poisoned and every rank's device refuses new
    /// runtimes in this process (hung.rs: the stalled kernel holds every SM until exit).
    fn stalled(&mut self, why: String) -> Error {
        for r in &self.ranks {
            crate::cuda::hung::mark(r.ctx.ordinal());
        }
        self.poisoned = Some(why.clone());
        CudaError::Kernel(why).into()
    }

    /// Waits for every rank's kernel to end without blocking in the driver, so a hung
    /// kernel becomes an error after [`DEFAULT_STALL_TIMEOUT`] instead of a hung thread.
    fn wait_kernel(&mut self) -> Result<()> {
        let started = Instant::now();
        loop {
            match self.kernel_status() {
                Some(sys::CUresult::CUDA_SUCCESS) => return Ok(()),
                None => {}
                Some(other) => {
                    let err = CudaError::Driver { context: "the decode kernel failed".into(), source: DriverError(other) };
                    self.poisoned = Some(err.to_string());
                    return Err(err.into());
                }
            }
            if started.elapsed() > DEFAULT_STALL_TIMEOUT {
                return Err(self.stalled(format!("the decode kernel did not finish within {DEFAULT_STALL_TIMEOUT:?}")));
            }
            std::thread::sleep(Duration::from_micros(KERNEL_POLL_US));
        }
    }

    /// Waits for the kernels, then collects the debug logits: each run's row is the
    /// concatenation of the ranks' vocabulary shards.
    pub(super) fn finish(&mut self, dbgs: Vec<CudaSlice<f32>>, rows: usize) -> Result<()> {
        self.wait_kernel()?;
        for r in &self.ranks {
            r.stream.synchronize().map_err(cuda_err("decode kernel"))?;
        }
        if let Some((buf, step)) = self.trace_buf.take() {
            let r = &self.ranks[0];
            let words = r.stream.clone_dtoh(&buf).map_err(cuda_err("read trace"))?;
            let layers = self.config.num_layers;
            let expected = crate::cuda::trace::events_for(layers);
            if r.kernel.trace_events != expected {
                return Err(CudaError::Mismatch(format!(
                    "the kernel's trace has {} events per block, the host expects {expected}",
                    r.kernel.trace_events
                ))
                .into());
            }
            self.last_trace = Some(RawTrace { blocks: self.grid as usize, layers, step, words });
        }
        self.last_logits.clear();
        if !dbgs.is_empty() {
            let vl = self.shard.vocab_size;
            let mut out = vec![Vec::with_capacity(self.config.vocab_size); rows];
            for (r, buf) in self.ranks.iter().zip(&dbgs) {
                let all = r.stream.clone_dtoh(&buf.slice(..rows * vl)).map_err(cuda_err("read debug logits"))?;
                for (row, chunk) in out.iter_mut().zip(all.chunks_exact(vl)) {
                    row.extend_from_slice(chunk);
                }
            }
            self.last_logits = out;
        }
        Ok(())
    }

    /// Uploads what `s` adds to the logits on the device: the logit bias per token (ids
    /// past the vocabulary change nothing, as on the CPU), and zeroed counts of generated
    /// tokens when OpenAI's penalties are on.
    fn upload_adjustments(&mut self, s: &SamplingParams) -> Result<()> {
        let bias = (!s.logit_bias.is_empty()).then(|| {
            let mut b = vec![0f32; self.config.vocab_size];
            for &(id, v) in &s.logit_bias {
                if let Some(slot) = b.get_mut(id as usize) {
                    *slot = v;
                }
            }
            b
        });
        let counting = s.presence_penalty != 0.0 || s.frequency_penalty != 0.0;
        for r in self.ranks.iter_mut() {
            let stream = r.stream.clone();
            if let Some(b) = &bias {
                stream.memcpy_htod(b, &mut r.state.logit_bias).map_err(cuda_err("upload logit bias"))?;
            }
            if counting {
                stream.memset_zeros(&mut r.state.counts).map_err(cuda_err("zero token counts"))?;
            }
        }
        Ok(())
    }

    fn read_record(&self, t: usize) -> (Sampled, u64) {
        let base = ctl::WORDS + (t % self.options.ring) * rec::WORDS;
        let w = |i: usize| self.host_word(base + i);
        let n_top = (w(rec::NTOP) as usize).min(MAX_TOP_LOGPROBS);
        let top = (0..n_top).map(|k| TokenLogprob { id: w(rec::TOP_IDS + k), logprob: f32::from_bits(w(rec::TOP_LPS + k)) }).collect();
        let time = w(rec::TIME_LO) as u64 | (w(rec::TIME_HI) as u64) << 32;
        (Sampled { id: w(rec::ID), logprob: f32::from_bits(w(rec::LOGPROB)), top }, time)
    }

    /// [`Runtime::generate`](crate::runtime::Runtime::generate): checks the job, prefills
    /// the prompt, launches, then hands the ring's records to `on_token` until the run ends.
    pub(super) fn decode(&mut self, job: &DecodeJob<'_>, on_token: &mut dyn FnMut(&Sampled) -> Flow) -> Result<RunEnd> {
        check_fits(&self.config, job.prompt.len(), job.max_tokens)?;
        job.sampling.validate()?;
        if job.prompt.len() + job.max_tokens > self.kv_cap {
            return Err(Error::ContextOverflow { prompt: job.prompt.len(), max_tokens: job.max_tokens, context: self.kv_cap });
        }
        if job.max_tokens == 0 {
            return Ok(RunEnd::Length);
        }
        // The KV rows past the kept prefix are about to be overwritten: until the run
        // ends, only the prefix is known to be cached.
        let keep = if job.reuse_prefix { reusable_prefix(&self.cached, job.prompt) } else { 0 };
        self.cached.truncate(keep);
        self.reused = keep;
        // The batched prefill takes milliseconds, so the last chance to skip a run the
        // caller gave up is before launch; afterwards `on_token` stops it at token one
        // (the kernel reads the stop flag only at the LM head).
        if job.cancel.requested() {
            return Ok(RunEnd::Stopped);
        }
        let (device_stops, host_stops) = job.stop_tokens.split_at(job.stop_tokens.len().min(MAX_DEVICE_STOP_TOKENS));
        if !device_stops.is_empty() {
            for r in self.ranks.iter_mut() {
                let stream = r.stream.clone();
                let mut dst = r.state.stop_ids.slice_mut(..device_stops.len());
                stream.memcpy_htod(device_stops, &mut dst).map_err(cuda_err("upload stop ids"))?;
            }
        }
        let s = job.sampling;
        self.upload_adjustments(s)?;
        let debug_rows = if self.debug_logits { job.max_tokens } else { 0 };
        let started = Instant::now();
        let (mut args, dbg) = self.prepare(
            job.prompt,
            |a| {
                a.set(Arg::MaxTokens, job.max_tokens as u64);
                a.set(Arg::NStop, device_stops.len() as u64);
                a.set(Arg::TopLogprobs, job.top_logprobs.min(MAX_TOP_LOGPROBS) as u64);
                a.set_f32(Arg::RepetitionPenalty, s.repetition_penalty);
                a.set_f32(Arg::PresencePenalty, s.presence_penalty);
                a.set_f32(Arg::FrequencyPenalty, s.frequency_penalty);
                if s.logit_bias.is_empty() {
                    a.set(Arg::LogitBias, 0);
                }
                a.set_f32(Arg::Temperature, s.temperature);
                a.set(Arg::TopK, s.top_k.min(u32::MAX as usize) as u64);
                a.set_f32(Arg::TopP, s.top_p);
                a.set_f32(Arg::MinP, s.min_p);
                a.set(Arg::Seed, s.seed);
                // Sampling and top log-probs read the whole vocabulary on every rank.
                a.set(Arg::Gather, u64::from(s.temperature != 0.0 || job.top_logprobs > 0));
            },
            debug_rows,
        )?;
        let prefill = self.enqueue_prefill(keep, job.prompt.len())?;
        for a in args.iter_mut() {
            a.set(Arg::StartStep, prefill.positions as u64);
        }
        self.launch(&args)?;
        let mut stats = RunStats { prompt_tokens: job.prompt.len(), prefill_positions: prefill.positions - keep, ..Default::default() };
        let mut published_ids = Vec::new();
        let mut next = 0usize;
        let mut outcome: Option<RunEnd> = None;
        let mut last_progress = Instant::now();
        let mut spins = 0u32;
        loop {
            let done = self.host_word(ctl::DONE) != 0;
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            let published = self.host_word(ctl::PUBLISHED) as usize;
            while next < published {
                let (sampled, time) = self.read_record(next);
                published_ids.push(sampled.id);
                stats.token_times_ns.push(time);
                if stats.first_token.is_none() {
                    stats.first_token = Some(started.elapsed());
                }
                next += 1;
                self.set_host_word(ctl::CONSUMED, next as u32);
                if outcome.is_some() {
                    continue; // generated after the host asked to stop: dropped
                }
                if host_stops.contains(&sampled.id) {
                    outcome = Some(RunEnd::StopToken);
                    self.set_host_word(ctl::STOP, 1);
                } else if on_token(&sampled) == Flow::Stop {
                    outcome = Some(RunEnd::Stopped);
                    self.set_host_word(ctl::STOP, 1);
                }
                last_progress = Instant::now();
            }
            if done && next >= published {
                break;
            }
            if spins.is_multiple_of(STATUS_EVERY_SPINS) && !done {
                // A kernel that faulted or returned without ending the run never sets DONE.
                let status = self.kernel_status();
                if let Some(status) = status.filter(|_| self.host_word(ctl::DONE) == 0) {
                    let err = if status == sys::CUresult::CUDA_SUCCESS {
                        CudaError::Kernel("the decode kernel exited without ending the run".into())
                    } else {
                        CudaError::Driver { context: "the decode kernel failed".into(), source: DriverError(status) }
                    };
                    self.poisoned = Some(err.to_string());
                    return Err(err.into());
                }
            }
            if last_progress.elapsed() > DEFAULT_STALL_TIMEOUT {
                self.set_host_word(ctl::STOP, 1);
                return Err(self.stalled(format!("the decode kernel published nothing for {DEFAULT_STALL_TIMEOUT:?} (token {next})")));
            }
            spins += 1;
            if spins.is_multiple_of(SPINS_PER_YIELD) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let reason = self.host_word(ctl::REASON);
        self.finish(dbg, debug_rows.min(next + 1))?;
        // Every published token but the last went through the kernel, its KV rows
        // written; the last one never does (the run ended at its sampling).
        self.cached = [job.prompt, &published_ids].concat();
        self.cached.truncate(job.prompt.len() + published_ids.len() - 1);
        if let Some((start, stop)) = &prefill.span {
            stats.prefill_gpu_ms = Some(start.elapsed_ms(stop).map_err(cuda_err("prefill event time"))? as f64);
        }
        if !prefill.ops.is_empty() {
            self.last_prefill_split = Some(Prefill::split(&prefill.ops)?);
        }
        stats.published = next;
        stats.total = started.elapsed();
        self.last_run = stats;
        if let Some(o) = outcome {
            return Ok(o);
        }
        match reason {
            end::LENGTH => Ok(RunEnd::Length),
            end::STOP_TOKEN => Ok(RunEnd::StopToken),
            end::STOPPED => Ok(RunEnd::Stopped),
            other => Err(CudaError::Mismatch(format!("the decode kernel ended with unknown reason {other}")).into()),
        }
    }
}
