//! Fault injection, for testing what a program does when CUDA fails:
//!
//! | variable | effect |
//! |---|---|
//! | `GPUKIT_CUDA_EMU_FAIL_ALLOC=N` | the Nth device allocation of the process (`cuMemAlloc`, `cuMemAllocManaged`, counting from 1) is `CUDA_ERROR_OUT_OF_MEMORY`; `N+` fails it and every later one |
//! | `GPUKIT_CUDA_EMU_FAULT_KERNEL=name` | every launch of the kernel `name` ends with `CUDA_ERROR_ILLEGAL_ADDRESS` when it runs (sticky, as a real fault) |
//! | `GPUKIT_CUDA_EMU_FAIL_COMPILE=text` | NVRTC fails to compile a program whose name or source contains `text` (`NVRTC_ERROR_COMPILATION`, with a log saying so) |
//! | `GPUKIT_CUDA_EMU_FAIL_CALL=cuName[:N][=CODE],...` | the driver call `cuName` fails with `CODE` (a `CUresult` number or name; default `CUDA_ERROR_UNKNOWN`), every time or only the Nth time |
//!
//! Each injected failure is said on standard error, so a test log shows which failures
//! were the injected ones.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::errors::{cu, CuResult};

#[derive(Debug)]
struct CallFault {
    name: String,
    nth: Option<u64>,
    code: CuResult,
    seen: AtomicU64,
}

#[derive(Debug, Default)]
struct Faults {
    alloc: Option<(u64, bool)>,
    kernel: Option<String>,
    compile: Option<String>,
    calls: Vec<CallFault>,
}

fn faults() -> &'static Faults {
    static F: OnceLock<Faults> = OnceLock::new();
    F.get_or_init(|| read(|n| std::env::var(n).ok()))
}

fn code_of(text: &str) -> Option<CuResult> {
    if let Ok(n) = text.parse() {
        return Some(n);
    }
    (0..1000).find(|&c| crate::errors::describe(c).is_some() && crate::errors::name(c) == text)
}

fn read(var: impl Fn(&str) -> Option<String>) -> Faults {
    let mut f = Faults::default();
    if let Some(v) = var("GPUKIT_CUDA_EMU_FAIL_ALLOC") {
        let (n, after) = match v.trim().strip_suffix('+') {
            Some(n) => (n, true),
            None => (v.trim(), false),
        };
        f.alloc = n.parse().ok().map(|n| (n, after));
    }
    f.kernel = var("GPUKIT_CUDA_EMU_FAULT_KERNEL").filter(|v| !v.is_empty());
    f.compile = var("GPUKIT_CUDA_EMU_FAIL_COMPILE").filter(|v| !v.is_empty());
    if let Some(v) = var("GPUKIT_CUDA_EMU_FAIL_CALL") {
        for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (head, code) = match item.split_once('=') {
                Some((h, c)) => (h, code_of(c.trim()).unwrap_or(cu::UNKNOWN)),
                None => (item, cu::UNKNOWN),
            };
            let (name, nth) = match head.split_once(':') {
                Some((n, k)) => (n, k.trim().parse().ok()),
                None => (head, None),
            };
            f.calls.push(CallFault {
                name: name.trim().to_string(),
                nth,
                code,
                seen: AtomicU64::new(0),
            });
        }
    }
    f
}

fn said(what: &str) {
    crate::errors::diagnose(&format!("injected: {what}"));
}

/// Whether this device allocation fails (counts every allocation).
pub fn alloc_fails() -> bool {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let Some((n, after)) = faults().alloc else {
        return false;
    };
    let k = COUNT.fetch_add(1, Ordering::Relaxed) + 1;
    let fails = k == n || (after && k >= n);
    if fails {
        said(&format!(
            "device allocation #{k} fails with CUDA_ERROR_OUT_OF_MEMORY"
        ));
    }
    fails
}

/// Whether launches of `kernel` fault.
pub fn kernel_faults(kernel: &str) -> bool {
    let hit = faults().kernel.as_deref() == Some(kernel);
    if hit {
        said(&format!("kernel `{kernel}` faults with an illegal address"));
    }
    hit
}

/// Whether compiling program `name` with source `src` fails.
pub fn compile_fails(name: &str, src: &str) -> bool {
    let hit = faults()
        .compile
        .as_deref()
        .is_some_and(|t| name.contains(t) || src.contains(t));
    if hit {
        said(&format!("program `{name}` fails to compile"));
    }
    hit
}

/// The code driver call `name` fails with this time, if it does.
pub fn call_fails(name: &str) -> Option<CuResult> {
    let f = faults();
    if f.calls.is_empty() {
        return None;
    }
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    for c in &f.calls {
        if c.name != name {
            continue;
        }
        let k = c.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if c.nth.is_none_or(|n| n == k) {
            said(&format!(
                "{name} (call #{k}) fails with {}",
                crate::errors::name(c.code)
            ));
            return Some(c.code);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_read() {
        let f = read(|n| match n {
            "GPUKIT_CUDA_EMU_FAIL_ALLOC" => Some("3+".into()),
            "GPUKIT_CUDA_EMU_FAIL_CALL" => {
                Some("cuStreamCreate:2=CUDA_ERROR_OUT_OF_MEMORY, cuMemFree_v2".into())
            }
            _ => None,
        });
        assert_eq!(f.alloc, Some((3, true)));
        assert_eq!(f.calls.len(), 2);
        assert_eq!(
            (f.calls[0].nth, f.calls[0].code),
            (Some(2), cu::OUT_OF_MEMORY)
        );
        assert_eq!((f.calls[1].nth, f.calls[1].code), (None, cu::UNKNOWN));
    }
}
