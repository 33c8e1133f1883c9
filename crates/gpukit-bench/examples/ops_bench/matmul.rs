//! gemm: ours against matrixmultiply (one thread and its pool), the `gemm` crate and
//! numpy's BLAS, every product checked against the reference (see the program's docs).

use super::numpy::{describe_blas, numpy_gemm, NumpyError};
use super::*;

/// Runs per gemm size.
pub(super) fn gemm_runs(n: usize, quick: bool) -> usize {
    match (n, quick) {
        (..=256, false) => 31,
        (..=512, false) => 15,
        (..=1024, false) => 9,
        (_, false) => 5,
        (..=256, true) => 15,
        (..=512, true) => 9,
        (_, true) => 5,
    }
}

fn gemm_sizes(quick: bool) -> &'static [usize] {
    if quick {
        &GEMM_SIZES[..3]
    } else {
        &GEMM_SIZES[..]
    }
}

/// Whether a gemm's relative error is within [`GEMM_TOL`] (a NaN is not).
pub(super) fn within_tol(err: f64) -> bool {
    err <= GEMM_TOL
}

/// One size's inputs and the CPU backend's product of them.
pub(super) struct GemmInput {
    pub(super) n: usize,
    pub(super) a: Vec<f32>,
    pub(super) b: Vec<f32>,
    pub(super) reference: Vec<f32>,
}

/// `max |x - ref| / max |ref|`.
pub(super) fn rel_err(x: &[f32], reference: &[f32]) -> f64 {
    let scale = reference
        .iter()
        .fold(0.0f64, |m, &v| m.max(f64::from(v).abs()));
    let err = x.iter().zip(reference).fold(0.0f64, |m, (&a, &b)| {
        m.max((f64::from(a) - f64::from(b)).abs())
    });
    if x.len() != reference.len() {
        return f64::INFINITY;
    }
    err / scale.max(f64::MIN_POSITIVE)
}

/// `max |c - exact| / max |exact|` over 64 sampled entries of the `n x n` product `c = a b`,
/// the exact values from f64 dot products.
fn sampled_rel_err(a: &[f32], b: &[f32], c: &[f32], n: usize) -> f64 {
    let (mut err, mut scale) = (0.0f64, 0.0f64);
    for t in 0..64usize {
        let i = (t * 7919 + 13) % n;
        let j = (t * 104_729 + 31) % n;
        let exact: f64 = (0..n)
            .map(|k| f64::from(a[i * n + k]) * f64::from(b[k * n + j]))
            .sum();
        err = err.max((f64::from(c[i * n + j]) - exact).abs());
        scale = scale.max(exact.abs());
    }
    err / scale.max(f64::MIN_POSITIVE)
}

/// `c = a b` for `n x n` row-major matrices through `matrixmultiply::sgemm`.
fn mm_sgemm(n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    assert!(a.len() == n * n && b.len() == n * n && c.len() == n * n);
    let ld = n as isize;
    // SAFETY: the three slices hold n*n f32s (checked above), row-major with row stride n
    // and column stride 1, so every index sgemm forms is inside them; `c` is exclusive.
    unsafe {
        matrixmultiply::sgemm(
            n,
            n,
            n,
            1.0,
            a.as_ptr(),
            ld,
            1,
            b.as_ptr(),
            ld,
            1,
            0.0,
            c.as_mut_ptr(),
            ld,
            1,
        );
    }
}

/// `c = a b` for `n x n` row-major matrices through the `gemm` crate.
fn gemm_crate(n: usize, a: &[f32], b: &[f32], c: &mut [f32], par: gemm::Parallelism) {
    assert!(a.len() == n * n && b.len() == n * n && c.len() == n * n);
    let ld = n as isize;
    // SAFETY: the three slices hold n*n f32s (checked above), row-major (row stride n,
    // column stride 1), so every index gemm forms is inside them; `c` is exclusive and not
    // read (`read_dst` false): c = 1 * a b.
    unsafe {
        gemm::gemm(
            n,
            n,
            n,
            c.as_mut_ptr(),
            1,
            ld,
            false,
            a.as_ptr(),
            1,
            ld,
            b.as_ptr(),
            1,
            ld,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
}

/// The threads of rayon's global pool: `RAYON_NUM_THREADS`, else one per logical core.
fn rayon_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&t| t > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The threads of matrixmultiply's pool: 1 without the `threading` feature, else
/// `MATMUL_NUM_THREADS` or one per physical core (as matrixmultiply chooses).
fn matrixmultiply_threads() -> usize {
    #[cfg(feature = "matrixmultiply-threading")]
    {
        std::env::var("MATMUL_NUM_THREADS")
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| v.parse::<usize>().unwrap_or(1))
            .unwrap_or_else(num_cpus::get_physical)
            .clamp(1, 4)
    }
    #[cfg(not(feature = "matrixmultiply-threading"))]
    {
        1
    }
}

pub(super) fn gemm_section(ctx: &Context, args: &Args, records: &mut Vec<Record>) -> Res {
    let sizes = gemm_sizes(args.quick);
    let threaded_mm = cfg!(feature = "matrixmultiply-threading");
    let mm_threads = matrixmultiply_threads();
    println!(
        "\ngemm: square f32, C = A B, GFLOP/s = 2 n^3 / median seconds (runs: {})",
        sizes
            .iter()
            .map(|&n| format!("{} at {n}", gemm_runs(n, args.quick)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // The reference: the CPU backend, whatever device is measured.
    let cpu_owned;
    let cpu: &Context = if ctx.backend_name() == "cpu" {
        ctx
    } else {
        cpu_owned = Context::new(DeviceSpec::Cpu(None))?;
        &cpu_owned
    };
    let ours_label = if ctx.backend_name() == "cpu" {
        // f32 from 288^3 multiply-adds on an AVX-512 CPU: gpukit-cpu's own kernel on
        // rayon's pool; the rest through matrixmultiply.
        let small = if threaded_mm {
            format!("matrixmultiply threading, {mm_threads} threads")
        } else {
            "matrixmultiply".to_owned()
        };
        format!("ours (cpu: AVX-512 kernel from 288^3, else {small})")
    } else {
        format!("ours ({}: {})", ctx.backend_name(), ctx.info().name)
    };
    let mut rows = vec![
        GemmRow {
            key: "ours",
            label: ours_label,
            device: ctx.backend_name().to_owned(),
            threads: (ctx.backend_name() == "cpu").then_some(mm_threads),
            results: Vec::new(),
        },
        GemmRow {
            key: if threaded_mm {
                "matrixmultiply_threading"
            } else {
                "matrixmultiply"
            },
            label: if threaded_mm {
                format!("matrixmultiply::sgemm, threading ({mm_threads} threads)")
            } else {
                "matrixmultiply::sgemm (1 thread)".to_owned()
            },
            device: "host".to_owned(),
            threads: Some(mm_threads),
            results: Vec::new(),
        },
        GemmRow {
            key: "gemm_rayon",
            label: format!("gemm crate, Rayon(0) ({} threads)", rayon_threads()),
            device: "host".to_owned(),
            threads: Some(rayon_threads()),
            results: Vec::new(),
        },
        GemmRow {
            key: "gemm_none",
            label: "gemm crate, Parallelism::None".to_owned(),
            device: "host".to_owned(),
            threads: Some(1),
            results: Vec::new(),
        },
    ];
    let mut inputs = Vec::new();
    for &n in sizes {
        let runs = gemm_runs(n, args.quick);
        let (ha, hb) = (input(n * n, 10 + n as u64), input(n * n, 20 + n as u64));

        // The CPU backend's product: the reference, itself checked against f64.
        let (ca, cb) = (cpu.alloc_upload(&ha)?, cpu.alloc_upload(&hb)?);
        let mut cc = cpu.alloc_zeros::<f32>(n * n)?;
        cpu.gemm(Gemm::new(n, n, n), &ca, &cb, &mut cc)?;
        cpu.sync()?;
        let reference = cc.download()?;
        drop((ca, cb, cc));
        let ref_err = sampled_rel_err(&ha, &hb, &reference, n);
        if !within_tol(ref_err) {
            return Err(format!(
                "the CPU backend's gemm at n = {n} is off by {ref_err:.2e} from f64 dot products"
            )
            .into());
        }

        let check = |what: &str, got: &[f32]| -> Res<f64> {
            let err = rel_err(got, &reference);
            if !within_tol(err) {
                return Err(format!("{what} at n = {n}: relative error {err:.2e} > {GEMM_TOL:.0e} against the CPU backend").into());
            }
            Ok(err)
        };

        // Ours on the device measured.
        let (da, db) = (ctx.alloc_upload(&ha)?, ctx.alloc_upload(&hb)?);
        let mut dc = ctx.alloc_zeros::<f32>(n * n)?;
        let t = median_or_nan(samples(runs, || {
            ctx.gemm(Gemm::new(n, n, n), &da, &db, &mut dc)?;
            ctx.sync()
        })?);
        // On the CPU this is the reference's own computation: the check proves the timed
        // runs wrote the product; the reference itself was checked against f64 above.
        let err = check(&rows[0].label, &dc.download()?)?;
        drop((da, db, dc));
        rows[0].results.push(GemmResult {
            n,
            runs,
            seconds: t,
            max_rel_err: err,
            checked_against: "cpu backend",
        });

        let mut hc = vec![0.0f32; n * n];
        // Rows 1 to 3: matrixmultiply, then the gemm crate on rayon and on one thread.
        for (row, par) in [
            (1, None),
            (2, Some(gemm::Parallelism::Rayon(0))),
            (3, Some(gemm::Parallelism::None)),
        ] {
            hc.fill(0.0);
            let t = median_or_nan(samples::<std::convert::Infallible>(runs, || {
                let c = std::hint::black_box(&mut hc);
                match par {
                    None => mm_sgemm(n, &ha, &hb, c),
                    Some(par) => gemm_crate(n, &ha, &hb, c, par),
                }
                Ok(())
            })?);
            let err = check(&rows[row].label, &hc)?;
            rows[row].results.push(GemmResult {
                n,
                runs,
                seconds: t,
                max_rel_err: err,
                checked_against: "cpu backend",
            });
        }
        inputs.push(GemmInput {
            n,
            a: ha,
            b: hb,
            reference,
        });
    }

    if threaded_mm {
        match matrixmultiply_single_in_child(args.quick) {
            Ok(results) => rows.insert(
                2,
                GemmRow {
                    key: "matrixmultiply",
                    label: "matrixmultiply::sgemm (1 thread, child)".to_owned(),
                    device: "host".to_owned(),
                    threads: Some(1),
                    results,
                },
            ),
            Err(e) => println!("matrixmultiply, 1 thread: not measured ({e})"),
        }
    } else {
        println!(
            "matrixmultiply threading: not measured in this build (built without the default \
             `matrixmultiply-threading` feature)"
        );
    }

    if args.numpy {
        match numpy_gemm(&args.python, &inputs, args.quick) {
            Ok((info, row, torch)) => {
                println!("numpy: {}", describe_blas(&info));
                records.push(Record::Numpy {
                    available: true,
                    reason: None,
                    info,
                });
                rows.push(row);
                match torch {
                    Ok(row) => rows.push(row),
                    Err(why) => println!("torch: not available ({why})"),
                }
            }
            Err(NumpyError::Unavailable(reason)) => {
                println!("numpy: not available ({reason})");
                records.push(Record::Numpy {
                    available: false,
                    reason: Some(reason),
                    info: Value::Null,
                });
            }
            Err(NumpyError::Failed(e)) => return Err(e),
        }
    } else {
        println!("numpy: not measured (--no-numpy)");
    }

    print_gemm_table(sizes, &rows);
    let seconds_of = |key: &str, n: usize| {
        rows.iter()
            .find(|r| r.key == key)
            .and_then(|row| row.results.iter().find(|x| x.n == n))
            .map(|x| x.seconds)
    };
    for row in &rows {
        for r in &row.results {
            let numpy = seconds_of("numpy", r.n);
            let vs_numpy = numpy.map_or(f64::NAN, |t| t / r.seconds);
            records.push(Record::Gemm {
                key: row.key,
                implementation: row.label.clone(),
                device: row.device.clone(),
                threads: row.threads,
                n: r.n,
                runs: r.runs,
                seconds: r.seconds,
                gflops: r.gflops(),
                ratio_vs_numpy: vs_numpy,
                foreign: Foreign::new(r.seconds, numpy, seconds_of("torch", r.n)),
                max_rel_err: r.max_rel_err,
                checked_against: r.checked_against,
            });
        }
    }
    print_fastest(sizes, &rows);
    Ok(())
}

fn print_gemm_table(sizes: &[usize], rows: &[GemmRow]) {
    let width = rows
        .iter()
        .map(|r| r.label.len())
        .max()
        .unwrap_or(0)
        .max(14);
    print!("{:<width$}", "GFLOP/s");
    for n in sizes {
        print!(" {n:>8}");
    }
    println!();
    for row in rows {
        print!("{:<width$}", row.label);
        for &n in sizes {
            match row.results.iter().find(|r| r.n == n) {
                Some(r) => print!(" {:>8.1}", r.gflops()),
                None => print!(" {:>8}", "-"),
            }
        }
        println!();
    }
    if let (Some(ours), Some(np)) = (
        rows.iter().find(|r| r.key == "ours"),
        rows.iter().find(|r| r.key == "numpy"),
    ) {
        print!("{:<width$}", "ours / numpy");
        for &n in sizes {
            let o = ours.results.iter().find(|r| r.n == n);
            let p = np.results.iter().find(|r| r.n == n);
            match (o, p) {
                (Some(o), Some(p)) => print!(" {:>7.2}x", o.gflops() / p.gflops()),
                _ => print!(" {:>8}", "-"),
            }
        }
        println!();
    }
    if let Some(ours) = rows.iter().find(|r| r.key == "ours") {
        for key in ["numpy", "torch"] {
            let Some(theirs) = rows.iter().find(|r| r.key == key) else {
                continue;
            };
            print!("{:<width$}", format!("our time / {key}'s"));
            for &n in sizes {
                let o = ours.results.iter().find(|r| r.n == n);
                let p = theirs.results.iter().find(|r| r.n == n);
                match (o, p) {
                    (Some(o), Some(p)) => print!(" {:>8.2}", o.seconds / p.seconds),
                    _ => print!(" {:>8}", "-"),
                }
            }
            println!();
        }
    }
}

/// Per size, the fastest implementation on one thread and on several.
fn print_fastest(sizes: &[usize], rows: &[GemmRow]) {
    println!("fastest per size among the host implementations (ours left out):");
    for &n in sizes {
        let best = |single: bool| {
            rows.iter()
                .filter(|r| r.key != "ours" && r.threads.is_some_and(|t| (t == 1) == single))
                .filter_map(|r| r.results.iter().find(|x| x.n == n).map(|x| (r, x.gflops())))
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map_or("-".to_owned(), |(r, g)| format!("{} {g:.1}", r.label))
        };
        println!(
            "  n = {n:>4}: 1 thread: {:<45} several: {}",
            best(true),
            best(false)
        );
    }
}

/// Child mode (`--matrixmultiply-child`): times `matrixmultiply::sgemm` at every gemm size
/// on the same inputs as the parent, checks each at sampled entries, and prints one JSON
/// line per size.
pub(super) fn matrixmultiply_child(quick: bool) -> Res {
    for &n in gemm_sizes(quick) {
        let runs = gemm_runs(n, quick);
        let (ha, hb) = (input(n * n, 10 + n as u64), input(n * n, 20 + n as u64));
        let mut hc = vec![0.0f32; n * n];
        let t = median_or_nan(samples::<std::convert::Infallible>(runs, || {
            mm_sgemm(n, &ha, &hb, std::hint::black_box(&mut hc));
            Ok(())
        })?);
        let err = sampled_rel_err(&ha, &hb, &hc, n);
        println!(
            "{}",
            serde_json::json!({"n": n, "runs": runs, "seconds": t, "max_rel_err": err})
        );
    }
    Ok(())
}

/// Runs this program again as `--matrixmultiply-child` with `MATMUL_NUM_THREADS=1`.
fn matrixmultiply_single_in_child(quick: bool) -> Res<Vec<GemmResult>> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.arg("--matrixmultiply-child")
        .env("MATMUL_NUM_THREADS", "1")
        .stdin(Stdio::null());
    if quick {
        cmd.arg("--quick");
    }
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(format!(
            "the child failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    let mut results = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line)?;
        let num = |k: &str| {
            v[k].as_f64()
                .ok_or(format!("child's line lacks {k}: {line}"))
        };
        let err = num("max_rel_err")?;
        if !within_tol(err) {
            return Err(format!("matrixmultiply (1 thread) relative error {err:.2e}").into());
        }
        results.push(GemmResult {
            n: num("n")? as usize,
            runs: num("runs")? as usize,
            seconds: num("seconds")?,
            max_rel_err: err,
            checked_against: "f64 (sampled)",
        });
    }
    Ok(results)
}
