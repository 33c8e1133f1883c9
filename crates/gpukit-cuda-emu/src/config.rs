//! The emulator's settings, read once from the environment (`cargo xtask cuda-emu env`
//! prints the variables that select the emulator; these tune it).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `GPUKIT_CUDA_EMU_DEVICES` | 2 | emulated devices |
//! | `GPUKIT_CUDA_EMU_MEMORY` | 80G, at most half the host's RAM | each device's memory (`cuMemGetInfo`; more is `CUDA_ERROR_OUT_OF_MEMORY`) |
//! | `GPUKIT_CUDA_EMU_SMS` | 132 | each device's multiprocessors (`CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`): programs that size their grids by it, and tests that size their inputs by the grids, do proportionally less work with fewer |
//! | `GPUKIT_CUDA_EMU_SEED` | 1 | the order of blocks and of a block's threads, and of a graph's independent nodes |
//! | `GPUKIT_CUDA_EMU_DELAY_US` | 200 | how long queued work waits before it starts unless something waits for it |
//! | `GPUKIT_CUDA_EMU_FILL` | 0xff | the byte new device memory is filled with (`off`: left zero) |
//! | `GPUKIT_CUDA_EMU_RACES` | error | `error`: a race between streams is a sticky launch failure; `warn`: reported only; `off` |
//! | `GPUKIT_CUDA_EMU_CACHE` | `$XDG_CACHE_HOME/gpukit/cuda-emu` | compiled modules |
//! | `GPUKIT_CUDA_EMU_CXX` | `g++`, then `clang++`, `c++` | the C++ compiler the emulated NVRTC runs |
//! | `GPUKIT_CUDA_EMU_QUIET` | unset | `1`: no diagnostics on standard error |
//!
//! Fault injection ([`crate::faults`]): `GPUKIT_CUDA_EMU_FAIL_ALLOC`,
//! `GPUKIT_CUDA_EMU_FAULT_KERNEL`, `GPUKIT_CUDA_EMU_FAIL_COMPILE`, `GPUKIT_CUDA_EMU_FAIL_CALL`.

use std::path::PathBuf;
use std::sync::OnceLock;

/// What to do about a race between streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RacePolicy {
    /// Report it and fail the context with `CUDA_ERROR_LAUNCH_FAILED`.
    Error,
    /// Report it only.
    Warn,
    /// Do not look.
    Off,
}

/// The settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Emulated devices.
    pub devices: usize,
    /// Each device's memory in bytes.
    pub memory: u64,
    /// Each device's multiprocessors.
    pub sms: u32,
    /// The scheduling seed.
    pub seed: u64,
    /// How long queued work waits before starting unless demanded, in microseconds.
    pub delay_us: u64,
    /// The byte new device memory is filled with.
    pub fill: Option<u8>,
    /// Races between streams.
    pub races: RacePolicy,
    /// Where compiled modules are kept.
    pub cache: PathBuf,
    /// The C++ compiler, when set.
    pub cxx: Option<String>,
    /// No diagnostics.
    pub quiet: bool,
    /// What was wrong with the environment, if anything (cuInit then fails and says it).
    pub error: Option<String>,
}

/// The settings, read on first use.
pub fn get() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| read(|name| std::env::var(name).ok()))
}

/// Reads the settings through `var` (the environment, or a test's table).
pub fn read(var: impl Fn(&str) -> Option<String>) -> Config {
    let mut errors = Vec::new();
    let mut number = |name: &str, default: u64, parse: fn(&str) -> Option<u64>| -> u64 {
        match var(name) {
            None => default,
            Some(v) => parse(v.trim()).unwrap_or_else(|| {
                errors.push(format!("{name}={v:?} is not valid"));
                default
            }),
        }
    };
    let devices = number("GPUKIT_CUDA_EMU_DEVICES", 2, |s| s.parse().ok());
    // Emulated memory is the host's: a device larger than half of it would let a program
    // that fills its device (zeroing an allocation of most of it) exhaust the host.
    let memory = number(
        "GPUKIT_CUDA_EMU_MEMORY",
        (80 << 30).min(host_memory() / 2),
        parse_bytes,
    );
    let sms = number("GPUKIT_CUDA_EMU_SMS", 132, |s| s.parse().ok());
    let seed = number("GPUKIT_CUDA_EMU_SEED", 1, |s| s.parse().ok());
    let delay_us = number("GPUKIT_CUDA_EMU_DELAY_US", 200, |s| s.parse().ok());
    let fill = match var("GPUKIT_CUDA_EMU_FILL").as_deref().map(str::trim) {
        None => Some(0xff),
        Some("off") => None,
        Some(v) => match parse_byte(v) {
            Some(b) => Some(b),
            None => {
                errors.push(format!("GPUKIT_CUDA_EMU_FILL={v:?} is not a byte or `off`"));
                Some(0xff)
            }
        },
    };
    let races = match var("GPUKIT_CUDA_EMU_RACES").as_deref().map(str::trim) {
        None | Some("error") => RacePolicy::Error,
        Some("warn") => RacePolicy::Warn,
        Some("off") => RacePolicy::Off,
        Some(v) => {
            errors.push(format!(
                "GPUKIT_CUDA_EMU_RACES={v:?} is not `error`, `warn` or `off`"
            ));
            RacePolicy::Error
        }
    };
    if sms == 0 || sms > 1024 {
        errors.push(format!(
            "GPUKIT_CUDA_EMU_SMS={sms}: between 1 and 1024 multiprocessors"
        ));
    }
    if devices == 0 || devices > 64 {
        errors.push(format!(
            "GPUKIT_CUDA_EMU_DEVICES={devices}: between 1 and 64 devices"
        ));
    }
    let cache = var("GPUKIT_CUDA_EMU_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let base = var("XDG_CACHE_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_else(std::env::temp_dir);
            base.join("gpukit").join("cuda-emu")
        });
    Config {
        devices: devices.clamp(1, 64) as usize,
        memory,
        sms: sms.clamp(1, 1024) as u32,
        seed,
        delay_us,
        fill,
        races,
        cache,
        cxx: var("GPUKIT_CUDA_EMU_CXX").filter(|v| !v.is_empty()),
        quiet: var("GPUKIT_CUDA_EMU_QUIET").is_some_and(|v| v == "1"),
        error: (!errors.is_empty()).then(|| errors.join("; ")),
    }
}

/// The host's physical memory in bytes (80 GiB if it cannot be read).
pub fn host_memory() -> u64 {
    // SAFETY: sysconf only reads system parameters.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages > 0 && size > 0 {
        (pages as u64).saturating_mul(size as u64)
    } else {
        80 << 30
    }
}

/// `123`, `64K`, `80G`, `1GiB`, `512MB` (powers of two).
fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: u64 = s[..digits].parse().ok()?;
    let shift = match s[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

fn parse_byte(s: &str) -> Option<u8> {
    match s.strip_prefix("0x") {
        Some(hex) => u8::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Config {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        read(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_and_overrides() {
        let c = with(&[]);
        assert_eq!((c.devices, c.fill), (2, Some(0xff)));
        assert_eq!(c.memory, (80 << 30).min(host_memory() / 2));
        assert!(c.error.is_none());
        let c = with(&[
            ("GPUKIT_CUDA_EMU_DEVICES", "3"),
            ("GPUKIT_CUDA_EMU_MEMORY", "512M"),
            ("GPUKIT_CUDA_EMU_FILL", "off"),
            ("GPUKIT_CUDA_EMU_RACES", "warn"),
            ("GPUKIT_CUDA_EMU_SMS", "8"),
        ]);
        assert_eq!((c.devices, c.memory, c.fill), (3, 512 << 20, None));
        assert_eq!(c.sms, 8);
        assert_eq!(c.races, RacePolicy::Warn);
    }

    #[test]
    fn bad_values_are_reported_not_guessed() {
        let c = with(&[
            ("GPUKIT_CUDA_EMU_DEVICES", "two"),
            ("GPUKIT_CUDA_EMU_MEMORY", "8X"),
            ("GPUKIT_CUDA_EMU_SMS", "0"),
        ]);
        let e = c.error.unwrap_or_default();
        assert!(e.contains("GPUKIT_CUDA_EMU_DEVICES=\"two\""), "{e}");
        assert!(e.contains("GPUKIT_CUDA_EMU_MEMORY"), "{e}");
        assert!(e.contains("GPUKIT_CUDA_EMU_SMS=0"), "{e}");
        assert_eq!(parse_bytes("1GiB"), Some(1 << 30));
        assert_eq!(parse_byte("0x7f"), Some(0x7f));
    }
}
