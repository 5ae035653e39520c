//! Completion flags for reads: a word of page-locked, device-mapped host memory per stream, which
//! the device writes (`cuStreamWriteValue32`, after a fence) once a read that is its stream's last
//! work has landed. The write is enqueued as a caller starts waiting on the device
//! (`CudaBackend::flag_waited_reads`), so only reads somebody waits for pay for it. The wait then
//! looks at that word instead of asking the driver (`cuStreamQuery`) each turn, and notices the
//! copy sooner; the driver is still asked every few turns, so a stream that faulted (whose flag
//! never comes) is reported as before (issue 31: the round trip's wait).

use cudarc::driver::sys;

/// Flags kept: streams past this many have none (their reads are queried).
const WORDS: usize = 1024;

/// Turns of a wait between two driver queries of a flagged read.
pub(crate) const QUERY_EVERY: u32 = 8;

/// The flags of one context's streams, or why there are none.
#[derive(Debug, Default)]
pub(crate) enum ReadFlags {
    /// Not made yet (made at the first read).
    #[default]
    Untried,
    /// One word per stream index.
    Ready(FlagPage),
    /// The driver gave no device-mapped page or took no flag write: reads are queried.
    Off,
}

/// A page of flag words.
#[derive(Debug)]
pub(crate) struct FlagPage {
    host: *mut u32,
    device: sys::CUdeviceptr,
}

impl ReadFlags {
    /// The flag page, made at the first call (the context must be current); `None` when off.
    fn page(&mut self) -> Option<&FlagPage> {
        if matches!(self, ReadFlags::Untried) {
            *self = FlagPage::new().map_or(ReadFlags::Off, ReadFlags::Ready);
        }
        match self {
            ReadFlags::Ready(page) => Some(page),
            _ => None,
        }
    }

    /// Enqueues on `stream` (stream index `s`) the write of `value` into `s`'s flag, after what
    /// the stream holds; whether it was enqueued. A refused write turns the flags off.
    pub(crate) fn signal(&mut self, s: usize, stream: sys::CUstream, value: u32) -> bool {
        let Some(page) = self.page() else {
            return false;
        };
        if s >= WORDS {
            return false;
        }
        // SAFETY: the word is inside the page, which lives until `free`; `stream` belongs to the
        // current context. The default flags fence the stream's earlier writes before this one.
        let code =
            unsafe { sys::cuStreamWriteValue32_v2(stream, page.device + 4 * s as u64, value, 0) };
        if code == sys::CUresult::CUDA_SUCCESS {
            return true;
        }
        tracing::debug!(target: "gpuworld::stream", ?code, "cuStreamWriteValue32 refused: reads are queried");
        self.free();
        *self = ReadFlags::Off;
        false
    }

    /// Whether stream `s`'s flag has reached `value` (`None`: no flags to tell).
    pub(crate) fn reached(&self, s: usize, value: u32) -> Option<bool> {
        match self {
            ReadFlags::Ready(page) if s < WORDS => {
                // SAFETY: the word is inside the live page; the device writes it, so it is read
                // afresh each time.
                let word = unsafe { std::ptr::read_volatile(page.host.add(s)) };
                // Values count up and wrap: reached when `word` is at or past `value`.
                let reached = (word.wrapping_sub(value) as i32) >= 0;
                // The bytes the copy wrote before the flag are read after it.
                if reached {
                    std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
                }
                Some(reached)
            }
            _ => None,
        }
    }

    /// Frees the page (the context is current and no work will write it any more).
    pub(crate) fn free(&mut self) {
        if let ReadFlags::Ready(page) = std::mem::take(self) {
            // SAFETY: the page came from cuMemHostAlloc; nothing writes or reads it afterwards.
            unsafe { sys::cuMemFreeHost(page.host.cast()) };
        }
    }
}

impl FlagPage {
    /// A zeroed page of words the device can write; `None` where the driver gives none.
    fn new() -> Option<FlagPage> {
        let mut host = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: an out-pointer; the page is freed by `ReadFlags::free`.
        if unsafe { sys::cuMemHostAlloc(&mut host, 4 * WORDS, flags) }
            != sys::CUresult::CUDA_SUCCESS
        {
            return None;
        }
        let host = host.cast::<u32>();
        // SAFETY: the page holds WORDS words.
        unsafe { std::ptr::write_bytes(host, 0, WORDS) };
        let mut device = 0;
        // SAFETY: `host` is a device-mapped page of this context; `device` an out-pointer.
        if unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host.cast(), 0) }
            != sys::CUresult::CUDA_SUCCESS
        {
            // SAFETY: the page just allocated, used by nothing.
            unsafe { sys::cuMemFreeHost(host.cast()) };
            return None;
        }
        Some(FlagPage { host, device })
    }
}
