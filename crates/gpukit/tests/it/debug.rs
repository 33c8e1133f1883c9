//! `Debug` of every handle shows the facts it promises (lengths, element types, context
//! and stream ids, states) and never waits for the device; arrays show no values, and
//! `peek` downloads the first few.

use crate::{backend_tests, common};

use gpukit::{Error, HostUse, LaunchConfig, Pattern, Pipeline};

use common::{delay_spec, vector_add_spec};

/// Asserts that `text` contains each of `parts`.
#[track_caller]
fn assert_shows(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "{text:?} does not show {part:?}");
    }
}

backend_tests! {
    fn debug_shows_lengths_dtypes_and_ids(ctx) {
        let in_ctx = format!("context: {}", ctx.id());
        let device = format!("device: {}:{}", ctx.backend_name(), ctx.device_id());
        let mut a = ctx.alloc_upload(&[1.0f32, 2.0, 3.0, 4.0, 5.0])?;
        let text = format!("{a:?}");
        assert_shows(&text, &["GpuArray", "dtype: f32", "len: 5", &in_ctx, &device]);
        assert!(!text.contains("1.0"), "an array's Debug shows no values: {text}");
        let text = format!("{:?}", a.slice(1..3)?);
        assert_shows(&text, &["GpuView", "dtype: f32", "len: 2", "offset: 1", &in_ctx, &device]);
        let text = format!("{:?}", a.slice_mut(2..)?);
        assert_shows(&text, &["GpuViewMut", "dtype: f32", "len: 3", "offset: 2", &in_ctx]);
        let b = ctx.alloc_zeros::<u8>(7)?;
        assert_shows(&format!("{b:?}"), &["dtype: u8", "len: 7", &in_ctx]);

        assert_shows(&format!("{ctx:?}"), &["Context", &format!("id: {}", ctx.id()), ctx.backend_name()]);
        assert_shows(&format!("{:?}", **ctx), &["Context", &format!("id: {}", ctx.id())]);
        let s = ctx.create_stream()?;
        assert_shows(&format!("{s:?}"), &["Stream", &format!("id: {}", s.id()), &in_ctx]);
        assert_shows(&format!("{:?}", s.record_event()?), &["Event", &format!("stream: {}", s.id())]);
        assert!(format!("{:?}", ctx.backend()).contains("Backend"));

        let mut host = ctx.alloc_host::<f32>(5, HostUse::Upload)?;
        assert_shows(&format!("{host:?}"), &["HostBuffer", "dtype: f32", "len: 5", &in_ctx]);
        host.copy_from_slice(&[9.0; 5]);
        let pending = s.upload(host, &mut a)?;
        let text = format!("{pending:?}");
        assert_shows(&text, &["Pending", &format!("stream: {}", s.id()), &in_ctx, "done: Some("]);
        pending.wait()?;

        let spec = vector_add_spec();
        let text = format!("{spec:?}");
        assert_shows(&text, &["KernelSpec", "name: \"vector_add\"", "params: 4", "source: Some(\"cuda\")", "wgsl: true", "cpu: true"]);
        assert!(!text.contains("__global__"), "a KernelSpec's Debug shows no source: {text}");
        assert_shows(&format!("{:?}", ctx.kernel(spec)?), &["Kernel", "vector_add", &in_ctx]);

        let pipeline = Pipeline::new(ctx, Pattern::Double).batches(3).max_rows(4).input::<f32>(1).output::<(f32, u32)>([1, 2]);
        let text = format!("{pipeline:?}");
        assert_shows(&text, &["Pipeline", &in_ctx, "pattern: double", "batches: 3", "max_rows: 4", "input: \"f32\"", "input_widths: [1]", "output: \"(f32, u32)\"", "output_widths: [1, 2]"]);
        // Formatting a pipeline while it runs (here from its own sink) shows its progress.
        let mut during = Vec::new();
        let run = pipeline.run(
            |_i, buf| {
                buf.fill(1.0);
                Ok(2)
            },
            |s, _b, x, (y, labels)| {
                s.copy(x, y)?;
                s.fill(labels, 7)
            },
            |_b, _y| {
                during.push(format!("{pipeline:?}"));
                Ok(())
            },
        );
        if let Err(e) = run {
            panic!("the pipeline failed: {}", gpukit::error_chain(&e));
        }
        assert_eq!(during.len(), 3);
        assert_shows(&during[0], &["progress: ProgressSnapshot", "total: 3", "finished: false"]);
        Ok(())
    }

    fn debug_does_not_wait_for_queued_work(ctx) {
        // Two seconds of device time queued before a write to `a` and a download of it:
        // formatting everything involved must return long before.
        let delay = ctx.kernel(delay_spec())?;
        let s = ctx.create_stream()?;
        let mut a = ctx.alloc_zeros::<f32>(1024)?;
        s.launch(&delay, LaunchConfig::linear(1, 1), (2_000_000u32,))?;
        s.fill(&mut a, 1.0)?;
        let back = ctx.alloc_host::<f32>(1024, HostUse::Download)?;
        let pending = s.download(&a, back)?;
        let texts = [
            format!("{a:?}"),
            format!("{:?}", a.slice(..8)?),
            format!("{s:?}"),
            format!("{ctx:?}"),
            format!("{:?}", ctx.backend()),
            format!("{pending:?}"),
        ];
        assert!(!s.query()?, "the delay finished before Debug returned: Debug waited for it");
        assert_shows(&texts[0], &["len: 1024"]);
        assert_shows(&texts[5], &["done: Some(false)"]);
        let back = pending.wait()?;
        assert!(back.iter().all(|&v| v == 1.0));
        Ok(())
    }

    fn peek_downloads_the_first_n_elements(ctx) {
        let data: Vec<i32> = (0..10).collect();
        let a = ctx.alloc_upload(&data)?;
        let all = a.download()?;
        for n in [0, 1, 3, 9, 10] {
            assert_eq!(ctx.peek(&a, n)?, all[..n], "n = {n}");
        }
        // More than the length is clamped to it.
        assert_eq!(ctx.peek(&a, 11)?, all);
        assert_eq!(ctx.peek(&a, usize::MAX)?, all);
        // Views start at their offset; mutable views too.
        let v = a.slice(4..7)?;
        assert_eq!(ctx.peek(&v, 2)?, [4, 5]);
        assert_eq!(ctx.peek(&v, 5)?, [4, 5, 6]);
        let mut b = ctx.alloc_upload(&data)?;
        assert_eq!(ctx.peek(&b.slice_mut(8..)?, 4)?, [8, 9]);
        assert_eq!(ctx.peek(&ctx.alloc_zeros::<f32>(0)?, 4)?, Vec::<f32>::new());

        // Like a download, it waits for writes queued on another stream.
        let delay = ctx.kernel(delay_spec())?;
        let s = ctx.create_stream()?;
        s.launch(&delay, LaunchConfig::linear(1, 1), (20_000u32,))?;
        s.fill(&mut b, 7)?;
        assert_eq!(ctx.peek(&b, 3)?, [7, 7, 7]);

        // Another context's array is rejected, as by every call.
        let other = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
        let theirs = other.alloc_upload(&data)?;
        assert!(matches!(ctx.peek(&theirs, 2), Err(Error::ContextMismatch { op: "peek", .. })));
        Ok(())
    }
}
