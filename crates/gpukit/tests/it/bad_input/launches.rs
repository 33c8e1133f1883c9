//! Kernels and launches: stream priorities and launch configurations outside the limits,
//! kernels without code for the backend or whose source does not compile, and a CPU kernel
//! that fails.

use super::*;

/// CUDA C that does not compile: a syntax error.
const BROKEN_SRC: &str = r#"
extern "C" __global__ void broken(float* out) {
    out[threadIdx.x] = 1.0f +;
}"#;

/// `BROKEN_SRC` in WGSL: a syntax error (fixed by removing `+`).
const BROKEN_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(4)
fn broken(@builtin(local_invocation_id) t: vec3<u32>) {
    out[t.x] = 1.0 +;
}"#;

/// WGSL that parses but does not validate (a float where a `u32` is declared).
const ILL_TYPED_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(4)
fn broken(@builtin(local_invocation_id) t: vec3<u32>) {
    let i: u32 = 1.5;
    out[t.x] = 1.0;
}"#;

/// The one element kernel closure every spec below shares on the CPU: `out[i] = 1`.
fn ones_spec(spec: KernelSpec<(Out<f32>,)>) -> KernelSpec<(Out<f32>,)> {
    spec.cpu(|t, (out,)| out[t.x()] = 1.0)
}

backend_tests! {
    fn stream_priority_outside_the_range_is_rejected(ctx) {
        let (least, greatest) = ctx.info().priority_range;
        for p in [least + 1, greatest - 1, i32::MIN, i32::MAX] {
            let r = ctx.create_stream_with_priority(p);
            match r {
                Err(Error::InvalidPriority { priority, greatest: g, least: l }) => {
                    assert_eq!((priority, g, l), (p, greatest, least));
                }
                Err(e) => panic!("priority {p}: expected InvalidPriority, got {e:?}"),
                Ok(s) => panic!("priority {p} was accepted: {s:?}"),
            }
        }
        assert_eq!(ctx.create_stream_with_priority(greatest)?.priority(), greatest);
        assert_eq!(ctx.create_stream_with_priority(least)?.priority(), least);
        Ok(())
    }

    fn launch_configurations_over_the_limits_are_rejected(ctx) {
        let k = ctx.kernel(vector_add_spec())?;
        let lim = ctx.info().limits;
        let n = 16;
        let a = ctx.alloc_upload(&vec![1.0f32; n])?;
        let mut out = ctx.alloc_upload(&vec![-1.0f32; n])?;
        let ok = LaunchConfig::for_elems(n);
        let over = |v: u32| v.saturating_add(1);
        let with = |f: &dyn Fn(&mut LaunchConfig)| {
            let mut c = ok;
            f(&mut c);
            c
        };
        let mut cases = vec![
            ("grid.x = 0", with(&|c| c.grid[0] = 0)),
            ("grid.y = 0", with(&|c| c.grid[1] = 0)),
            ("grid.z = 0", with(&|c| c.grid[2] = 0)),
            ("block.x = 0", with(&|c| c.block[0] = 0)),
            ("block.y = 0", with(&|c| c.block[1] = 0)),
            ("block.z = 0", with(&|c| c.block[2] = 0)),
            ("too many threads per block", with(&|c| c.block = [32, 64, 1])),
            ("block.x over", with(&|c| c.block = [over(lim.max_block_dim[0]), 1, 1])),
            ("block.z over", with(&|c| c.block = [1, 1, over(lim.max_block_dim[2])])),
            ("grid.y over", with(&|c| c.grid = [1, over(lim.max_grid_dim[1]), 1])),
            ("grid.z over", with(&|c| c.grid = [1, 1, over(lim.max_grid_dim[2])])),
            ("shared memory over", with(&|c| c.shared_mem_bytes = over(lim.max_shared_mem_per_block))),
            ("for_elems(usize::MAX)", LaunchConfig::for_elems(usize::MAX)),
        ];
        if lim.max_grid_dim[0] < u32::MAX {
            cases.push(("grid.x over", with(&|c| c.grid[0] = lim.max_grid_dim[0] + 1)));
        }
        if ctx.backend_name() == "cpu" {
            // The limits CUDA devices share, named as the SPEC does.
            cases.push(("1025 threads", with(&|c| c.block = [1025, 1, 1])));
            cases.push(("block.z = 65", with(&|c| c.block = [1, 1, 65])));
            cases.push(("grid.y = 65536", with(&|c| c.grid = [1, 65536, 1])));
            cases.push(("49153 bytes shared", with(&|c| c.shared_mem_bytes = 48 * 1024 + 1)));
        }
        for (what, cfg) in cases {
            assert_invalid_launch(ctx.launch(&k, cfg, (&a, &a, &mut out, n as u64)), what);
        }
        ctx.sync()?;
        assert_eq!(out.download()?, vec![-1.0; n], "a rejected launch wrote its output");

        // Exactly at the limits is accepted and runs.
        let at_limits = [
            LaunchConfig::linear(1, lim.max_threads_per_block),
            LaunchConfig { grid: [1, 1, 1], block: [1, 1, lim.max_block_dim[2]], shared_mem_bytes: lim.max_shared_mem_per_block },
        ];
        for cfg in at_limits {
            ctx.fill(&mut out, 0.0)?;
            ctx.launch(&k, cfg, (&a, &a, &mut out, n as u64))?;
            // `vector_add` indexes by x alone, as on a GPU: the x extent of the launch is
            // written, and threads further along y or z write the same elements again.
            let x_extent = (cfg.grid[0] * cfg.block[0]) as usize;
            let want: Vec<f32> = (0..n).map(|i| if i < x_extent { 2.0 } else { 0.0 }).collect();
            assert_eq!(out.download()?, want, "{cfg:?}");
        }
        Ok(())
    }

    fn kernel_without_code_for_the_backend_is_unavailable(ctx) {
        // A spec with only CUDA C cannot load on the CPU, and one with only a CPU closure
        // cannot load on CUDA: either way the error names the kernel and the backend.
        let backend = ctx.backend_name();
        let r = if backend == "cpu" {
            // SAFETY: never launched (it cannot load here); the signature matches anyway.
            ctx.kernel(unsafe { KernelSpec::<VectorAdd>::cuda(VECTOR_ADD_SRC, "vector_add") })
        } else {
            ctx.kernel(KernelSpec::<VectorAdd>::named("vector_add").cpu(|t, (a, b, out, n)| {
                let i = t.x();
                if (i as u64) < *n {
                    out[i] = a[i] + b[i];
                }
            }))
        };
        match r {
            Err(Error::KernelUnavailable { kernel, backend: b, hint }) => {
                assert_eq!((kernel.as_str(), b), ("vector_add", backend));
                assert!(!hint.is_empty());
            }
            Err(e) => panic!("expected KernelUnavailable, got {e:?}"),
            Ok(k) => panic!("a kernel without {backend} code loaded: {k:?}"),
        }
        // A spec with no code at all is unavailable everywhere.
        let r = ctx.kernel(KernelSpec::<(Out<u8>,)>::named("nothing"));
        assert!(
            matches!(&r, Err(Error::KernelUnavailable { kernel, .. }) if kernel == "nothing"),
            "{r:?}"
        );
        Ok(())
    }

    fn kernel_source_that_does_not_compile_is_kernel_compile(ctx) {
        // CUDA compiles the source (NVRTC) or loads the PTX: bad code is KernelCompile with
        // the compiler's log. The CPU backend never compiles CUDA C or PTX: the same specs
        // with a CPU closure load and run there, which this checks instead.
        // SAFETY: none of these loads on CUDA, so none runs there; the CPU runs the closure.
        let specs = unsafe {
            [
                ("syntax error", ones_spec(KernelSpec::cuda(BROKEN_SRC, "broken").wgsl(BROKEN_WGSL))),
                ("no such entry point", ones_spec(KernelSpec::cuda(BROKEN_SRC.replace("+;", ";"), "missing").wgsl(BROKEN_WGSL.replace("+;", ";")))),
                ("malformed PTX, ill-typed WGSL", ones_spec(KernelSpec::ptx("this is not PTX", "broken").wgsl(ILL_TYPED_WGSL))),
            ]
        };
        let mut out = ctx.alloc_upload(&[-1.0f32; 4])?;
        for (what, spec) in specs {
            let name = spec.desc().name.clone();
            let r = ctx.kernel(spec);
            if ctx.backend_name() == "cpu" {
                let k = r.unwrap_or_else(|e| panic!("{what}: the CPU closure should load: {e:?}"));
                ctx.launch(&k, LaunchConfig::linear(1, 4), (&mut out,))?;
                assert_eq!(out.download()?, [1.0; 4], "{what}");
                ctx.fill(&mut out, -1.0)?;
                continue;
            }
            match r {
                Err(Error::KernelCompile { kernel, log }) => {
                    assert_eq!(kernel, name, "{what}");
                    assert!(!log.is_empty(), "{what}: an empty compiler log");
                }
                Err(e) => panic!("{what}: expected KernelCompile, got {e:?}"),
                Ok(k) => panic!("{what}: the kernel loaded: {k:?}"),
            }
        }
        // The context is still usable and nothing was written.
        assert_eq!(out.download()?, [-1.0; 4]);
        // SAFETY: the fixed `broken(float* out)` writes `out[threadIdx.x]`, one `Out<f32>`
        // of 4 elements launched with 4 threads.
        let fixed = unsafe {
            KernelSpec::cuda(BROKEN_SRC.replace("+;", ";"), "broken").wgsl(BROKEN_WGSL.replace("+;", ";"))
        };
        let k = ctx.kernel(ones_spec(fixed))?;
        ctx.launch(&k, LaunchConfig::linear(1, 4), (&mut out,))?;
        assert_eq!(out.download()?, [1.0; 4]);
        Ok(())
    }
}

cpu_tests! {
    fn a_failing_cpu_kernel_is_kernel_failed_and_does_not_poison(ctx) {
        // The CPU backend has no poisoned state: a panicking closure is KernelFailed at the
        // next sync and the context stays usable. A faulting CUDA kernel poisons the context
        // instead: tests/cuda_poison.rs, its own process.
        let k = ctx.kernel(KernelSpec::<(Out<f32>,)>::named("explodes").cpu(|t, (out,)| {
            let i = t.x();
            if i == 2 {
                panic!("kernel closure panicked on purpose (bad_input test)");
            }
            out[i] = 1.0;
        }))?;
        let mut out = ctx.alloc_upload(&[-1.0f32; 4])?;
        // The launch is queued and succeeds; the failure comes back from the next sync.
        ctx.launch(&k, LaunchConfig::linear(1, 4), (&mut out,))?;
        match ctx.sync() {
            Err(e) => assert!(
                matches!(e.root(), Error::KernelFailed { kernel, message } if kernel == "explodes" && message.contains("on purpose")),
                "expected KernelFailed, got {e:?}"
            ),
            Ok(()) => panic!("a panicking kernel was not reported"),
        }
        // Reported once, and the context works: no Poisoned.
        ctx.sync()?;
        let a = ctx.alloc_upload(&[1.0f32, 2.0])?;
        assert_eq!(ctx.sum(&a)?, 3.0);
        ctx.fill(&mut out, 5.0)?;
        assert_eq!(out.download()?, [5.0; 4]);
        Ok(())
    }
}
