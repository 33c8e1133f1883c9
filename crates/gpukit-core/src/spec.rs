//! `DeviceSpec`: which device a program asks for, as text (`auto`, `cpu`, `cuda`, `cuda:N`,
//! `vulkan`, `vulkan:N`).

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// Which device to open.
///
/// Parsed case-insensitively with surrounding white space ignored:
///
/// ```
/// use gpukit::DeviceSpec;
/// assert_eq!("auto".parse::<DeviceSpec>()?, DeviceSpec::Auto);
/// assert_eq!(" CUDA:1 ".parse::<DeviceSpec>()?, DeviceSpec::Cuda(Some(1)));
/// assert_eq!("vulkan:0".parse::<DeviceSpec>()?, DeviceSpec::Vulkan(Some(0)));
/// assert!("cuda:x!".parse::<DeviceSpec>().is_err());
/// # Ok::<(), gpukit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DeviceSpec {
    /// The best usable device: CUDA device 0, else the first Vulkan GPU that is not a CPU
    /// implementation (lavapipe is passed over: the CPU backend is faster there), else the
    /// CPU.
    #[default]
    Auto,
    /// The CPU reference backend.
    Cpu,
    /// A CUDA device: the first visible one, or the given ordinal.
    Cuda(Option<usize>),
    /// A Vulkan (or Metal, DX12) adapter through the wgpu backend: the first usable one in
    /// the backend's order, CPU implementations included, or the given ordinal.
    Vulkan(Option<usize>),
}

impl DeviceSpec {
    /// Parses `input`, naming `origin` (`code`, `GPU_DEVICE`, a file) in any error.
    pub fn parse_from(input: &str, origin: &str) -> Result<DeviceSpec> {
        let bad = |reason: String| Error::InvalidDeviceSpec {
            input: input.to_string(),
            origin: origin.to_string(),
            reason,
        };
        let s = input.trim().to_ascii_lowercase();
        match s.as_str() {
            "" => Err(bad("it is empty".into())),
            "auto" => Ok(DeviceSpec::Auto),
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(None)),
            "vulkan" => Ok(DeviceSpec::Vulkan(None)),
            _ => {
                let (ordinal, make): (&str, fn(usize) -> DeviceSpec) =
                    if let Some(o) = s.strip_prefix("cuda:") {
                        (o, |n| DeviceSpec::Cuda(Some(n)))
                    } else if let Some(o) = s.strip_prefix("vulkan:") {
                        (o, |n| DeviceSpec::Vulkan(Some(n)))
                    } else {
                        return Err(bad(format!(
                            "unknown backend {:?}",
                            s.split(':').next().unwrap_or("")
                        )));
                    };
                if ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad(format!(
                        "the device ordinal {ordinal:?} is not a non-negative integer"
                    )));
                }
                ordinal
                    .parse::<usize>()
                    .map(make)
                    .map_err(|e| bad(format!("the device ordinal {ordinal:?}: {e}")))
            }
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        DeviceSpec::parse_from(s, "code")
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Auto => f.write_str("auto"),
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(None) => f.write_str("cuda"),
            DeviceSpec::Cuda(Some(n)) => write!(f, "cuda:{n}"),
            DeviceSpec::Vulkan(None) => f.write_str("vulkan"),
            DeviceSpec::Vulkan(Some(n)) => write!(f, "vulkan:{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_round_trips() {
        for spec in [
            DeviceSpec::Auto,
            DeviceSpec::Cpu,
            DeviceSpec::Cuda(None),
            DeviceSpec::Cuda(Some(3)),
            DeviceSpec::Vulkan(None),
            DeviceSpec::Vulkan(Some(2)),
        ] {
            assert_eq!(spec.to_string().parse::<DeviceSpec>().ok(), Some(spec));
        }
    }

    #[test]
    fn malformed_specs_name_the_origin() {
        for bad in [
            "", "  ", "gpu", "cuda:", "cuda:-1", "cuda:x!", "cuda:1:2", "cpu:0", "cuda: 1",
            "vulkan:", "vulkan:x",
        ] {
            let err = DeviceSpec::parse_from(bad, "GPU_DEVICE").unwrap_err();
            assert!(
                matches!(&err, Error::InvalidDeviceSpec { origin, .. } if origin == "GPU_DEVICE"),
                "{bad:?} gave {err:?}"
            );
        }
        let huge = format!("cuda:{}0", usize::MAX);
        assert!(DeviceSpec::parse_from(&huge, "code").is_err());
    }
}
