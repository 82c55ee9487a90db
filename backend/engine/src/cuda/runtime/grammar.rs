//! Constrained decoding on the device (`grammar_mask`, one GPU; not yet run on a GPU):
//! the host walks the run's grammar as tokens arrive, and before the kernel samples
//! generated token t it copies that token's allowed-token bitmap into the `Mask`
//! buffer and then raises `ctl::MASK_SEQ` to t + 1, which the kernel's LM head waits
//! for (kernels/phases/lm_head.cuh). The host computes the mask of token t + 1 while
//! the kernel runs the layers of its step, so the wait is what is left of that time.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream};

use super::cuda_err;
use super::launch::Launch;
use crate::constraint::Guide;
use crate::cuda::layout::ctl;
use crate::error::Result;

/// What a generated token did to the grammar.
pub(super) enum Took {
    /// An end id the complete grammar allowed: the output ends before it.
    End,
    /// The grammar is complete after it: it is the last token.
    Last,
    /// More may follow.
    More,
}

/// One constrained run's grammar walk and its copies to the device.
pub(super) struct GrammarFeed {
    guide: Guide,
    vocab: usize,
    words: Vec<u32>,
    /// Its own stream: the copies must land while the run's stream holds the kernel.
    copies: Arc<CudaStream>,
}

impl GrammarFeed {
    pub(super) fn new(guide: Guide, vocab: usize, ctx: &Arc<CudaContext>) -> Result<GrammarFeed> {
        let copies = ctx.new_stream().map_err(cuda_err("the grammar mask's copy stream"))?;
        Ok(GrammarFeed { guide, vocab, words: Vec::new(), copies })
    }

    /// Copies the bitmap of generated token `index` into `bits` and, once it landed,
    /// tells the kernel; an error (with nothing published) when the grammar allows no
    /// token.
    pub(super) fn publish(&mut self, index: usize, bits: &mut CudaSlice<u32>, launch: &Launch) -> Result<()> {
        self.guide.allowed_bits(self.vocab, &mut self.words)?;
        self.copies.memcpy_htod(&self.words, bits).map_err(cuda_err("copy the grammar mask"))?;
        self.copies.synchronize().map_err(cuda_err("copy the grammar mask"))?;
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        launch.set_host_word(ctl::MASK_SEQ, index as u32 + 1);
        Ok(())
    }

    /// Advances the grammar by the generated token `id`.
    pub(super) fn take(&mut self, id: u32) -> Result<Took> {
        if self.guide.is_end(id) {
            return Ok(Took::End);
        }
        self.guide.commit(id)?;
        Ok(if self.guide.complete() { Took::Last } else { Took::More })
    }
}
