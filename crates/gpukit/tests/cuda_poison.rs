//! A kernel that faults poisons its CUDA context.
//!
//! A sticky CUDA error (an illegal address, here) breaks the device's primary context for
//! the whole process: every later driver call on it fails until the process ends. So this
//! test is its own test binary, its own process, and the only test in it. Without a usable
//! CUDA device it prints `SKIPPED: <reason>` and returns; without the `cuda` feature there
//! is nothing to test.
#![cfg(feature = "cuda")]

#[path = "common/mod.rs"]
mod common;

use gpukit::{Context, DeviceSpec, Error, KernelSpec, LaunchConfig, Out};

/// Writes one float 1 TiB past the array it is given: far outside any allocation.
const WILD_SRC: &str = r#"
extern "C" __global__ void wild(float* p) {
    p[(1ull << 40) / 4] = 1.0f;
}"#;

/// The poison's first error, in words, or a failure naming `what` when `r` is not
/// `Poisoned` (also behind `Deferred`: an error raised in a `Drop` after the fault is
/// returned by the next call). The first error keeps the driver's code as data.
fn poisoned<T>(what: &str, r: gpukit::Result<T>) -> String {
    let mut e = match r {
        Err(e) => e,
        Ok(_) => panic!("{what}: succeeded on a poisoned context"),
    };
    loop {
        match e {
            Error::Deferred { source, .. } => e = *source,
            Error::Poisoned { first } => {
                assert!(
                    matches!(*first, Error::Status { api: "cuda-driver", code, .. } if code != 0),
                    "{what}: the first error is not a driver status: {first:?}"
                );
                return first.to_string();
            }
            other => panic!("{what}: expected Poisoned, got {other:?} ({other})"),
        }
    }
}

#[test]
fn a_wild_write_poisons_the_context() {
    let Some(ctx) = common::cuda() else { return };
    let k = ctx
        // SAFETY: this kernel breaks its promise on purpose (a write far outside any
        // allocation) to show that the fault poisons the context and nothing else; it runs in
        // its own test process.
        .kernel(unsafe { KernelSpec::<(Out<f32>,)>::cuda(WILD_SRC, "wild") })
        .expect("the wild kernel compiles");
    let mut a = ctx.alloc_zeros::<f32>(16).expect("alloc before the fault");
    let b = ctx.alloc_zeros::<f32>(16).expect("alloc before the fault");

    // The launch is asynchronous: it is queued, and the fault surfaces at the next sync.
    // (Should the driver already know, the launch itself must say Poisoned.)
    let launched = ctx.launch(&k, LaunchConfig::linear(1, 1), (&mut a,));
    let first = poisoned("the sync after the faulting kernel", ctx.sync());
    if launched.is_err() {
        poisoned("the faulting launch", launched);
    }
    assert!(!first.is_empty());
    println!("poisoned by: {first}");

    // Every later call fails the same way, naming the first error.
    let later = [
        ("alloc", poisoned("alloc", ctx.alloc::<f32>(4))),
        ("upload", poisoned("upload", a.upload(&[1.0; 16]))),
        ("download", poisoned("download", b.download())),
        ("add", poisoned("add", ctx.add(&b, &b, &mut a))),
        ("sync", poisoned("sync", ctx.sync())),
        ("sync again", poisoned("sync again", ctx.sync())),
        (
            "create_stream",
            poisoned("create_stream", ctx.create_stream()),
        ),
    ];
    for (what, origin) in later {
        assert_eq!(origin, first, "{what} names another origin");
    }

    // A new context on the same device would share the broken primary context: the
    // poison is per device and process, so opening one fails with the same origin.
    let fresh = poisoned(
        "a new context after the fault",
        Context::new(DeviceSpec::Cuda(Some(ctx.device_id()))),
    );
    assert_eq!(fresh, first, "a new context names another origin");
}
