//! The CUDA availability probe and how opening CUDA reports its answer, on any machine:
//! with a GPU the probe lists devices; without one it says why, and every way of asking
//! for CUDA gives that reason back. Nothing here sets environment variables.

use gpu::cuda::{probe, ProbeError};
use gpu::{Context, DeviceSpec, Error};

#[test]
fn the_probe_answers_with_data_and_the_same_answer_twice() {
    let first = probe();
    let second = probe();
    assert_eq!(first, second, "a second probe answered differently");
    match first {
        Ok(p) => {
            assert!(!p.devices.is_empty(), "a successful probe lists devices");
            assert!(p.driver_path.is_absolute(), "{}", p.driver_path.display());
            for (i, d) in p.devices.iter().enumerate() {
                assert_eq!(d.ordinal, i, "{d:?}");
                assert!(!d.name.is_empty(), "{d:?}");
                assert!(d.total_memory > 0, "{d:?}");
            }
            println!("CUDA driver {:?}: {:?}", p.driver_version_pair(), p.devices);
        }
        Err(e) => {
            let text = e.to_string();
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
}

#[test]
fn explicit_cuda_fails_with_the_probes_reason() {
    match (probe(), Context::new(DeviceSpec::Cuda(None))) {
        (Err(pe), Err(Error::Unavailable { backend, reason })) => {
            assert_eq!(backend, "cuda");
            assert_eq!(reason, pe.to_string());
        }
        (Err(pe), other) => panic!("the probe failed ({pe}), but opening CUDA gave {other:?}"),
        (Ok(_), Ok(ctx)) => {
            assert_eq!(ctx.backend_name(), "cuda");
            assert_eq!(ctx.device_id(), 0);
        }
        // The probe found a device but something else is missing (NVRTC, say).
        (Ok(_), Err(e)) => assert!(
            matches!(
                e,
                Error::Unavailable {
                    backend: "cuda",
                    ..
                }
            ),
            "{e:?}"
        ),
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

#[test]
fn auto_always_opens_and_says_why_cuda_was_rejected() {
    let ctx = Context::new(DeviceSpec::Auto).expect("auto always finds a backend");
    let rejected = &ctx.selection().rejected;
    if ctx.backend_name() == "cuda" {
        assert!(rejected.is_empty(), "{rejected:?}");
        assert!(probe().is_ok());
        return;
    }
    assert_eq!(ctx.backend_name(), "cpu");
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(rejected[0].backend, "cuda");
    assert!(!rejected[0].reason.to_string().is_empty());
    if let Err(pe) = probe() {
        assert_eq!(
            rejected[0].reason,
            Error::Unavailable {
                backend: "cuda",
                reason: pe.to_string()
            }
        );
    }
    // The CPU context it fell back to works.
    let a = ctx.alloc_upload(&[1i32, 2, 3]).expect("upload");
    assert_eq!(a.download().expect("download"), [1, 2, 3]);
}
