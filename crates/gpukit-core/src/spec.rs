//! `DeviceSpec`: which device a program asks for, as text (`auto`, `cpu`, `cpu:N`, `cuda`,
//! `cuda:N`, `vulkan`, `vulkan:N`), and `DeviceSet`: which devices (`cuda:0,1`, `cuda:*`,
//! `cpu:0..4`).

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
/// assert_eq!("cpu:3".parse::<DeviceSpec>()?, DeviceSpec::Cpu(Some(3)));
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
    /// The CPU reference backend: logical device 0, or the given one (the CPU backend has
    /// any number of logical devices, each with its own memory pool and streams).
    Cpu(Option<usize>),
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
            _ => {
                let (backend, ordinals) = split_backend(&s).map_err(bad)?;
                let Some(ordinals) = ordinals else {
                    return Ok(backend.spec(None));
                };
                if ordinals.contains([',', '*']) || ordinals.contains("..") {
                    return Err(bad(format!(
                        "{ordinals:?} names a set of devices: open a set with `DeviceGroup` \
                         (a context is one device, `{}:N`)",
                        backend.name()
                    )));
                }
                parse_ordinal(ordinals)
                    .map(|n| backend.spec(Some(n)))
                    .map_err(bad)
            }
        }
    }

    /// The backend the spec names (`None` for `auto`).
    pub fn backend(&self) -> Option<SpecBackend> {
        match self {
            DeviceSpec::Auto => None,
            DeviceSpec::Cpu(_) => Some(SpecBackend::Cpu),
            DeviceSpec::Cuda(_) => Some(SpecBackend::Cuda),
            DeviceSpec::Vulkan(_) => Some(SpecBackend::Vulkan),
        }
    }

    /// The ordinal the spec names, if any.
    pub fn ordinal(&self) -> Option<usize> {
        match self {
            DeviceSpec::Auto => None,
            DeviceSpec::Cpu(n) | DeviceSpec::Cuda(n) | DeviceSpec::Vulkan(n) => *n,
        }
    }
}

/// A backend a [`DeviceSpec`] or [`DeviceSet`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpecBackend {
    /// `cpu`.
    Cpu,
    /// `cuda`.
    Cuda,
    /// `vulkan`.
    Vulkan,
}

impl SpecBackend {
    /// The backend's name in specs: `cpu`, `cuda`, `vulkan`.
    pub fn name(self) -> &'static str {
        match self {
            SpecBackend::Cpu => "cpu",
            SpecBackend::Cuda => "cuda",
            SpecBackend::Vulkan => "vulkan",
        }
    }

    /// The spec of this backend's device `ordinal` (its first, `None`).
    pub fn spec(self, ordinal: Option<usize>) -> DeviceSpec {
        match self {
            SpecBackend::Cpu => DeviceSpec::Cpu(ordinal),
            SpecBackend::Cuda => DeviceSpec::Cuda(ordinal),
            SpecBackend::Vulkan => DeviceSpec::Vulkan(ordinal),
        }
    }
}

/// The backend and, after a colon, the ordinal text of a lower-cased spec.
fn split_backend(s: &str) -> std::result::Result<(SpecBackend, Option<&str>), String> {
    let (name, rest) = match s.split_once(':') {
        Some((name, rest)) => (name, Some(rest)),
        None => (s, None),
    };
    let backend = match name {
        "cpu" => SpecBackend::Cpu,
        "cuda" => SpecBackend::Cuda,
        "vulkan" => SpecBackend::Vulkan,
        _ => return Err(format!("unknown backend {name:?}")),
    };
    Ok((backend, rest))
}

/// A device ordinal: decimal digits only.
fn parse_ordinal(text: &str) -> std::result::Result<usize, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "the device ordinal {text:?} is not a non-negative integer"
        ));
    }
    text.parse::<usize>()
        .map_err(|e| format!("the device ordinal {text:?}: {e}"))
}

/// The most devices a set may list: more than any machine has GPUs, and bounded so that a
/// typo (`cpu:0..1000000000`) is an error rather than a billion contexts.
pub const MAX_SET_DEVICES: usize = 1024;

/// Which devices to open together, for data-parallel work ([`DeviceSpec`] is one device).
///
/// Parsed case-insensitively with surrounding white space ignored: `auto`; one backend's
/// devices as a comma-separated list of ordinals and ranges (`cuda:0,1`, `cpu:0..4` for
/// 0, 1, 2, 3, `cuda:0..=3`, `cuda:0..2,5`); every visible device of a GPU backend
/// (`cuda:*`, `vulkan:*`); or one device in [`DeviceSpec`]'s syntax (a set of one).
///
/// ```
/// use gpukit::core::{DeviceSet, DeviceSpec};
/// assert_eq!("cuda:0,1".parse::<DeviceSet>()?, DeviceSet::List(vec![DeviceSpec::Cuda(Some(0)), DeviceSpec::Cuda(Some(1))]));
/// assert_eq!("cpu:0..3".parse::<DeviceSet>()?.len(), Some(3));
/// assert_eq!("cuda:*".parse::<DeviceSet>()?, DeviceSet::All(gpukit::core::SpecBackend::Cuda));
/// assert!("cuda:1,1".parse::<DeviceSet>().is_err()); // a device twice
/// # Ok::<(), gpukit::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum DeviceSet {
    /// Every visible CUDA device, else every Vulkan GPU that is not a CPU implementation,
    /// else two logical CPU devices.
    #[default]
    Auto,
    /// Every visible device of a GPU backend (`cuda:*`, `vulkan:*`).
    All(SpecBackend),
    /// Exactly these devices, none twice, at least one (the text names one backend; a
    /// list built in code may mix them: peer copies between backends go through host
    /// memory).
    List(Vec<DeviceSpec>),
}

impl DeviceSet {
    /// Parses `input`, naming `origin` (`code`, `GPU_DEVICE`, a file) in any error.
    pub fn parse_from(input: &str, origin: &str) -> Result<DeviceSet> {
        let bad = |reason: String| Error::InvalidDeviceSpec {
            input: input.to_string(),
            origin: origin.to_string(),
            reason,
        };
        let s = input.trim().to_ascii_lowercase();
        if s == "auto" {
            return Ok(DeviceSet::Auto);
        }
        if s.is_empty() {
            return Err(bad("it is empty".into()));
        }
        let (backend, ordinals) = split_backend(&s).map_err(bad)?;
        let Some(ordinals) = ordinals else {
            return Ok(DeviceSet::List(vec![backend.spec(None)]));
        };
        if ordinals == "*" {
            if backend == SpecBackend::Cpu {
                return Err(bad(
                    "the CPU backend has as many logical devices as a set names: name them \
                     (`cpu:0..2`)"
                        .into(),
                ));
            }
            return Ok(DeviceSet::All(backend));
        }
        let mut list: Vec<DeviceSpec> = Vec::new();
        for part in ordinals.split(',') {
            // The first and last ordinal (inclusive: `usize::MAX` has no successor).
            let (lo, last) = match part.split_once("..") {
                None => {
                    let n = parse_ordinal(part).map_err(bad)?;
                    (n, n)
                }
                Some((lo, hi)) => {
                    let lo = parse_ordinal(lo).map_err(bad)?;
                    let last = match hi.strip_prefix('=') {
                        Some(h) => Some(parse_ordinal(h).map_err(bad)?),
                        None => parse_ordinal(hi).map_err(bad)?.checked_sub(1),
                    };
                    match last {
                        Some(last) if last >= lo => (lo, last),
                        _ => return Err(bad(format!("the range {part:?} is empty"))),
                    }
                }
            };
            if last - lo >= MAX_SET_DEVICES - list.len().min(MAX_SET_DEVICES) {
                return Err(bad(format!("it names more than {MAX_SET_DEVICES} devices")));
            }
            for n in lo..=last {
                let spec = backend.spec(Some(n));
                if list.contains(&spec) {
                    return Err(bad(format!("it names device {n} twice")));
                }
                list.push(spec);
            }
        }
        Ok(DeviceSet::List(list))
    }

    /// How many devices the set names, where the text says (`None` for `auto` and `*`,
    /// which depend on the machine).
    pub fn len(&self) -> Option<usize> {
        match self {
            DeviceSet::List(v) => Some(v.len()),
            DeviceSet::Auto | DeviceSet::All(_) => None,
        }
    }

    /// Whether the set is known to name no device (never true of a parsed set).
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }
}

impl From<DeviceSpec> for DeviceSet {
    /// A set of the one device (`auto` becomes [`DeviceSet::Auto`]).
    fn from(spec: DeviceSpec) -> DeviceSet {
        match spec {
            DeviceSpec::Auto => DeviceSet::Auto,
            spec => DeviceSet::List(vec![spec]),
        }
    }
}

impl FromStr for DeviceSet {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        DeviceSet::parse_from(s, "code")
    }
}

impl fmt::Display for DeviceSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSet::Auto => f.write_str("auto"),
            DeviceSet::All(b) => write!(f, "{}:*", b.name()),
            DeviceSet::List(v) => {
                let Some(first) = v.first() else {
                    return f.write_str("(no devices)");
                };
                let backend = first.backend().map_or("auto", SpecBackend::name);
                if let [only] = &v[..] {
                    if only.ordinal().is_none() {
                        return write!(f, "{only}");
                    }
                }
                write!(f, "{backend}:")?;
                for (i, d) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    match d.ordinal() {
                        Some(n) => write!(f, "{n}")?,
                        None => f.write_str("0")?,
                    }
                }
                Ok(())
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
            DeviceSpec::Cpu(None) => f.write_str("cpu"),
            DeviceSpec::Cpu(Some(n)) => write!(f, "cpu:{n}"),
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
            DeviceSpec::Cpu(None),
            DeviceSpec::Cpu(Some(4)),
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
            "", "  ", "gpu", "cuda:", "cuda:-1", "cuda:x!", "cuda:1:2", "cpu:", "cuda: 1",
            "vulkan:", "vulkan:x", "cuda:0,1", "cuda:*", "cpu:0..2", "auto:0",
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

    #[test]
    fn device_sets_parse_lists_ranges_and_stars() {
        let cuda =
            |v: &[usize]| DeviceSet::List(v.iter().map(|&n| DeviceSpec::Cuda(Some(n))).collect());
        let cpu =
            |v: &[usize]| DeviceSet::List(v.iter().map(|&n| DeviceSpec::Cpu(Some(n))).collect());
        for (text, want) in [
            ("auto", DeviceSet::Auto),
            (" CUDA:0,1 ", cuda(&[0, 1])),
            ("cuda:*", DeviceSet::All(SpecBackend::Cuda)),
            ("vulkan:*", DeviceSet::All(SpecBackend::Vulkan)),
            ("cpu:0..4", cpu(&[0, 1, 2, 3])),
            ("cpu:1..=2", cpu(&[1, 2])),
            ("cuda:0..2,5", cuda(&[0, 1, 5])),
            ("cuda:3", cuda(&[3])),
            ("cpu", DeviceSet::List(vec![DeviceSpec::Cpu(None)])),
        ] {
            let got = DeviceSet::parse_from(text, "code").unwrap();
            assert_eq!(got, want, "{text:?}");
            // Display gives text that parses back to the same set.
            assert_eq!(
                got.to_string().parse::<DeviceSet>().ok(),
                Some(got),
                "{text:?}"
            );
        }
        assert_eq!(DeviceSet::from(DeviceSpec::Cuda(Some(2))), cuda(&[2]));
    }

    /// Regression (found by the `device_spec` fuzz target): the ordinal `usize::MAX` in a set
    /// overflowed `n + 1` (a panic with overflow checks, else an empty set), and a range up
    /// to it (`..=`) silently left it out.
    #[test]
    fn a_set_may_name_the_largest_ordinal() {
        let max = usize::MAX;
        let set = DeviceSet::parse_from(&format!("cuda:{max}"), "code").unwrap();
        assert_eq!(set, DeviceSet::List(vec![DeviceSpec::Cuda(Some(max))]));
        let set = DeviceSet::parse_from(&format!("cpu:{}..={max}", max - 1), "code").unwrap();
        let want = [max - 1, max].map(|n| DeviceSpec::Cpu(Some(n)));
        assert_eq!(set, DeviceSet::List(want.to_vec()));
        assert!(DeviceSet::parse_from("cpu:0..0", "code").is_err());
        assert!(DeviceSet::parse_from(&format!("cpu:0..={max}"), "code").is_err());
    }

    #[test]
    fn malformed_device_sets_say_why() {
        for (bad, why) in [
            ("", "empty"),
            ("gpu:0,1", "unknown backend"),
            ("cuda:1,1", "twice"),
            ("cpu:0..2,1", "twice"),
            ("cpu:2..2", "empty"),
            ("cpu:3..1", "empty"),
            ("cpu:*", "name them"),
            ("cuda:0,", "not a non-negative integer"),
            ("cuda:,1", "not a non-negative integer"),
            ("cuda:0..x", "not a non-negative integer"),
            ("cpu:0..100000000000", "more than 1024"),
            ("cpu:0..1024,5000", "more than 1024"),
        ] {
            match DeviceSet::parse_from(bad, "GPU_DEVICE") {
                Err(Error::InvalidDeviceSpec { origin, reason, .. }) => {
                    assert_eq!(origin, "GPU_DEVICE");
                    assert!(reason.contains(why), "{bad:?}: {reason}");
                }
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
        // A set is not one device.
        let err = DeviceSpec::parse_from("cuda:0,1", "code").unwrap_err();
        assert!(err.to_string().contains("DeviceGroup"), "{err}");
    }
}
