//! The CUDA backend's error paths, driven by the CUDA emulator's fault injection
//! (`GPUKIT_CUDA_EMU_FAIL_ALLOC`, `_FAULT_KERNEL`, `_FAIL_COMPILE`, `_FAIL_CALL`): a refused
//! allocation, a kernel that faults, a compile that fails and a free the driver refuses each
//! reach the caller as a typed error naming the call, the poisoned context says why, and an
//! error from a `Drop` is kept for the next call.
//!
//! The emulator reads its fault injection once, at its first call, so each scenario runs in
//! a process of its own: the test runs this binary again for itself, with the variables
//! set. On a real GPU (nothing to inject) each prints `SKIPPED:`.

use gpukit::{Context, DeviceSpec, Error, KernelSpec, Out};

use crate::common;

/// Set in the child process that runs a scenario.
const CHILD: &str = "GPUKIT_TEST_CUDA_FAULTS_CHILD";

/// Runs `body` in a process of its own with `env` set, where the CUDA emulator is the
/// driver (`common::run_in_child`); asserts that it passed.
fn with_faults(test: &str, env: &[(&str, &str)], body: fn() -> gpukit::Result<()>) {
    if std::env::var_os(CHILD).is_some() {
        if let Err(e) = body() {
            panic!("{test}: {e}");
        }
        return;
    }
    let Some(ctx) = common::cuda() else { return };
    if !common::cuda_emulated(&ctx) {
        common::skipped("fault injection needs the CUDA emulator (cargo xtask cuda-emu)");
        return;
    }
    drop(ctx);
    common::run_in_child(module_path!(), test, CHILD, |cmd| {
        cmd.envs(env.iter().copied())
    });
}

fn cuda() -> gpukit::Result<Context> {
    Context::new(DeviceSpec::Cuda(None))
}

/// The `CUresult` name of the status behind `e`.
fn status_name(e: &Error) -> String {
    match e.root() {
        Error::Status { name, .. } => name.clone(),
        other => format!("not a status: {other:?}"),
    }
}

#[test]
fn allocations_the_driver_refuses_are_typed_errors() {
    with_faults(
        "allocations_the_driver_refuses_are_typed_errors",
        &[("GPUKIT_CUDA_EMU_FAIL_ALLOC", "1+"), ("GPU_POOL", "off")],
        || {
            // Every device allocation fails: opening the context, or the first array, is
            // a typed out-of-memory error, never a panic.
            let ctx = match cuda() {
                Ok(ctx) => ctx,
                Err(e) => {
                    assert!(
                        matches!(e.root(), Error::OutOfMemory { .. })
                            || status_name(&e) == "CUDA_ERROR_OUT_OF_MEMORY",
                        "{e:?}"
                    );
                    return Ok(());
                }
            };
            // (A context allocates nothing when it opens: streams have no scratch memory.)
            match ctx.alloc::<f32>(1 << 20) {
                Err(e @ Error::OutOfMemory { .. }) => {
                    assert!(e.to_string().contains("4194304 bytes requested"), "{e}");
                }
                other => panic!("expected OutOfMemory, got {other:?}"),
            }
            Ok(())
        },
    );
}

#[test]
fn a_faulting_kernel_poisons_the_context_and_says_why() {
    with_faults(
        "a_faulting_kernel_poisons_the_context_and_says_why",
        &[("GPUKIT_CUDA_EMU_FAULT_KERNEL", "binary_add")],
        || {
            let ctx = cuda()?;
            let a = ctx.alloc_upload(&[1.0f32; 64])?;
            let mut out = ctx.alloc_zeros::<f32>(64)?;
            ctx.add(&a, &a, &mut out)?; // queued: the fault comes when it runs
            let e = match ctx.sync() {
                Err(e) => e,
                Ok(()) => panic!("the injected fault was not reported"),
            };
            assert_eq!(status_name(&e), "CUDA_ERROR_ILLEGAL_ADDRESS", "{e:?}");
            // A sticky error: every later call says the context is unusable, and why.
            match ctx.alloc::<f32>(4) {
                Err(Error::Poisoned { first }) => {
                    assert_eq!(status_name(&first), "CUDA_ERROR_ILLEGAL_ADDRESS");
                }
                other => panic!("expected Poisoned, got {other:?}"),
            }
            Ok(())
        },
    );
}

#[test]
fn a_compile_that_fails_is_kernel_compile_and_the_context_goes_on() {
    with_faults(
        "a_compile_that_fails_is_kernel_compile_and_the_context_goes_on",
        &[("GPUKIT_CUDA_EMU_FAIL_COMPILE", "never_compiles_here")],
        || {
            let ctx = cuda()?;
            let src =
                r#"extern "C" __global__ void never_compiles_here(float *x) { x[0] = 1.0f; }"#;
            // SAFETY: never launched.
            let spec = unsafe { KernelSpec::<(Out<f32>,)>::cuda(src, "never_compiles_here") };
            match ctx.kernel(spec) {
                Err(Error::KernelCompile { kernel, .. }) => {
                    assert_eq!(kernel, "never_compiles_here");
                }
                other => panic!("expected KernelCompile, got {other:?}"),
            }
            // Nothing else is affected.
            let a = ctx.alloc_upload(&[2.0f32; 8])?;
            let mut out = ctx.alloc_zeros::<f32>(8)?;
            ctx.add(&a, &a, &mut out)?;
            assert_eq!(out.download()?, vec![4.0; 8]);
            Ok(())
        },
    );
}

#[test]
fn a_free_the_driver_refuses_is_kept_for_the_next_call() {
    with_faults(
        "a_free_the_driver_refuses_is_kept_for_the_next_call",
        &[
            (
                "GPUKIT_CUDA_EMU_FAIL_CALL",
                "cuMemFree_v2=CUDA_ERROR_INVALID_VALUE",
            ),
            ("GPU_POOL", "off"),
        ],
        || {
            let ctx = cuda()?;
            // An array with work queued on it: its free waits for the work, and fails
            // later. One that no stream used: freed (and refused) inside Drop, which cannot
            // return the error.
            let queued = ctx.alloc_upload(&[1.0f32; 256])?;
            let unused = ctx.alloc::<f32>(256)?;
            for (what, a) in [("queued work", queued), ("no use", unused)] {
                drop(a);
                let e = match ctx.sync() {
                    Err(e) => e,
                    Ok(()) => panic!("the refused free of an array with {what} was lost"),
                };
                // Returned by the call after the one that freed the memory: the drop's
                // own, deferred, or the sync's, which frees what waited for the work.
                match e.root() {
                    Error::Status { call, name, .. } => {
                        assert_eq!(
                            (*call, name.as_str()),
                            ("cuMemFree", "CUDA_ERROR_INVALID_VALUE"),
                            "{what}"
                        );
                    }
                    other => panic!("expected cuMemFree's status ({what}), got {other:?}"),
                }
                // Reported once: the context goes on.
                ctx.sync()?;
            }
            Ok(())
        },
    );
}
