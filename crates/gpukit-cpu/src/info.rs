//! What the CPU "device" is: the host's model name, memory and cores, read from `/proc`
//! where it exists, with fallbacks elsewhere.

use gpukit_core::{DeviceInfo, LaunchLimits};

/// Stream priorities accepted, as CUDA reports them on current GPUs: (least, greatest).
pub(crate) const PRIORITY_RANGE: (i32, i32) = (0, -5);

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("{} CPU", std::env::consts::ARCH))
}

/// Total memory in bytes: `MemTotal` from `/proc/meminfo`, else "as much as the address
/// space allows" (the allocator then has the last word).
fn total_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            kib.checked_mul(1024)
        })
        .unwrap_or(isize::MAX as u64)
}

pub(crate) fn host_info() -> DeviceInfo {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    DeviceInfo {
        name: cpu_name(),
        total_memory: total_memory(),
        compute_capability: None,
        // Any stream's worker can copy while others compute; the cores bound how many run.
        copy_engines: cores,
        multiprocessors: cores,
        limits: LaunchLimits::CUDA_COMMON,
        priority_range: PRIORITY_RANGE,
        op_dtypes: gpukit_core::DType::ALL.to_vec(),
        native_ops: true,
        items_per_thread: 1,
    }
}
