//! Fuzz target `config_toml`: arbitrary text through `gpu.toml` parsing
//! (`Config::from_toml`) and through the `GPU_DEVICE` rule (`Config::resolve`).
//!
//! Properties: nothing panics; errors are typed (`Error::Config` naming the file, or
//! `Error::InvalidDeviceSpec` for a bad `GPU_DEVICE`) and format; a parsed configuration
//! records its file, and written back as canonical TOML it parses to an equal one.
#![no_main]

use std::path::Path;

use gpukit::{Config, DeviceSpec, Error, FallbackPolicy, SpecOrigin};
use libfuzzer_sys::fuzz_target;

const FILE: &str = "fuzz/gpu.toml";

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let path = Path::new(FILE);
    match Config::from_toml(&text, path) {
        Ok(cfg) => {
            assert_eq!(cfg.source.as_deref(), Some(path));
            let fallback = match cfg.fallback {
                FallbackPolicy::Cpu => "cpu",
                FallbackPolicy::Error => "error",
            };
            let canonical = format!(
                "device = \"{}\"\ndtype = \"{}\"\nfallback = \"{fallback}\"\n",
                cfg.device, cfg.dtype
            );
            match Config::from_toml(&canonical, path) {
                Ok(again) => assert_eq!(again, cfg, "{text:?} -> {canonical:?}"),
                Err(e) => panic!("{text:?} parsed, but its canonical form {canonical:?}: {e}"),
            }
            // The file's device is what resolve picks when nothing overrides it.
            let (resolved, origin) = match Config::resolve(None, None, Some(cfg.clone())) {
                Ok(r) => r,
                Err(e) => panic!("resolve without overrides failed: {e}"),
            };
            assert_eq!(resolved, cfg);
            assert_eq!(origin, SpecOrigin::File(path.to_path_buf()));
        }
        Err(e @ Error::Config { .. }) => {
            if let Error::Config { path: p, .. } = &e {
                assert_eq!(p, FILE);
            }
            let _ = e.to_string();
        }
        Err(other) => panic!("from_toml({text:?}): expected Error::Config, got {other:?}"),
    }

    // The same text as a `GPU_DEVICE` value.
    match Config::resolve(None, Some(&text), None) {
        Ok((cfg, origin)) => {
            assert_eq!(origin, SpecOrigin::Env);
            assert_eq!(Ok(cfg.device), text.parse::<DeviceSpec>().map_err(|_| ()));
        }
        Err(e @ Error::InvalidDeviceSpec { .. }) => {
            let _ = e.to_string();
        }
        Err(other) => panic!("resolve(GPU_DEVICE={text:?}): got {other:?}"),
    }
});
