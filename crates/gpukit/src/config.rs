//! Configuration: a `gpu.toml` file and the `GPU_DEVICE` variable.
//!
//! Precedence is explicit code, then `GPU_DEVICE`, then the file, then the defaults.
//!
//! ```toml
//! # gpu.toml
//! device = "cuda:0"     # auto | cpu | cpu:N | cuda | cuda:N | vulkan | vulkan:N
//! devices = "cuda:0,1"  # a DeviceGroup's: auto | cuda:* | cuda:0,1 | cpu:0..4 | ...
//! dtype = "f32"         # the element type programs should default to
//! fallback = "cpu"      # when the requested GPU is unusable: "cpu" or "error"
//! ```
//!
//! The file is `$GPU_CONFIG` when that is set, else `gpu.toml` in the current folder; a
//! missing default file means the defaults, a missing `$GPU_CONFIG` file is an error.

use std::path::{Path, PathBuf};

use gpukit_core::{DType, DeviceSet, DeviceSpec, Error, Result};

/// The environment variable that overrides the configured device.
pub const DEVICE_VAR: &str = "GPU_DEVICE";
/// The environment variable that names the configuration file.
pub const CONFIG_VAR: &str = "GPU_CONFIG";
/// The configuration file looked for in the current folder.
pub const CONFIG_FILE: &str = "gpu.toml";

/// What to do when the requested GPU cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FallbackPolicy {
    /// Use the CPU backend and record why the GPU was rejected.
    #[default]
    Cpu,
    /// Fail with the reason the GPU was rejected.
    Error,
}

/// Where the device a context was opened with came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecOrigin {
    /// Given in code.
    Explicit,
    /// The `GPU_DEVICE` environment variable.
    Env,
    /// A configuration file.
    File(PathBuf),
    /// Nothing was set: `auto`.
    Default,
}

impl std::fmt::Display for SpecOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecOrigin::Explicit => f.write_str("code"),
            SpecOrigin::Env => f.write_str(DEVICE_VAR),
            SpecOrigin::File(p) => write!(f, "{}", p.display()),
            SpecOrigin::Default => f.write_str("the default"),
        }
    }
}

/// The contents of `gpu.toml`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The device to open.
    pub device: DeviceSpec,
    /// The devices a [`crate::DeviceGroup`] opens (`devices = "cuda:0,1"`).
    pub devices: DeviceSet,
    /// The element type programs should default to.
    pub dtype: DType,
    /// What to do when the requested GPU is unusable.
    pub fallback: FallbackPolicy,
    /// The file this configuration was read from, if any.
    pub source: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            device: DeviceSpec::Auto,
            devices: DeviceSet::Auto,
            dtype: DType::F32,
            fallback: FallbackPolicy::Cpu,
            source: None,
        }
    }
}

/// The string value of `key`, or a message saying what it holds instead.
fn string_value<'t>(key: &str, value: &'t toml::Value) -> std::result::Result<&'t str, String> {
    value
        .as_str()
        .ok_or_else(|| format!("`{key}` must be a string, not a {}", value.type_str()))
}

impl Config {
    /// Parses configuration text; `path` names it in errors.
    ///
    /// Every key is optional; an unknown key, a value of the wrong type and a value that does
    /// not parse are [`Error::Config`] errors naming the file and the key.
    pub fn from_toml(text: &str, path: &Path) -> Result<Config> {
        let config_error = |message: String| Error::Config {
            path: path.display().to_string(),
            message,
        };
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| config_error(e.to_string().trim_end().to_string()))?;
        let mut cfg = Config {
            source: Some(path.to_path_buf()),
            ..Config::default()
        };
        for (key, value) in &table {
            let text = string_value(key, value).map_err(config_error)?;
            match key.as_str() {
                "device" => {
                    cfg.device = DeviceSpec::parse_from(text, "configuration")
                        .map_err(|e| config_error(format!("`device`: {e}")))?;
                }
                "devices" => {
                    cfg.devices = DeviceSet::parse_from(text, "configuration")
                        .map_err(|e| config_error(format!("`devices`: {e}")))?;
                }
                "dtype" => {
                    cfg.dtype = text
                        .parse()
                        .map_err(|e| config_error(format!("`dtype`: {e}")))?;
                }
                "fallback" => {
                    cfg.fallback = match text {
                        "cpu" => FallbackPolicy::Cpu,
                        "error" => FallbackPolicy::Error,
                        other => {
                            return Err(config_error(format!(
                                "`fallback` is {other:?}; expected \"cpu\" or \"error\""
                            )))
                        }
                    };
                }
                other => {
                    return Err(config_error(format!(
                        "unknown key `{other}`; expected `device`, `devices`, `dtype` or `fallback`"
                    )))
                }
            }
        }
        Ok(cfg)
    }

    /// Reads and parses a configuration file.
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Config {
            path: path.display().to_string(),
            message: format!("cannot read the file: {e}"),
        })?;
        Config::from_toml(&text, path)
    }

    /// The configuration of this process: `$GPU_CONFIG` or `./gpu.toml` when present,
    /// with the device overridden by `$GPU_DEVICE`. Returns where the device came from.
    pub fn from_env() -> Result<(Config, SpecOrigin)> {
        let path = match std::env::var_os(CONFIG_VAR) {
            Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
            _ => {
                let p = PathBuf::from(CONFIG_FILE);
                p.is_file().then_some(p)
            }
        };
        let file = path.as_deref().map(Config::load).transpose()?;
        Config::resolve(None, read_device_var()?.as_deref(), file)
    }

    /// Applies the precedence rules: `explicit`, then the `GPU_DEVICE` value `env`, then
    /// `file`, then the defaults.
    pub fn resolve(
        explicit: Option<DeviceSpec>,
        env: Option<&str>,
        file: Option<Config>,
    ) -> Result<(Config, SpecOrigin)> {
        let mut cfg = file.unwrap_or_default();
        let origin = if let Some(spec) = explicit {
            cfg.device = spec;
            SpecOrigin::Explicit
        } else if let Some(text) = env {
            cfg.device = DeviceSpec::parse_from(text, DEVICE_VAR)?;
            SpecOrigin::Env
        } else if let Some(path) = &cfg.source {
            SpecOrigin::File(path.clone())
        } else {
            SpecOrigin::Default
        };
        Ok((cfg, origin))
    }
}

/// `GPU_DEVICE`'s value: `None` when unset or empty, an error when not UTF-8.
pub fn read_device_var() -> Result<Option<String>> {
    match std::env::var(DEVICE_VAR) {
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(raw)) => Err(Error::InvalidDeviceSpec {
            input: raw.to_string_lossy().into_owned(),
            origin: DEVICE_VAR.into(),
            reason: "it is not valid UTF-8".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config> {
        Config::from_toml(text, Path::new("gpu.toml"))
    }

    #[test]
    fn full_file_parses() {
        let cfg = parse("device = \"cuda:1\"\ndtype = \"f64\"\nfallback = \"error\"\n").unwrap();
        assert_eq!(cfg.device, DeviceSpec::Cuda(Some(1)));
        assert_eq!(cfg.dtype, DType::F64);
        assert_eq!(cfg.fallback, FallbackPolicy::Error);
    }

    #[test]
    fn missing_keys_take_defaults() {
        let cfg = parse("").unwrap();
        assert_eq!(cfg.device, DeviceSpec::Auto);
        assert_eq!(cfg.dtype, DType::F32);
        assert_eq!(cfg.fallback, FallbackPolicy::Cpu);
    }

    #[test]
    fn malformed_files_are_config_errors() {
        for bad in [
            "device = \"tpu\"",
            "device = 3",
            "dtype = \"f33\"",
            "fallback = \"maybe\"",
            "colour = \"blue\"",
            "device = ",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(matches!(err, Error::Config { .. }), "{bad:?} gave {err:?}");
        }
    }

    #[test]
    fn explicit_beats_env_beats_file() {
        let file = parse("device = \"cuda\"").unwrap();
        let (c, o) = Config::resolve(
            Some(DeviceSpec::Cpu(None)),
            Some("cuda:2"),
            Some(file.clone()),
        )
        .unwrap();
        assert_eq!((c.device, o), (DeviceSpec::Cpu(None), SpecOrigin::Explicit));
        let (c, o) = Config::resolve(None, Some("cuda:2"), Some(file.clone())).unwrap();
        assert_eq!((c.device, o), (DeviceSpec::Cuda(Some(2)), SpecOrigin::Env));
        let (c, o) = Config::resolve(None, None, Some(file)).unwrap();
        assert_eq!(c.device, DeviceSpec::Cuda(None));
        assert!(matches!(o, SpecOrigin::File(_)));
        let (c, o) = Config::resolve(None, None, None).unwrap();
        assert_eq!((c.device, o), (DeviceSpec::Auto, SpecOrigin::Default));
    }

    #[test]
    fn malformed_env_is_an_error_even_with_a_file() {
        let file = parse("device = \"cpu\"").unwrap();
        let err = Config::resolve(None, Some("cuda:x!"), Some(file)).unwrap_err();
        assert!(matches!(err, Error::InvalidDeviceSpec { origin, .. } if origin == DEVICE_VAR));
    }
}
