//! The CUDA availability probe and how opening CUDA reports its answer, on any machine:
//! with a GPU the probe lists devices; without one it says why, and every way of asking
//! for CUDA gives that reason back. With a GPU, the contexts CUDA opens are the devices
//! the probe describes, and under `GPU_REQUIRE_CUDA=1` (a GPU run) a failed probe is a
//! failure. Nothing here sets environment variables.

use crate::common;

use gpukit::cuda::{probe, Probe, ProbeError};
use gpukit::{Context, DeviceSpec, Error};

/// Asserts that `ctx` is CUDA device `ordinal` as the probe `p` describes it.
fn assert_is_probed_device(ctx: &Context, p: &Probe, ordinal: usize) {
    let device = &p.devices[ordinal];
    let info = ctx.info();
    assert_eq!(ctx.backend_name(), "cuda");
    assert_eq!(ctx.device_id(), ordinal);
    assert_eq!(info.name, device.name, "device {ordinal}");
    assert_eq!(info.total_memory, device.total_memory, "device {ordinal}");
    assert_eq!(
        info.compute_capability,
        Some(device.compute_capability),
        "device {ordinal}"
    );
    assert_eq!(
        info.multiprocessors, device.multiprocessors,
        "device {ordinal}"
    );
    assert_eq!(info.copy_engines, device.copy_engines, "device {ordinal}");
}

#[test]
fn the_probe_answers_with_data_and_the_same_answer_twice() {
    let first = probe();
    let second = probe();
    assert_eq!(first, second, "a second probe answered differently");
    match first {
        Ok(p) => {
            assert!(!p.devices.is_empty(), "a successful probe lists devices");
            assert!(p.driver_path.is_absolute(), "{}", p.driver_path.display());
            // The probe refuses drivers older than CUDA 12.0 (gpukit-cuda-sys's MIN_DRIVER_VERSION).
            assert!(
                p.driver_version_pair().0 >= 12,
                "{:?}",
                p.driver_version_pair()
            );
            for (i, d) in p.devices.iter().enumerate() {
                assert_eq!(d.ordinal, i, "{d:?}");
                assert!(!d.name.is_empty(), "{d:?}");
                assert!(d.total_memory > 0, "{d:?}");
                assert!(d.compute_capability.0 >= 1, "{d:?}");
                assert!(d.multiprocessors >= 1, "{d:?}");
            }
            println!("CUDA driver {:?}: {:?}", p.driver_version_pair(), p.devices);
        }
        Err(e) => {
            let text = e.to_string();
            assert!(
                !common::require_cuda(),
                "GPU_REQUIRE_CUDA=1 but the probe failed: {text}"
            );
            assert!(!text.is_empty(), "{e:?} has no message");
            if let ProbeError::DriverMissing(lib) = &e {
                assert!(!lib.searched.is_empty(), "no folder searched: {text}");
                assert!(text.contains("libcuda.so.1"), "{text}");
                for dir in &lib.searched {
                    let dir = dir.display().to_string();
                    assert!(text.contains(&dir), "{dir} is not in the message: {text}");
                }
            }
            println!("no CUDA here: {text}");
        }
    }
}

#[test]
fn every_probe_error_says_something() {
    let errors = [
        ProbeError::DriverTooOld {
            version: 11080,
            required: 12000,
        },
        ProbeError::NoDevice {
            visible_devices: Some(String::new()),
        },
        ProbeError::NoDevice {
            visible_devices: None,
        },
        ProbeError::DriverSymbols {
            path: "/usr/lib/libcuda.so.1".into(),
            message: "undefined symbol: cuInit".into(),
        },
        ProbeError::Driver {
            call: "cuInit",
            code: 34,
            name: "CUDA_ERROR_STUB_LIBRARY".into(),
            message: "CUDA driver is a stub library".into(),
            hint: "; install the NVIDIA driver",
        },
        ProbeError::Cudarc {
            path: "/usr/lib/libcuda.so.1".into(),
            message: "cudarc would open `libcuda.so`, another library".into(),
        },
    ];
    for e in &errors {
        assert!(!e.to_string().is_empty(), "{e:?}");
    }
    let too_old = errors[0].to_string();
    assert!(
        too_old.contains("11.8") && too_old.contains("12.0"),
        "{too_old}"
    );
    assert!(errors[1].to_string().contains("CUDA_VISIBLE_DEVICES"));
    assert!(errors[3].to_string().contains("cuInit"));
    assert!(errors[4].to_string().contains("CUDA_ERROR_STUB_LIBRARY"));
    assert!(errors[5].to_string().contains("through cudarc"));
}

#[test]
fn explicit_cuda_fails_with_the_probes_reason() {
    match (probe(), Context::new(DeviceSpec::Cuda(None))) {
        (Err(pe), Err(Error::Unavailable { backend, reason })) => {
            assert_eq!(backend, "cuda");
            assert_eq!(reason, pe.to_string());
        }
        (Err(pe), other) => panic!("the probe failed ({pe}), but opening CUDA gave {other:?}"),
        (Ok(p), Ok(ctx)) => {
            assert_is_probed_device(&ctx, p, 0);
            assert!(ctx.selection().rejected.is_empty());
        }
        // The probe found a device but something else is missing (NVRTC, say): only
        // where a GPU is not required.
        (Ok(_), Err(e)) => {
            assert!(!common::require_cuda(), "GPU_REQUIRE_CUDA=1 but: {e}");
            assert!(
                matches!(
                    e,
                    Error::Unavailable {
                        backend: "cuda",
                        ..
                    }
                ),
                "{e:?}"
            )
        }
    }
}

#[test]
fn a_cuda_ordinal_past_the_devices_is_refused() {
    match (probe(), Context::new(DeviceSpec::Cuda(Some(1000)))) {
        (_, Ok(ctx)) => panic!("opened CUDA device 1000: {ctx:?}"),
        (Err(pe), Err(e)) => assert_eq!(
            e,
            Error::Unavailable {
                backend: "cuda",
                reason: pe.to_string()
            }
        ),
        (Ok(p), Err(e)) => assert_eq!(
            e,
            Error::InvalidDevice {
                backend: "cuda",
                ordinal: 1000,
                count: p.devices.len()
            }
        ),
    }
}

/// With a GPU: every ordinal below the probe's count opens that device, by code and by
/// `cuda:N`; the count itself is `InvalidDevice` naming the count.
#[test]
fn every_probed_device_opens_and_the_next_ordinal_is_refused() {
    let p = match probe() {
        Ok(p) => p,
        Err(e) if !common::require_cuda() => {
            common::skipped(&format!(
                "no CUDA device: the per-device checks need one ({e})"
            ));
            return;
        }
        Err(e) => panic!("GPU_REQUIRE_CUDA=1 but the probe failed: {e}"),
    };
    let count = p.devices.len();
    for ordinal in 0..count {
        let by_text = format!("cuda:{ordinal}").parse::<DeviceSpec>();
        assert_eq!(by_text, Ok(DeviceSpec::Cuda(Some(ordinal))));
        match Context::new(DeviceSpec::Cuda(Some(ordinal))) {
            Ok(ctx) => assert_is_probed_device(&ctx, p, ordinal),
            Err(e) if !common::require_cuda() => {
                common::skipped(&format!("CUDA device {ordinal} is not usable: {e}"));
                return;
            }
            Err(e) => panic!("CUDA device {ordinal} of {count}: {e}"),
        }
    }
    let past = format!("cuda:{count}")
        .parse::<DeviceSpec>()
        .unwrap_or_else(|e| panic!("cuda:{count}: {e}"));
    assert_eq!(
        Context::new(past).err(),
        Some(Error::InvalidDevice {
            backend: "cuda",
            ordinal: count,
            count
        })
    );
}

#[test]
fn auto_always_opens_and_says_why_cuda_was_rejected() {
    let ctx = Context::new(DeviceSpec::Auto).expect("auto always finds a backend");
    let rejected = &ctx.selection().rejected;
    if ctx.backend_name() == "cuda" {
        assert!(rejected.is_empty(), "{rejected:?}");
        let p = probe().unwrap_or_else(|e| panic!("auto opened CUDA but the probe failed: {e}"));
        assert_is_probed_device(&ctx, p, 0);
        return;
    }
    assert!(
        !common::require_cuda(),
        "GPU_REQUIRE_CUDA=1 but auto chose the CPU: {rejected:?}"
    );
    common::assert_auto_without_cuda(&ctx);
    if let Err(pe) = probe() {
        assert_eq!(
            rejected[0].reason,
            Error::Unavailable {
                backend: "cuda",
                reason: pe.to_string()
            }
        );
    }
    // The context it fell back to works.
    let a = ctx.alloc_upload(&[1i32, 2, 3]).expect("upload");
    assert_eq!(a.download().expect("download"), [1, 2, 3]);
}
