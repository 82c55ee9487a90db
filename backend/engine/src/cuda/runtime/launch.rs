//! The launch part ([`Launch`]): the host-mapped control words and token ring that rank
//! 0 shares with the host, the launch of every rank's kernel, and stall detection:
//! waiting for (or giving up on) the kernels, and the poisoned state a hung or failed
//! run leaves behind.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{sys, CudaContext, DriverError, LaunchConfig, PinnedHostSlice, PushKernelArg};

use super::devices::Devices;
use super::kernel::{KernelArgs, Kernels};
use super::{alloc_err, check, cuda_err};
use crate::cuda::layout::{ctl, rec};
use crate::error::{CudaError, Error, Result};
use crate::sampling::{Sampled, TokenLogprob, MAX_TOP_LOGPROBS};

/// A run that publishes nothing for this long is reported as a hung kernel.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Sleep between stream-status polls while scoring (no tokens to stream).
const KERNEL_POLL_US: u64 = 50;

/// The launch part: the host ring, and whether an earlier run left the GPUs unusable.
pub(super) struct Launch {
    /// Host-mapped control words then the token ring: owns what `host_ptr` points
    /// into, held for its lifetime and read only through `host_ptr`.
    _host: PinnedHostSlice<u32>,
    host_ptr: *mut u32,
    /// The device address of `host` (rank 0's kernel writes through it).
    host_dev: u64,
    /// Records in the ring.
    ring: usize,
    /// Set when a run hung or failed: the kernel may still occupy the device.
    poisoned: Option<String>,
}

// SAFETY: `host_ptr` points into `host`, which this struct owns; every use goes through
// `&self` or `&mut self` on the owning thread, and the pinned allocation is not tied to
// the thread that made it.
unsafe impl Send for Launch {}

impl Launch {
    /// The host-mapped control words then a ring of `ring` records (zeroed) in `ctx0`.
    pub(super) fn new(ctx0: &Arc<CudaContext>, ring: usize) -> Result<Launch> {
        let words = ctl::WORDS + ring * rec::WORDS;
        // SAFETY: the buffer is zeroed below before the kernel or the host reads it.
        let mut host =
            unsafe { ctx0.alloc_pinned_with_flags::<u32>(words, sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE) }
                .map_err(alloc_err("the host-mapped token ring", 4 * words))?;
        let host_ptr = host.as_mut_ptr().map_err(cuda_err("pinned pointer"))?;
        // SAFETY: `host_ptr` addresses `words` u32 owned by `host`.
        unsafe { std::ptr::write_bytes(host_ptr, 0, words) };
        let mut host_dev: sys::CUdeviceptr = 0;
        ctx0.bind_to_thread().map_err(cuda_err("bind context"))?;
        // SAFETY: `host_ptr` is a live DEVICEMAP allocation of this context.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut host_dev, host_ptr as *mut _, 0) };
        check("cuMemHostGetDevicePointer", r)?;
        Ok(Launch { _host: host, host_ptr, host_dev, ring, poisoned: None })
    }

    /// An error if an earlier run left the GPUs unusable.
    pub(super) fn usable(&self) -> Result<()> {
        match &self.poisoned {
            Some(why) => Err(CudaError::Kernel(format!("the GPU runtime is unusable after an earlier failure: {why}")).into()),
            None => Ok(()),
        }
    }

    /// Whether a run hung or failed (the device memory must then be leaked, not freed).
    pub(super) fn poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    /// Marks the runtime unusable because of `err`, which it returns.
    pub(super) fn poison(&mut self, err: CudaError) -> Error {
        self.poisoned = Some(err.to_string());
        err.into()
    }

    pub(super) fn host_word(&self, i: usize) -> u32 {
        // SAFETY: `i` is inside the mapping (callers use ctl/rec offsets); volatile
        // because the GPU writes it concurrently.
        unsafe { std::ptr::read_volatile(self.host_ptr.add(i)) }
    }

    pub(super) fn set_host_word(&self, i: usize, v: u32) {
        // SAFETY: as in `host_word`; the kernel reads these words with volatile loads.
        unsafe { std::ptr::write_volatile(self.host_ptr.add(i), v) }
    }

    /// The device addresses of the control words and of the ring, for rank 0's arguments.
    pub(super) fn device_addresses(&self) -> (u64, u64) {
        (self.host_dev, self.host_dev + (ctl::WORDS * std::mem::size_of::<u32>()) as u64)
    }

    /// Record `t` of the ring: the sampled token and its GPU timestamp.
    pub(super) fn read_record(&self, t: usize) -> (Sampled, u64) {
        let base = ctl::WORDS + (t % self.ring) * rec::WORDS;
        let w = |i: usize| self.host_word(base + i);
        let n_top = (w(rec::NTOP) as usize).min(MAX_TOP_LOGPROBS);
        let top = (0..n_top).map(|k| TokenLogprob { id: w(rec::TOP_IDS + k), logprob: f32::from_bits(w(rec::TOP_LPS + k)) }).collect();
        let time = w(rec::TIME_LO) as u64 | (w(rec::TIME_HI) as u64) << 32;
        (Sampled { id: w(rec::ID), logprob: f32::from_bits(w(rec::LOGPROB)), top, accepted_draft: false }, time)
    }

    /// Launches every rank's kernel back to back (rank 0 first; each waits for the
    /// others inside the kernel) with `threads` per block.
    pub(super) fn launch(&mut self, devices: &Devices, kernels: &Kernels, threads: u32, args: &[KernelArgs]) -> Result<()> {
        for (i, ((g, k), a)) in devices.gpus.iter().zip(&kernels.ranks).zip(args).enumerate() {
            let cfg = LaunchConfig { grid_dim: (devices.grid, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: k.smem_bytes };
            let mut b = g.stream.launch_builder(&k.func);
            b.arg(a);
            // SAFETY: `a` holds pointers to live buffers of the sizes the kernel was
            // compiled for (peers' through enabled peer access); a cooperative launch
            // guarantees every block is resident, which the kernel's inter-block waits
            // need (it never uses a grid-wide barrier).
            let launched = if devices.shared_gpu { unsafe { b.launch(cfg) }.map(|_| None) } else { unsafe { b.launch_cooperative(cfg) } };
            if let Err(source) = launched {
                let err = CudaError::Driver { context: format!("launch decode kernel on rank {i}"), source };
                // The ranks already launched wait for this one forever.
                return Err(if i > 0 { self.poison(err) } else { err.into() });
            }
        }
        Ok(())
    }

    /// `one_launch`: one cooperative kernel of every rank's blocks (each rank's grid in
    /// turn) on rank 0's stream, with rank 0's arguments, which name every rank's.
    pub(super) fn launch_one(&mut self, devices: &Devices, kernels: &Kernels, threads: u32, args: &KernelArgs) -> Result<()> {
        let k = &kernels.ranks[0];
        let blocks = devices.grid * devices.tp() as u32;
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: k.smem_bytes };
        let g = &devices.gpus[0];
        let mut b = g.stream.launch_builder(&k.func);
        b.arg(args);
        // SAFETY: as in `launch`: `args` and the table it names hold pointers to live
        // buffers of the sizes the kernel was compiled for, all on this one device; the
        // grid is at most the device's SM count, one block per SM, and a cooperative
        // launch makes every block resident.
        unsafe { b.launch_cooperative(cfg) }
            .map_err(|source| CudaError::Driver { context: "launch the ranks' decode kernel".into(), source })?;
        Ok(())
    }

    /// None while any rank's kernel runs and none failed; else the first failure, or
    /// success once every rank's kernel has ended.
    pub(super) fn kernel_status(devices: &Devices) -> Option<sys::CUresult> {
        let mut running = false;
        for g in &devices.gpus {
            // SAFETY: querying a live stream of this context has no other preconditions.
            let status = unsafe { sys::cuStreamQuery(g.stream.cu_stream()) };
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

    /// A kernel that ended with `status` before the run did: poisons the runtime.
    pub(super) fn failed(&mut self, status: sys::CUresult) -> Error {
        let err = if status == sys::CUresult::CUDA_SUCCESS {
            CudaError::Kernel("the decode kernel exited without ending the run".into())
        } else {
            CudaError::Driver { context: "the decode kernel failed".into(), source: DriverError(status) }
        };
        self.poison(err)
    }

    /// A stall (`why`): the runtime is poisoned and every rank's device refuses new
    /// runtimes in this process (hung.rs: the stalled kernel holds every SM until exit).
    pub(super) fn stalled(&mut self, devices: &Devices, why: String) -> Error {
        for g in &devices.gpus {
            crate::cuda::hung::mark(g.ctx.ordinal());
        }
        self.poison(CudaError::Kernel(why))
    }

    /// Waits for every rank's kernel to end without blocking in the driver, so a hung
    /// kernel becomes an error after [`DEFAULT_STALL_TIMEOUT`] instead of a hung thread.
    pub(super) fn wait(&mut self, devices: &Devices) -> Result<()> {
        let started = Instant::now();
        loop {
            match Self::kernel_status(devices) {
                Some(sys::CUresult::CUDA_SUCCESS) => return Ok(()),
                None => {}
                Some(other) => {
                    let err = CudaError::Driver { context: "the decode kernel failed".into(), source: DriverError(other) };
                    return Err(self.poison(err));
                }
            }
            if started.elapsed() > DEFAULT_STALL_TIMEOUT {
                return Err(self.stalled(devices, format!("the decode kernel did not finish within {DEFAULT_STALL_TIMEOUT:?}")));
            }
            std::thread::sleep(Duration::from_micros(KERNEL_POLL_US));
        }
    }
}
