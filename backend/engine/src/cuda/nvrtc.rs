//! Run-time compilation of the kernels with NVRTC (the persistent decode kernel and the
//! batched prefill's kernels, two translation units): the sources are embedded in
//! the binary, the model's shape arrives as `-D` defines (layout.rs), the output is
//! a cubin for the device's own architecture (PTX from a newer NVRTC than the driver
//! would be rejected), cached on disk by a hash of sources, architecture and defines.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cudarc::nvrtc::result::NvrtcError;
use cudarc::nvrtc::sys as nvrtc_sys;

use crate::error::{CudaError, Result};

/// Kernel sources by include name (the names `#include` uses, relative to kernels/).
pub const KERNEL_SOURCES: &[(&str, &str)] = &[
    ("decode.cu", include_str!("../../../../kernels/decode.cu")),
    ("prefill.cu", include_str!("../../../../kernels/prefill.cu")),
    ("qcheck.cu", include_str!("../../../../kernels/qcheck.cu")),
    ("rows_cost.cu", include_str!("../../../../kernels/rows_cost.cu")),
    ("common.cuh", include_str!("../../../../kernels/common.cuh")),
    ("shape.cuh", include_str!("../../../../kernels/shape.cuh")),
    ("sync.cuh", include_str!("../../../../kernels/sync.cuh")),
    ("args.cuh", include_str!("../../../../kernels/args.cuh")),
    ("schedule.cuh", include_str!("../../../../kernels/schedule.cuh")),
    ("smem_plan.cuh", include_str!("../../../../kernels/smem_plan.cuh")),
    ("decode_state.cuh", include_str!("../../../../kernels/decode_state.cuh")),
    ("phases/common.cuh", include_str!("../../../../kernels/phases/common.cuh")),
    ("phases/head_qkv.cuh", include_str!("../../../../kernels/phases/head_qkv.cuh")),
    ("phases/exchange.cuh", include_str!("../../../../kernels/phases/exchange.cuh")),
    ("phases/down_waves.cuh", include_str!("../../../../kernels/phases/down_waves.cuh")),
    ("phases/qkv.cuh", include_str!("../../../../kernels/phases/qkv.cuh")),
    ("phases/attend.cuh", include_str!("../../../../kernels/phases/attend.cuh")),
    ("phases/o_proj.cuh", include_str!("../../../../kernels/phases/o_proj.cuh")),
    ("phases/gate_up.cuh", include_str!("../../../../kernels/phases/gate_up.cuh")),
    ("phases/down_proj.cuh", include_str!("../../../../kernels/phases/down_proj.cuh")),
    ("phases/lm_head.cuh", include_str!("../../../../kernels/phases/lm_head.cuh")),
    ("phases/sampler.cuh", include_str!("../../../../kernels/phases/sampler.cuh")),
    ("ops/allreduce.cuh", include_str!("../../../../kernels/ops/allreduce.cuh")),
    ("ops/attend_own.cuh", include_str!("../../../../kernels/ops/attend_own.cuh")),
    ("ops/attention.cuh", include_str!("../../../../kernels/ops/attention.cuh")),
    ("ops/emit.cuh", include_str!("../../../../kernels/ops/emit.cuh")),
    ("ops/lm_head.cuh", include_str!("../../../../kernels/ops/lm_head.cuh")),
    ("ops/matvec.cuh", include_str!("../../../../kernels/ops/matvec.cuh")),
    ("ops/matvec_rows.cuh", include_str!("../../../../kernels/ops/matvec_rows.cuh")),
    ("ops/qdot.cuh", include_str!("../../../../kernels/ops/qdot.cuh")),
    ("ops/qmatvec.cuh", include_str!("../../../../kernels/ops/qmatvec.cuh")),
    ("ops/rmsnorm.cuh", include_str!("../../../../kernels/ops/rmsnorm.cuh")),
    ("ops/rope.cuh", include_str!("../../../../kernels/ops/rope.cuh")),
    ("ops/token_choice.cuh", include_str!("../../../../kernels/ops/token_choice.cuh")),
    ("ops/select.cuh", include_str!("../../../../kernels/ops/select.cuh")),
    ("ops/swiglu.cuh", include_str!("../../../../kernels/ops/swiglu.cuh")),
    ("ops/trace.cuh", include_str!("../../../../kernels/ops/trace.cuh")),
    ("ops/tagged.cuh", include_str!("../../../../kernels/ops/tagged.cuh")),
];

/// The decode kernel's translation unit; for each compile the other sources are headers.
pub const MAIN_SOURCE: &str = "decode.cu";
/// The batched prefill's translation unit (kernels named `pg_pf_*`).
pub const PREFILL_SOURCE: &str = "prefill.cu";
/// The quantized matrix-vector check (kernels/qcheck.cu, kernel `pg_qcheck`): the GPU
/// tests' (it stays in [`KERNEL_SOURCES`], whose hash keys the tune files).
#[cfg(feature = "lab")]
pub const QCHECK_SOURCE: &str = "qcheck.cu";
/// One matrix times several vectors in one pass (kernels/rows_cost.cu, kernel
/// `pg_rows_cost`): the apparatus measuring what an extra row of a step costs.
#[cfg(feature = "lab")]
pub const ROWS_SOURCE: &str = "rows_cost.cu";
/// The kernel's entry point.
pub const KERNEL_NAME: &str = "pg_decode";
/// The first file in `dir` whose name starts with `prefix` and contains ".so".
pub(crate) fn find_lib(dir: &Path, prefix: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix) && n.contains(".so") && !n.contains(".alt."))
        })
        .collect();
    found.sort();
    found.into_iter().next()
}

/// Loads libnvrtc-builtins then libnvrtc by absolute path from the first of `dirs`
/// that holds both, process-wide, so cudarc's by-soname lookup finds them without
/// `LD_LIBRARY_PATH`. Idempotent: the first call's search decides for the process.
pub fn preload(dirs: &[PathBuf]) -> Result<()> {
    static LOADED: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    let loaded = LOADED.get_or_init(|| {
        for dir in dirs {
            let (Some(builtins), Some(nvrtc)) = (find_lib(dir, "libnvrtc-builtins"), find_lib(dir, "libnvrtc.so")) else {
                continue;
            };
            for lib in [&builtins, &nvrtc] {
                let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL;
                // SAFETY: loading NVIDIA's NVRTC libraries runs only their ELF initialisers,
                // which have no preconditions; the handle is leaked so they stay loaded.
                match unsafe { libloading::os::unix::Library::open(Some(lib), flags) } {
                    Ok(handle) => std::mem::forget(handle),
                    Err(e) => return Err(format!("cannot load {}: {e}", lib.display())),
                }
            }
            return Ok(dir.clone());
        }
        // Fall back to the dynamic linker's own search (LD_LIBRARY_PATH, ld.so.cache).
        // SAFETY: cudarc only probes for the library by name here.
        if unsafe { nvrtc_sys::is_culib_present() } {
            return Ok(PathBuf::from("<ld.so search path>"));
        }
        Err(format!("libnvrtc not found (searched {dirs:?}; pass --nvrtc-dir)"))
    });
    loaded.as_ref().map(|_| ()).map_err(|e| CudaError::Library(e.clone()).into())
}

/// The cubin target for a compute capability: the arch-specific `a` variant on
/// Hopper and later, so nothing is left to the driver's JIT.
pub fn arch_for(major: i32, minor: i32) -> String {
    if major >= 9 {
        format!("sm_{major}{minor}a")
    } else {
        format!("sm_{major}{minor}")
    }
}

/// Shared memory one block may opt in to on `arch`, for compiles without the device
/// (CI's NVRTC check, precompiled caches); a runtime reads its device's own value.
#[cfg(feature = "lab")]
pub fn shared_per_block_of(arch: &str) -> usize {
    match arch.trim_start_matches("sm_").trim_end_matches('a') {
        "80" | "87" => 163 * 1024,
        "86" | "89" | "120" | "121" => 99 * 1024,
        "70" | "72" => 96 * 1024,
        "75" => 64 * 1024,
        _ => 227 * 1024,
    }
}

/// A hash of every kernel source compiled into the binary (tune results are only valid
/// for the kernels they were measured on).
pub fn sources_hash() -> u64 {
    let parts: Vec<&[u8]> = KERNEL_SOURCES.iter().map(|(_, text)| text.as_bytes()).collect();
    fnv1a(&parts)
}

/// 64-bit FNV-1a: stable across Rust versions, unlike `DefaultHasher`.
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // Separator so ("ab","c") and ("a","bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// NVRTC options for `arch` and `defines`.
fn options(arch: &str, defines: &[(String, String)]) -> Vec<String> {
    let mut opts = vec![format!("--gpu-architecture={arch}"), "-std=c++17".to_string()];
    opts.extend(defines.iter().map(|(k, v)| format!("-D{k}={v}")));
    opts
}

/// The decode kernel's cubin for `arch` and `defines`, from the disk cache in `cache`
/// or freshly compiled (and kept there). Returns the cubin and whether it came from the cache.
pub fn cubin(cache: Option<&Path>, arch: &str, defines: &[(String, String)]) -> Result<(Vec<u8>, bool)> {
    cubin_of(MAIN_SOURCE, cache, arch, defines)
}

/// The files a translation unit compiles from: `main` and every file it includes,
/// transitively, in [`KERNEL_SOURCES`] order. An include that names no embedded file
/// (the compile will say so) makes it every file, so a key never misses a source.
fn sources_of(main: &str) -> Vec<(&'static str, &'static str)> {
    let mut wanted = vec![main.to_string()];
    let mut i = 0;
    while i < wanted.len() {
        let Some((_, src)) = KERNEL_SOURCES.iter().find(|(n, _)| *n == wanted[i]) else { return KERNEL_SOURCES.to_vec() };
        for line in src.lines() {
            let included = line.trim().strip_prefix("#include").map(str::trim).and_then(|r| r.strip_prefix('"')).and_then(|r| r.split('"').next());
            if let Some(name) = included.filter(|n| !wanted.iter().any(|w| w == n)) {
                wanted.push(name.to_string());
            }
        }
        i += 1;
    }
    KERNEL_SOURCES.iter().filter(|(n, _)| wanted.iter().any(|w| w == n)).copied().collect()
}

/// [`cubin`] of the translation unit `main` (one of [`KERNEL_SOURCES`]), cached under a
/// key of its own sources and options: editing another translation unit's files does
/// not recompile it.
pub fn cubin_of(main: &str, cache: Option<&Path>, arch: &str, defines: &[(String, String)]) -> Result<(Vec<u8>, bool)> {
    let opts = options(arch, defines);
    let mut parts: Vec<&[u8]> = vec![main.as_bytes()];
    for (name, src) in sources_of(main) {
        parts.push(name.as_bytes());
        parts.push(src.as_bytes());
    }
    let joined = opts.join(" ");
    parts.push(joined.as_bytes());
    let key = fnv1a(&parts);
    let stem = main.trim_end_matches(".cu");
    let path = cache.map(|d| d.join(format!("{stem}-{arch}-{key:016x}.cubin")));
    if let Some(p) = &path {
        if let Ok(bytes) = std::fs::read(p) {
            if !bytes.is_empty() {
                return Ok((bytes, true));
            }
        }
    }
    let bytes = compile(main, &opts)?;
    if let Some(p) = &path {
        // Best effort: a read-only cache only costs a recompile next time.
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &bytes).is_ok() {
            let _ = std::fs::rename(&tmp, p);
        }
    }
    Ok((bytes, false))
}

fn cstring(s: &str) -> Result<std::ffi::CString> {
    std::ffi::CString::new(s).map_err(|_| CudaError::Unsupported(format!("NUL byte in NVRTC input `{s}`")).into())
}

fn check(what: &str, r: nvrtc_sys::nvrtcResult) -> Result<()> {
    r.result().map_err(|source| CudaError::Nvrtc { context: what.to_string(), source }.into())
}

/// Compiles the embedded translation unit `main_name` with `opts` into a cubin.
fn compile(main_name: &str, opts: &[String]) -> Result<Vec<u8>> {
    preload(&[])?;
    let main = KERNEL_SOURCES
        .iter()
        .find(|(n, _)| *n == main_name)
        .map(|(_, s)| *s)
        .ok_or_else(|| CudaError::Mismatch(format!("no embedded kernel source {main_name}")))?;
    let headers: Vec<_> = KERNEL_SOURCES.iter().filter(|(n, _)| *n != main_name).collect();
    let c_main = cstring(main)?;
    let c_name = cstring(main_name)?;
    let c_headers = headers.iter().map(|(_, s)| cstring(s)).collect::<Result<Vec<_>>>()?;
    let c_header_names = headers.iter().map(|(n, _)| cstring(n)).collect::<Result<Vec<_>>>()?;
    let header_ptrs: Vec<_> = c_headers.iter().map(|c| c.as_ptr()).collect();
    let header_name_ptrs: Vec<_> = c_header_names.iter().map(|c| c.as_ptr()).collect();
    let c_opts = opts.iter().map(|o| cstring(o)).collect::<Result<Vec<_>>>()?;
    let opt_ptrs: Vec<_> = c_opts.iter().map(|c| c.as_ptr()).collect();

    let mut prog: nvrtc_sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer refers to a NUL-terminated CString alive for this call;
    // the header arrays have `headers.len()` entries each.
    check("nvrtcCreateProgram", unsafe {
        nvrtc_sys::nvrtcCreateProgram(
            &mut prog,
            c_main.as_ptr(),
            c_name.as_ptr(),
            headers.len() as i32,
            header_ptrs.as_ptr(),
            header_name_ptrs.as_ptr(),
        )
    })?;
    // SAFETY: `prog` was created above; the options outlive the call.
    let compiled = unsafe { nvrtc_sys::nvrtcCompileProgram(prog, opt_ptrs.len() as i32, opt_ptrs.as_ptr()) };
    let result = if compiled == nvrtc_sys::nvrtcResult::NVRTC_SUCCESS {
        get_cubin(prog)
    } else {
        Err(CudaError::Compile { unit: main_name.to_string(), log: program_log(prog), source: NvrtcError(compiled) }.into())
    };
    // SAFETY: `prog` is a live program, destroyed exactly once.
    unsafe { nvrtc_sys::nvrtcDestroyProgram(&mut prog) };
    result
}

fn get_cubin(prog: nvrtc_sys::nvrtcProgram) -> Result<Vec<u8>> {
    let mut size = 0usize;
    // SAFETY: `prog` compiled successfully; `size` is a valid out-pointer.
    check("nvrtcGetCUBINSize", unsafe { nvrtc_sys::nvrtcGetCUBINSize(prog, &mut size) })?;
    let mut buf = vec![0u8; size];
    // SAFETY: `buf` has exactly the size NVRTC reported.
    check("nvrtcGetCUBIN", unsafe { nvrtc_sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut _) })?;
    Ok(buf)
}

fn program_log(prog: nvrtc_sys::nvrtcProgram) -> String {
    let mut size = 0usize;
    // SAFETY: `prog` is live; `size` is a valid out-pointer.
    if unsafe { nvrtc_sys::nvrtcGetProgramLogSize(prog, &mut size) } != nvrtc_sys::nvrtcResult::NVRTC_SUCCESS {
        return String::new();
    }
    let mut buf = vec![0u8; size];
    // SAFETY: `buf` has the reported size.
    unsafe { nvrtc_sys::nvrtcGetProgramLog(prog, buf.as_mut_ptr() as *mut _) };
    String::from_utf8_lossy(&buf).trim_end_matches('\0').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_names() {
        assert_eq!(arch_for(9, 0), "sm_90a");
        assert_eq!(arch_for(8, 6), "sm_86");
        assert_eq!(shared_per_block_of("sm_90a"), 232_448);
        assert_eq!(shared_per_block_of("sm_86"), 101_376);
    }

    /// A kernel file missing from KERNEL_SOURCES compiles with nvcc (check-kernels.sh)
    /// but not under NVRTC, which sees only the embedded files.
    #[test]
    fn every_kernel_file_is_embedded() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../kernels");
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let name = path.strip_prefix(&root).unwrap().to_str().unwrap().to_string();
                if name.ends_with(".cu") || name.ends_with(".cuh") {
                    assert!(KERNEL_SOURCES.iter().any(|(n, _)| *n == name), "kernels/{name} is not in KERNEL_SOURCES");
                }
            }
        }
    }

    /// A cubin's cache key covers what its translation unit includes and nothing else.
    #[test]
    fn each_translation_unit_keys_its_own_sources() {
        let names = |main: &str| sources_of(main).into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        let qcheck = names("qcheck.cu");
        assert!(qcheck.contains(&"ops/qmatvec.cuh") && qcheck.contains(&"ops/qdot.cuh") && qcheck.contains(&"common.cuh"), "{qcheck:?}");
        assert!(!qcheck.contains(&"decode.cu") && !qcheck.contains(&"phases/qkv.cuh"), "{qcheck:?}");
        let decode = names(MAIN_SOURCE);
        assert!(decode.contains(&"phases/sampler.cuh") && decode.contains(&"ops/select.cuh"), "{decode:?}");
        for other in ["qcheck.cu", "prefill.cu", "rows_cost.cu", "ops/matvec_rows.cuh"] {
            assert!(!decode.contains(&other), "the decode kernel's key covers {other}");
        }
        // Every embedded file belongs to some translation unit's key.
        let units = [MAIN_SOURCE, PREFILL_SOURCE, "qcheck.cu", "rows_cost.cu"];
        for (name, _) in KERNEL_SOURCES {
            assert!(units.iter().any(|u| names(u).contains(name)), "{name} is in no translation unit's key");
        }
    }

    #[test]
    fn hash_separates_parts() {
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
    }
}
