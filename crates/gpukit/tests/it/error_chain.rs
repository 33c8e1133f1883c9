//! Error chains print each fact once: a wrapper's message states its own fact (which batch,
//! which stage, where an error was deferred from) and leaves the cause to `source()`, so
//! walking the chain the way anyhow's `{:#}` does never repeats a message.
//!
//! Every error here is made through the public API on the CPU backend: a pipeline whose
//! compute stage fails with a length mismatch, one whose loader fails, an error deferred from
//! a stream dropped with a failed kernel, and a rejected upload.

use std::error::Error as StdError;

use gpukit::{Context, DeviceSpec, Error, KernelSpec, LaunchConfig, Out, Pattern, Pipeline};

/// The messages of `e` and its causes, outermost first.
fn levels(e: &(dyn StdError + 'static)) -> Vec<String> {
    let mut out = vec![e.to_string()];
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push(c.to_string());
        cause = c.source();
    }
    out
}

/// Asserts that no level of `e`'s chain restates a deeper level's message, that the chain
/// as anyhow's `{:#}` prints it holds `root` exactly once, and returns that text.
fn assert_each_fact_once(e: &(dyn StdError + 'static), root: &str) -> String {
    let levels = levels(e);
    for (i, outer) in levels.iter().enumerate() {
        for inner in &levels[i + 1..] {
            assert!(
                !outer.contains(inner.as_str()),
                "level {i} {outer:?} repeats its cause {inner:?} (chain {levels:?})"
            );
        }
    }
    let joined = levels.join(": ");
    assert_eq!(
        joined.matches(root).count(),
        1,
        "the root cause {root:?} should appear once in {joined:?}"
    );
    joined
}

fn cpu() -> Context {
    Context::new(DeviceSpec::Cpu(None)).expect("the CPU backend always opens")
}

#[test]
fn a_device_error_in_a_pipeline_stage_is_printed_once() {
    let ctx = cpu();
    let err = Pipeline::new(&ctx, Pattern::Triple)
        .batches(4)
        .max_rows(16)
        .input::<f32>(1)
        .output::<f32>(1)
        .run(
            |_i, buf| {
                buf.fill(1.0);
                Ok(buf.len())
            },
            // A real device error: the second operand is one element long.
            |s, _b, x, y| s.add(x, &x.slice(..1)?, y),
            |_b, _y| Ok(()),
        )
        .expect_err("the compute stage fails");
    let root = match StdError::source(&err).and_then(|s| s.downcast_ref::<Error>()) {
        Some(e @ Error::LengthMismatch { .. }) => e.to_string(),
        other => panic!("expected a LengthMismatch source, got {other:?} from {err:?}"),
    };
    let text = assert_each_fact_once(&err, &root);
    assert!(
        text.starts_with("batch 0: the compute stage failed: "),
        "{text}"
    );
}

#[test]
fn a_loader_error_is_printed_once() {
    let ctx = cpu();
    let err = Pipeline::new(&ctx, Pattern::Double)
        .batches(4)
        .max_rows(8)
        .input::<f32>(1)
        .output::<f32>(1)
        .run(
            |i, buf| {
                if i == 2 {
                    Err(std::io::Error::other("batch file 2 is truncated").into())
                } else {
                    Ok(buf.len())
                }
            },
            |s, _b, x, y| s.copy(x, y),
            |_b, _y| Ok(()),
        )
        .expect_err("the loader fails at batch 2");
    let text = assert_each_fact_once(&err, "batch file 2 is truncated");
    assert_eq!(
        text,
        "batch 2: the load stage failed: batch file 2 is truncated"
    );
}

#[test]
fn a_deferred_error_is_printed_once() {
    let ctx = cpu();
    let boom = KernelSpec::<(Out<f32>,)>::named("boom").cpu(|t, (out,)| {
        if t.x() == 1 {
            panic!("boom at thread 1");
        }
        out[t.x()] = 1.0;
    });
    let k = ctx.kernel(boom).expect("a CPU kernel loads");
    let s = ctx.create_stream().expect("a stream");
    let mut out = ctx.alloc_zeros::<f32>(4).expect("alloc");
    s.launch(&k, LaunchConfig::for_elems(4), (&mut out,))
        .expect("the launch is queued");
    drop(s);
    drop(out);
    let err = ctx.check().expect_err("the failed kernel is reported");
    assert!(matches!(err, Error::Deferred { .. }), "{err:?}");
    let root = err.root().to_string();
    assert!(root.contains("boom at thread 1"), "{root}");
    let text = assert_each_fact_once(&err, &root);
    assert!(text.starts_with("error deferred from "), "{text}");
    ctx.check().expect("reported once");
}

#[test]
fn a_rejected_upload_is_transparent() {
    let ctx = cpu();
    let mut dst = ctx.alloc_zeros::<f32>(4).expect("alloc");
    let host = ctx
        .alloc_host::<f32>(3, gpukit::HostUse::Upload)
        .expect("host buffer");
    let Err(rejected) = ctx.upload(host, &mut dst) else {
        panic!("3 elements into 4 must be refused");
    };
    let root = rejected.error.to_string();
    let text = assert_each_fact_once(&rejected, &root);
    assert_eq!(text, root, "Rejected adds nothing to its error's chain");
    // The buffer comes back untouched.
    assert_eq!(rejected.value.len(), 3);
}

#[test]
fn a_pipeline_error_inside_a_boxed_chain_is_printed_once() {
    // What a program's `main` sees after `?` into `Box<dyn Error>`.
    let ctx = cpu();
    let run = || -> Result<(), Box<dyn StdError>> {
        Pipeline::new(&ctx, Pattern::Sequential)
            .batches(2)
            .max_rows(4)
            .input::<f32>(1)
            .output::<f32>(1)
            .run(
                |_i, buf| Ok(buf.len()),
                |s, _b, x, y| s.add(x, &x.slice(..2)?, y),
                |_b, _y| Ok(()),
            )?;
        Ok(())
    };
    let err = run().expect_err("the compute stage fails");
    let levels = levels(err.as_ref());
    assert_eq!(levels.len(), 2, "{levels:?}");
    assert_each_fact_once(err.as_ref(), &levels[1]);
}
