//! The machine a benchmark run measured, as `docs/BENCHMARKS.md` states it beside the
//! figures: CPU, memory, operating system and GPUs, read from Linux's `/proc` and `/sys`
//! and from `nvidia-smi`. What cannot be read says so; nothing here fails a run.

use std::fs;
use std::process::{Command, Stdio};

/// The machine, as labelled lines (`CPU`, `memory`, `OS`, `GPU`), in that order.
pub fn describe() -> Vec<(String, String)> {
    let read = |path: &str| fs::read_to_string(path).unwrap_or_default();
    let threads = std::thread::available_parallelism().map_or(0, |n| n.get());
    let l3 = read("/sys/devices/system/cpu/cpu0/cache/index3/size");
    vec![
        (
            "CPU".to_owned(),
            cpu(&read("/proc/cpuinfo"), threads, l3.trim()),
        ),
        ("memory".to_owned(), memory(&read("/proc/meminfo"))),
        (
            "OS".to_owned(),
            os(
                &read("/etc/os-release"),
                read("/proc/sys/kernel/osrelease").trim(),
            ),
        ),
        ("GPU".to_owned(), gpus()),
    ]
}

/// `AMD EPYC 7B13, 2 logical CPUs, 32768K L3, under a hypervisor`.
pub fn cpu(cpuinfo: &str, threads: usize, l3: &str) -> String {
    let field = |name: &str| {
        cpuinfo.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == name).then(|| value.trim().to_owned())
        })
    };
    let mut text = field("model name").unwrap_or_else(|| "unknown model".to_owned());
    text.push_str(&format!(", {threads} logical CPUs"));
    if !l3.is_empty() {
        text.push_str(&format!(", {l3} L3"));
    }
    let flags = field("flags").unwrap_or_default();
    if flags.split_whitespace().any(|flag| flag == "hypervisor") {
        text.push_str(", under a hypervisor");
    }
    text
}

/// `MemTotal` of `/proc/meminfo` in GiB, or why not.
pub fn memory(meminfo: &str) -> String {
    let kib = meminfo.lines().find_map(|line| {
        let rest = line.strip_prefix("MemTotal:")?;
        rest.split_whitespace().next()?.parse::<u64>().ok()
    });
    match kib {
        // Precision loss is irrelevant for display.
        #[allow(clippy::cast_precision_loss)]
        Some(kib) => format!("{:.1} GiB", kib as f64 / f64::from(1u32 << 20)),
        None => "unknown (no MemTotal in /proc/meminfo)".to_owned(),
    }
}

/// `Debian GNU/Linux 12 (bookworm), Linux 6.1.0`: the distribution's name and the kernel.
pub fn os(os_release: &str, kernel: &str) -> String {
    let name = os_release.lines().find_map(|line| {
        let value = line.strip_prefix("PRETTY_NAME=")?;
        Some(value.trim_matches('"').to_owned())
    });
    match (name, kernel) {
        (Some(name), "") => name,
        (Some(name), kernel) => format!("{name}, Linux {kernel}"),
        (None, "") => std::env::consts::OS.to_owned(),
        (None, kernel) => format!("Linux {kernel}"),
    }
}

/// The NVIDIA GPUs `nvidia-smi` lists (name, driver, memory), or that there are none.
fn gpus() -> String {
    let out = Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,driver_version,memory.total",
            "--format=csv,noheader",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    match out {
        Ok(out) if out.status.success() => nvidia_smi_gpus(&String::from_utf8_lossy(&out.stdout)),
        _ => "none found (no working `nvidia-smi`)".to_owned(),
    }
}

/// `nvidia-smi`'s CSV lines as `NVIDIA H100 (driver 550.54, 81559 MiB)`, joined.
pub fn nvidia_smi_gpus(csv: &str) -> String {
    let gpus: Vec<String> = csv
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            match fields.as_slice() {
                [name, driver, memory] => format!("{name} (driver {driver}, {memory})"),
                _ => line.trim().to_owned(),
            }
        })
        .collect();
    if gpus.is_empty() {
        "none found (`nvidia-smi` lists no GPU)".to_owned()
    } else {
        gpus.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_files() {
        let cpuinfo =
            "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse hypervisor\n\
                       processor\t: 1\nmodel name\t: AMD EPYC 7B13\n";
        assert_eq!(
            cpu(cpuinfo, 2, "32768K"),
            "AMD EPYC 7B13, 2 logical CPUs, 32768K L3, under a hypervisor"
        );
        assert_eq!(cpu("", 4, ""), "unknown model, 4 logical CPUs");
        assert_eq!(memory("MemTotal:        8148820 kB\n"), "7.8 GiB");
        assert!(memory("").starts_with("unknown"));
        let release = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
        assert_eq!(
            os(release, "6.1.0"),
            "Debian GNU/Linux 12 (bookworm), Linux 6.1.0"
        );
        assert_eq!(os("", "6.1.0"), "Linux 6.1.0");
    }

    #[test]
    fn lists_nvidia_gpus() {
        assert_eq!(
            nvidia_smi_gpus("NVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB\n"),
            "NVIDIA H100 80GB HBM3 (driver 550.54.15, 81559 MiB)"
        );
        assert!(nvidia_smi_gpus("\n").starts_with("none found"));
    }
}
