//! Devices whose decode kernel hung in this process. A stalled persistent kernel keeps
//! every SM of its device busy until the process exits (it waits on data that never
//! comes, so it cannot see the host's stop flag), and a later launch there would queue
//! behind it forever; new runtimes on such a device fail at once with a clear error.

use std::sync::Mutex;

static HUNG: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Records that device `ordinal` holds a hung decode kernel.
pub(crate) fn mark(ordinal: usize) {
    let mut hung = HUNG.lock().unwrap_or_else(|e| e.into_inner());
    if !hung.contains(&ordinal) {
        hung.push(ordinal);
    }
}

/// An error naming the first of `ordinals` that holds a hung decode kernel, if any.
pub(crate) fn check(ordinals: &[usize]) -> Result<(), String> {
    let hung = HUNG.lock().unwrap_or_else(|e| e.into_inner());
    match ordinals.iter().find(|o| hung.contains(o)) {
        Some(o) => Err(format!(
            "CUDA device {o} still runs a decode kernel that hung earlier in this process \
             (it holds every SM until the process exits): restart the process"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_with_a_hung_kernel_refuses_new_runtimes_and_others_do_not() {
        // Ordinals far past any real device, so other tests in this process are unaffected.
        assert!(check(&[10_001, 10_002]).is_ok());
        mark(10_002);
        mark(10_002);
        let why = check(&[10_001, 10_002]).expect_err("device 10002 is hung");
        assert!(why.contains("device 10002") && why.contains("restart"), "{why}");
        assert!(check(&[10_001]).is_ok());
        assert_eq!(HUNG.lock().unwrap().iter().filter(|&&o| o == 10_002).count(), 1, "marked once");
    }
}
