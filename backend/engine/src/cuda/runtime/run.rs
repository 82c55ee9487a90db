//! One run of the decode kernel across the parts: argument set-up on every rank, the
//! batched prefill, the launch, the host loop that reads the token ring, and the
//! read-back after the kernels end; plus the prompt prefix the KV caches keep between runs.

use std::time::Instant;

use cudarc::driver::{sys, CudaSlice, DevicePtrMut};

use super::grammar::{GrammarFeed, Took};
use super::kernel::KernelArgs;
use super::launch::{Launch, DEFAULT_STALL_TIMEOUT};
use super::prefill::Prefill;
use super::{check, cuda_err, CudaRuntime};
use crate::admission::check_fits;
use crate::cuda::layout::PEER_SENTINEL;
use crate::cuda::layout::{self, ctl, end, Arg, MAX_DEVICE_STOP_TOKENS};
use crate::cuda::trace::{RawTrace, WORDS_PER_EVENT};
use crate::cuda::RunStats;
use crate::error::{CudaError, Error, Result};
use crate::runtime::{reusable_prefix, DecodeJob, Flow, RunEnd, Runtime};
use crate::sampling::{Sampled, SamplingParams, MAX_TOP_LOGPROBS};

/// Polls of the ring between yields of the host thread.
const SPINS_PER_YIELD: u32 = 256;
/// Polls of the ring between checks that the kernel is still running.
const STATUS_EVERY_SPINS: u32 = 4096;

/// The prompt prefix every rank's KV cache holds between runs (prompt reuse).
#[derive(Default)]
pub(super) struct PromptCache {
    /// The tokens whose keys and values every rank's KV cache holds.
    pub(super) tokens: Vec<u32>,
    /// Prompt tokens the last `generate` took from `tokens`.
    pub(super) reused: usize,
}

/// What `prepare` set up for one run: each rank's arguments, the logits buffers the
/// kernels write (one per rank, when asked for), and rank 0's trace buffer with its traced step.
pub(super) struct Prepared {
    pub(super) args: Vec<KernelArgs>,
    logits: Vec<CudaSlice<f32>>,
    trace: Option<(CudaSlice<u64>, usize)>,
}

impl CudaRuntime {
    /// Common launch: uploads the tokens and `seen` to every rank, zeroes counters,
    /// exchange regions and control words, fills each rank's arguments (`debug_rows`
    /// rows of logits recorded). Returns after every rank's stream is idle, so no kernel
    /// can write into a peer's region before that peer's counters are zeroed.
    pub(super) fn prepare(&mut self, prompt: &[u32], job_args: impl Fn(&mut KernelArgs), debug_rows: usize) -> Result<Prepared> {
        self.launch.usable()?;
        // Admission checked the ids; this guards the device's memory (embedding rows, `seen`).
        let v = self.shape.config.vocab_size;
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= v) {
            return Err(Error::TokenOutOfRange { id: bad, vocab_size: v });
        }
        let mut seen = vec![0u8; v];
        prompt.iter().for_each(|&t| seen[t as usize] = 1);
        for i in 0..ctl::WORDS {
            self.launch.set_host_word(i, 0);
        }
        let tp = self.devices.tp();
        let options = &self.shape.options;
        let mut all_args = Vec::with_capacity(tp);
        let mut dbgs = Vec::new();
        let trace_step = prompt.len() + layout::TRACE_AFTER_PROMPT;
        let mut trace = None;
        self.probes.keep_trace(None);
        let ranks = self.devices.gpus.iter().zip(&self.kernels.ranks).zip(&*self.weights.ranks).zip(self.buffers.ranks.iter_mut());
        for (rank, (((g, k), w), st)) in ranks.enumerate() {
            let stream = &g.stream;
            stream.memcpy_htod(&seen, &mut st.seen).map_err(cuda_err("upload seen"))?;
            let mut toks = st.tokens.slice_mut(..prompt.len());
            stream.memcpy_htod(prompt, &mut toks).map_err(cuda_err("upload prompt"))?;
            stream.memset_zeros(&mut st.counters).map_err(cuda_err("zero counters"))?;
            stream.memset_zeros(&mut st.exchange).map_err(cuda_err("zero exchange"))?;
            // Tag 0 is never a step's: last run's words must not pass for this run's.
            if layout::tagged_words_used(options, tp) {
                stream.memset_zeros(&mut st.tagged).map_err(cuda_err("zero tagged words"))?;
            }
            // The receive slots start as the sentinel the kernel's peer loads wait past.
            let rx_len = st.rx.len();
            let filled = {
                let (rx_ptr, _guard) = st.rx.device_ptr_mut(stream);
                // SAFETY: `rx_ptr` addresses `st.rx`'s live allocation of `rx_len` f32 on this stream's context.
                unsafe { sys::cuMemsetD32Async(rx_ptr, PEER_SENTINEL, rx_len, stream.cu_stream()) }
            };
            check("fill receive slots", filled)?;
            if debug_rows > 0 {
                dbgs.push(stream.alloc_zeros::<f32>(debug_rows * self.shape.shard.vocab_size).map_err(cuda_err("debug logits"))?);
            }
            let mut a = KernelArgs([0; Arg::COUNT]);
            let st = &*st;
            a.set(Arg::Layers, g.dptr(&w.layer_table));
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
                a.set(slot, g.dptr(buf));
            }
            a.set(Arg::Kv, g.dptr(&st.kv));
            a.set(Arg::Counters, g.dptr(&st.counters));
            a.set(Arg::Tokens, g.dptr(&st.tokens));
            a.set(Arg::Seen, g.dptr(&st.seen));
            // A run without a logit bias sets this to 0 in `job_args`.
            a.set(Arg::LogitBias, g.dptr(&st.logit_bias));
            // A constrained run sets this in `job_args`.
            a.set(Arg::Mask, 0);
            a.set(Arg::Counts, g.dptr(&st.counts));
            a.set(Arg::StopIds, g.dptr(&st.stop_ids));
            a.set(Arg::Peers, g.dptr(&st.peers));
            a.set(Arg::Rank, rank as u64);
            a.set(Arg::DebugLogits, dbgs.last().filter(|_| debug_rows > 0).map_or(0, |b| g.dptr(b)));
            a.set(Arg::Tagged, g.dptr(&st.tagged));
            if options.diagnostics.trace && rank == 0 {
                let words = self.devices.grid as usize * k.trace_events * WORDS_PER_EVENT;
                let buf = stream.alloc_zeros::<u64>(words.max(1)).map_err(cuda_err("trace buffer"))?;
                a.set(Arg::Trace, g.dptr(&buf));
                a.set(Arg::TraceStep, trace_step as u64);
                trace = Some((buf, trace_step));
            }
            // Only rank 0 talks to the host.
            if rank == 0 {
                let (host_ctl, ring) = self.launch.device_addresses();
                a.set(Arg::HostCtl, host_ctl);
                a.set(Arg::Ring, ring);
            }
            a.set(Arg::NPrompt, prompt.len() as u64);
            a.set_f32(Arg::RepetitionPenalty, 1.0);
            job_args(&mut a);
            all_args.push(a);
        }
        for g in &self.devices.gpus {
            g.stream.synchronize().map_err(cuda_err("prepare"))?;
        }
        Ok(Prepared { args: all_args, logits: dbgs, trace })
    }

    /// Launches every rank's kernel with `args` (one kernel for all ranks under `one_launch`).
    pub(super) fn launch(&mut self, args: &[KernelArgs]) -> Result<()> {
        if layout::launch_ranks(&self.shape.options, self.devices.tp()) > 1 {
            return self.launch_as_one(args);
        }
        self.launch.launch(&self.devices, &self.kernels, self.shape.options.threads, args)
    }

    /// `one_launch`: every rank's argument block into rank 0's table, rank 0's stream
    /// after the work queued on the others (each rank's prefill), then one kernel of
    /// every rank's blocks on it.
    fn launch_as_one(&mut self, args: &[KernelArgs]) -> Result<()> {
        let table: Vec<u64> = args.iter().flat_map(|a| a.0).collect();
        let g0 = &self.devices.gpus[0];
        g0.stream.memcpy_htod(&table, &mut self.buffers.ranks[0].rank_args).map_err(cuda_err("upload the ranks' arguments"))?;
        let no_timing = Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING);
        let queued = self.devices.gpus.iter().map(|g| g.stream.record_event(no_timing).map_err(cuda_err("event"))).collect::<Result<Vec<_>>>()?;
        g0.wait_for_peers(0, &queued, "wait for the ranks' queued work")?;
        let mut first = args[0];
        first.set(Arg::RankArgs, g0.dptr(&self.buffers.ranks[0].rank_args));
        self.launch.launch_one(&self.devices, &self.kernels, self.shape.options.threads, &first)
    }

    /// Waits for the kernels, reads the trace back, then returns `rows` rows of the
    /// recorded logits (none if none were): each row is the concatenation of the ranks'
    /// vocabulary shards.
    pub(super) fn finish(&mut self, run: Prepared, rows: usize) -> Result<Vec<Vec<f32>>> {
        self.launch.wait(&self.devices)?;
        for g in &self.devices.gpus {
            g.stream.synchronize().map_err(cuda_err("decode kernel"))?;
        }
        if let Some((buf, step)) = run.trace {
            let (g, k) = (&self.devices.gpus[0], &self.kernels.ranks[0]);
            let words = g.stream.clone_dtoh(&buf).map_err(cuda_err("read trace"))?;
            let layers = self.shape.config.num_layers;
            let expected = crate::cuda::trace::events_for(layers);
            if k.trace_events != expected {
                return Err(CudaError::Mismatch(format!(
                    "the kernel's trace has {} events per block, the host expects {expected}",
                    k.trace_events
                ))
                .into());
            }
            self.probes.keep_trace(Some(RawTrace { blocks: self.devices.grid as usize, layers, step, words }));
        }
        let mut out = Vec::new();
        if !run.logits.is_empty() {
            let vl = self.shape.shard.vocab_size;
            out = vec![Vec::with_capacity(self.shape.config.vocab_size); rows];
            for (g, buf) in self.devices.gpus.iter().zip(&run.logits) {
                let all = g.stream.clone_dtoh(&buf.slice(..rows * vl)).map_err(cuda_err("read debug logits"))?;
                for (row, chunk) in out.iter_mut().zip(all.chunks_exact(vl)) {
                    row.extend_from_slice(chunk);
                }
            }
        }
        Ok(out)
    }

    /// Uploads what `s` adds to the logits on the device: the logit bias per token (ids
    /// past the vocabulary change nothing, as on the CPU), and zeroed counts of generated
    /// tokens when OpenAI's penalties are on.
    fn upload_adjustments(&mut self, s: &SamplingParams) -> Result<()> {
        let bias = (!s.logit_bias.is_empty()).then(|| {
            let mut b = vec![0f32; self.shape.config.vocab_size];
            for &(id, v) in &s.logit_bias {
                if let Some(slot) = b.get_mut(id as usize) {
                    *slot = v;
                }
            }
            b
        });
        let counting = s.presence_penalty != 0.0 || s.frequency_penalty != 0.0;
        for (g, st) in self.devices.gpus.iter().zip(self.buffers.ranks.iter_mut()) {
            if let Some(b) = &bias {
                g.stream.memcpy_htod(b, &mut st.logit_bias).map_err(cuda_err("upload logit bias"))?;
            }
            if counting {
                g.stream.memset_zeros(&mut st.counts).map_err(cuda_err("zero token counts"))?;
            }
        }
        Ok(())
    }

    /// [`Runtime::generate`](crate::runtime::Runtime::generate): checks the job, prefills
    /// the prompt, launches, then hands the ring's records to `on_token` until the run ends.
    pub(super) fn decode(&mut self, job: &DecodeJob<'_>, on_token: &mut dyn FnMut(&Sampled) -> Flow) -> Result<RunEnd> {
        check_fits(&self.shape.config, job.prompt.len(), job.max_tokens)?;
        job.sampling.validate()?;
        if job.prompt.len() + job.max_tokens > self.shape.kv_cap {
            return Err(Error::ContextOverflow { prompt: job.prompt.len(), max_tokens: job.max_tokens, context: self.shape.kv_cap });
        }
        if job.max_tokens == 0 {
            return Ok(RunEnd::Length);
        }
        // The KV rows past the kept prefix are about to be overwritten: until the run
        // ends, only the prefix is known to be cached.
        let keep = if job.reuse_prefix { reusable_prefix(&self.cache.tokens, job.prompt) } else { 0 };
        self.cache.tokens.truncate(keep);
        self.cache.reused = keep;
        // The batched prefill takes milliseconds, so the last chance to skip a run the
        // caller gave up is before launch; afterwards `on_token` stops it at token one
        // (the kernel reads the stop flag only at the LM head).
        if job.cancel.requested() {
            return Ok(RunEnd::Stopped);
        }
        let (device_stops, host_stops) = job.stop_tokens.split_at(job.stop_tokens.len().min(MAX_DEVICE_STOP_TOKENS));
        if !device_stops.is_empty() {
            for (g, st) in self.devices.gpus.iter().zip(self.buffers.ranks.iter_mut()) {
                let mut dst = st.stop_ids.slice_mut(..device_stops.len());
                g.stream.memcpy_htod(device_stops, &mut dst).map_err(cuda_err("upload stop ids"))?;
            }
        }
        let mut grammar = match job.constraint {
            Some(c) if self.follows_grammars() => {
                Some(GrammarFeed::new(c.guide(), self.shape.config.vocab_size, &self.devices.gpus[0].ctx)?)
            }
            Some(c) => return Err(crate::constraint::unsupported("cuda", c.kind())),
            None => None,
        };
        let mask_dev = grammar.as_ref().map(|_| self.devices.gpus[0].dptr(&self.buffers.ranks[0].grammar_bits));
        let s = job.sampling;
        self.upload_adjustments(s)?;
        let debug_rows = self.probes.debug_rows(job.max_tokens);
        let started = Instant::now();
        let mut run = self.prepare(
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
                if let Some(mask) = mask_dev {
                    a.set(Arg::Mask, mask);
                }
            },
            debug_rows,
        )?;
        if let Some(feed) = grammar.as_mut() {
            // The first generated token's mask before the kernel can reach its LM head.
            self.launch.set_host_word(ctl::MASK_SEQ, 0);
            feed.publish(0, &mut self.buffers.ranks[0].grammar_bits, &self.launch)?;
        }
        let prefill = self.enqueue_prefill(keep, job.prompt.len())?;
        for a in run.args.iter_mut() {
            a.set(Arg::StartStep, prefill.positions as u64);
        }
        self.launch(&run.args)?;
        let mut stats = RunStats {
            #[cfg(feature = "lab")]
            prompt_tokens: job.prompt.len(),
            #[cfg(feature = "lab")]
            prefill_positions: prefill.positions - keep,
            ..Default::default()
        };
        let mut published_ids = Vec::new();
        let mut next = 0usize;
        let mut outcome: Option<RunEnd> = None;
        // A grammar that cannot go on: the run stops, and ends with this error once drained.
        let mut grammar_error: Option<Error> = None;
        let mut last_progress = Instant::now();
        let mut spins = 0u32;
        loop {
            let done = self.launch.host_word(ctl::DONE) != 0;
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            let published = self.launch.host_word(ctl::PUBLISHED) as usize;
            while next < published {
                let (sampled, time) = self.launch.read_record(next);
                published_ids.push(sampled.id);
                stats.token_times_ns.push(time);
                if stats.first_token.is_none() {
                    stats.first_token = Some(started.elapsed());
                }
                next += 1;
                self.launch.set_host_word(ctl::CONSUMED, next as u32);
                if outcome.is_some() {
                    continue; // generated after the host asked to stop: dropped
                }
                if host_stops.contains(&sampled.id) {
                    outcome = Some(RunEnd::StopToken);
                    self.launch.set_host_word(ctl::STOP, 1);
                    continue;
                }
                let mut last = false;
                if let Some(feed) = grammar.as_mut() {
                    // The next token's mask first: the kernel is already running its step.
                    let took = feed.take(sampled.id).and_then(|took| {
                        if matches!(took, Took::More) && next < job.max_tokens {
                            feed.publish(next, &mut self.buffers.ranks[0].grammar_bits, &self.launch)?;
                        }
                        Ok(took)
                    });
                    match took {
                        Ok(Took::End) => {
                            outcome = Some(RunEnd::StopToken);
                            self.launch.set_host_word(ctl::STOP, 1);
                            continue;
                        }
                        Ok(Took::Last) => last = true,
                        Ok(Took::More) => {}
                        Err(e) => {
                            grammar_error = Some(e);
                            outcome = Some(RunEnd::Stopped);
                            self.launch.set_host_word(ctl::STOP, 1);
                            continue;
                        }
                    }
                }
                if on_token(&sampled) == Flow::Stop {
                    outcome = Some(RunEnd::Stopped);
                    self.launch.set_host_word(ctl::STOP, 1);
                } else if last {
                    // The grammar is complete: nothing may follow (as on the host runtimes).
                    outcome = Some(RunEnd::StopToken);
                    self.launch.set_host_word(ctl::STOP, 1);
                }
                last_progress = Instant::now();
            }
            if done && next >= published {
                break;
            }
            if spins.is_multiple_of(STATUS_EVERY_SPINS) && !done {
                // A kernel that faulted or returned without ending the run never sets DONE.
                let status = Launch::kernel_status(&self.devices);
                if let Some(status) = status.filter(|_| self.launch.host_word(ctl::DONE) == 0) {
                    return Err(self.launch.failed(status));
                }
            }
            if last_progress.elapsed() > DEFAULT_STALL_TIMEOUT {
                self.launch.set_host_word(ctl::STOP, 1);
                return Err(self
                    .launch
                    .stalled(&self.devices, format!("the decode kernel published nothing for {DEFAULT_STALL_TIMEOUT:?} (token {next})")));
            }
            spins += 1;
            if spins.is_multiple_of(SPINS_PER_YIELD) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let reason = self.launch.host_word(ctl::REASON);
        let logits = self.finish(run, debug_rows.min(next + 1))?;
        self.probes.keep_logits(logits);
        // Every published token but the last went through the kernel, its KV rows
        // written; the last one never does (the run ended at its sampling).
        self.cache.tokens = [job.prompt, &published_ids].concat();
        self.cache.tokens.truncate(job.prompt.len() + published_ids.len() - 1);
        if let Some((start, stop)) = &prefill.span {
            stats.prefill_gpu_ms = Some(start.elapsed_ms(stop).map_err(cuda_err("prefill event time"))? as f64);
        }
        if !prefill.ops.is_empty() {
            self.probes.keep_prefill_split(Prefill::split(&prefill.ops)?);
        }
        stats.published = next;
        stats.total = started.elapsed();
        self.last_run = stats;
        if let Some(e) = grammar_error {
            return Err(e);
        }
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
