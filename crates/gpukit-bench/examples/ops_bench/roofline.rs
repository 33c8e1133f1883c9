//! The roofline: each built-in op's bytes moved per second against memcpy's, checked at
//! sampled elements (see the program's docs).

use super::*;
use crate::numpy;

/// The built-in ops of the roofline, with the arrays each moves (besides its small output).
const OPS: [(&str, usize); 7] = [
    ("add", 3),
    ("mul_scalar_inplace", 2),
    ("relu", 2),
    ("exp", 2),
    ("sum_into", 1),
    ("row_sum", 1),
    ("softmax", 2),
];

pub(super) fn roofline(ctx: &Context, args: &Args, records: &mut Vec<Record>) -> Res {
    let sizes = args.sizes(&ROOF_SIZES, 3);
    let runs_for = |bytes: usize| args.runs_for(bytes);
    println!(
        "\nroofline: bytes each op must read and write per second, as a fraction of memcpy's \
         (1.00 = memcpy speed); medians of {} runs ({} from 16 MiB)",
        runs_for(0),
        runs_for(16 << 20)
    );
    print!("{:>10} {:>12}", "size", "memcpy GB/s");
    for (op, _) in OPS {
        print!(" {op:>18}");
    }
    println!();
    for &bytes in sizes {
        let n = bytes / 4;
        let runs = runs_for(bytes);
        let xa = input(n, 1);
        let xb = input(n, 2);

        // Baseline: memcpy between two touched host buffers, before and after the ops.
        let mut dst = vec![0.0f32; n];
        let mut memcpy = |samples_out: &mut Vec<f64>| {
            let Ok(s) = samples::<std::convert::Infallible>(runs, || {
                let src = std::hint::black_box(&xa);
                // SAFETY: both buffers hold `n` f32s and are distinct allocations.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), n) };
                std::hint::black_box(&mut dst);
                Ok(())
            });
            samples_out.extend(s);
        };
        let mut memcpy_samples = Vec::new();
        memcpy(&mut memcpy_samples);

        let a = ctx.alloc_upload(&xa)?;
        let b = ctx.alloc_upload(&xb)?;
        let mut c = ctx.alloc_zeros::<f32>(n)?;
        let mut x = ctx.alloc_upload(&xa)?;
        let mut one = ctx.alloc_zeros::<f32>(1)?;
        let shape = Shape::new(n / ROW, ROW);
        let mut sums = ctx.alloc_zeros::<f32>(n / ROW)?;
        let idx = sample_indices(n);
        let mut times = Vec::new();
        for (op, _) in OPS {
            let mut calls = 0usize;
            let t = median_or_nan(samples(runs, || -> gpukit::Result<()> {
                match op {
                    "add" => ctx.add(&a, &b, &mut c)?,
                    "mul_scalar_inplace" => {
                        calls += 1;
                        ctx.mul_scalar_inplace(&mut x, -1.0f32)?
                    }
                    "relu" => ctx.relu(&a, &mut c)?,
                    "exp" => ctx.exp(&a, &mut c)?,
                    "sum_into" => ctx.sum_into(&a, &mut one)?,
                    "row_sum" => ctx.row_sum(shape, &a, &mut sums)?,
                    _ => ctx.softmax(shape, &a, &mut c)?,
                }
                ctx.sync()
            })?);
            let outs = Outputs {
                c: &c,
                x: &x,
                one: &one,
                sums: &sums,
            };
            check_op(op, &xa, &xb, &outs, calls, &idx)?;
            times.push(t);
        }
        memcpy(&mut memcpy_samples);
        let t_memcpy = median_or_nan(memcpy_samples);

        print!(
            "{:>10} {:>12.2}",
            fmt_bytes(bytes),
            bytes as f64 / t_memcpy / 1e9
        );
        for ((op, arrays), t) in OPS.iter().zip(&times) {
            let moved = arrays * bytes
                + match *op {
                    "sum_into" => 4,
                    "row_sum" => bytes / ROW,
                    _ => 0,
                };
            let ratio = (moved as f64 / t) / (2.0 * bytes as f64 / t_memcpy);
            print!(" {ratio:>18.2}");
            records.push(Record::Roofline {
                backend: ctx.backend_name(),
                op,
                bytes,
                bytes_moved: moved,
                seconds: *t,
                gbps: moved as f64 / t / 1e9,
                memcpy_seconds: t_memcpy,
                memcpy_gbps: bytes as f64 / t_memcpy / 1e9,
                ratio_vs_memcpy: ratio,
                foreign: Foreign::default(),
            });
        }
        println!();
    }
    let ops: Vec<&str> = OPS.iter().map(|o| o.0).collect();
    side_by_side(
        args,
        "ops",
        &ops,
        sizes.iter().map(|&b| (b, runs_for(b))).collect(),
        records,
    );
    Ok(())
}

/// The same ops through numpy and PyTorch (in a `python3` child, after ours, the script's
/// `command`: `ops` or `math`): each record of `ops` gets their times and ours over theirs;
/// prints the ratios.
pub(super) fn side_by_side(
    args: &Args,
    command: &str,
    ops: &[&str],
    sizes: Vec<(usize, usize)>,
    records: &mut Vec<Record>,
) {
    if !args.numpy {
        println!("numpy and torch: not measured (--no-numpy)");
        return;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let foreign = match numpy::foreign_ops(&args.python, command, &sizes, ROW, threads) {
        Ok(f) => f,
        Err(e) => {
            let why = match e {
                numpy::NumpyError::Unavailable(why) => why,
                numpy::NumpyError::Failed(e) => e.to_string(),
            };
            println!("numpy and torch: not available ({why})");
            push_libraries(
                records,
                Record::Libraries {
                    numpy: format!("not available ({why})"),
                    torch: "not available (numpy's child did not run)".to_owned(),
                },
            );
            return;
        }
    };
    let find = |list: &[(usize, String, f64)], bytes: usize, op: &str| {
        list.iter()
            .find(|(b, o, _)| *b == bytes && o == op)
            .map(|t| t.2)
    };
    for r in records.iter_mut() {
        if let Some((op, bytes, seconds, f)) = r.timed() {
            if ops.contains(&op) && sizes.iter().any(|s| s.0 == bytes) {
                let numpy = find(&foreign.numpy, bytes, op);
                *f = Foreign::new(seconds, numpy, find(&foreign.torch, bytes, op));
            }
        }
    }
    println!(
        "\nside by side: our time over numpy's (1 thread) and over PyTorch's ({}); below 1.00 \
         we are faster",
        foreign.torch_status
    );
    print!("{:>14}", "size");
    for op in ops {
        print!(" {op:>14}");
    }
    println!();
    for (lib, pick) in [("numpy", 0usize), ("torch", 1)] {
        if lib == "torch" && foreign.torch.is_empty() {
            continue;
        }
        for &(bytes, _) in &sizes {
            print!("{:>14}", format!("{} {lib}", fmt_bytes(bytes)));
            for op in ops {
                let ratio = records.iter_mut().find_map(|r| match r.timed() {
                    Some((o, b, _, f)) if o == *op && b == bytes => {
                        if pick == 0 {
                            f.time_ratio_vs_numpy
                        } else {
                            f.time_ratio_vs_torch
                        }
                    }
                    _ => None,
                });
                match ratio {
                    Some(v) => print!(" {v:>14.2}"),
                    None => print!(" {:>14}", "-"),
                }
            }
            println!();
        }
    }
    push_libraries(
        records,
        Record::Libraries {
            numpy: "numpy, 1 thread (its ufuncs have none)".to_owned(),
            torch: foreign.torch_status,
        },
    );
}

/// Adds `libraries` unless an earlier side-by-side section of the run has said it.
fn push_libraries(records: &mut Vec<Record>, libraries: Record) {
    if !records
        .iter()
        .any(|r| matches!(r, Record::Libraries { .. }))
    {
        records.push(libraries);
    }
}

/// The arrays the roofline's ops write.
struct Outputs<'a> {
    /// The output of `add`, `relu`, `exp` and `softmax`.
    c: &'a gpukit::GpuArray<f32>,
    /// `mul_scalar_inplace`'s array, negated once per call.
    x: &'a gpukit::GpuArray<f32>,
    /// `sum_into`'s one element.
    one: &'a gpukit::GpuArray<f32>,
    /// `row_sum`'s sum per row.
    sums: &'a gpukit::GpuArray<f32>,
}

/// Checks the result of the last run of `op` at the sampled indices `idx` against the host.
fn check_op(
    op: &str,
    xa: &[f32],
    xb: &[f32],
    out: &Outputs<'_>,
    calls: usize,
    idx: &[usize],
) -> Res {
    let Outputs { c, x, one, sums } = *out;
    let wrong = |what: String| -> Res { Err(format!("{op} gave a wrong result: {what}").into()) };
    match op {
        "sum_into" => {
            let got = one.download()?[0];
            let want: f64 = xa.iter().map(|&v| f64::from(v)).sum();
            // The sum accumulates in f64 and is rounded once; allow for f32's rounding of
            // a value near zero.
            if (f64::from(got) - want).abs() > 1e-6 * xa.len() as f64 {
                return wrong(format!("sum {got}, expected {want}"));
            }
        }
        "row_sum" => {
            let got = sums.download()?;
            let rows = xa.len() / ROW;
            for r in [0, rows / 2, rows - 1] {
                let want: f64 = xa[r * ROW..(r + 1) * ROW]
                    .iter()
                    .map(|&v| f64::from(v))
                    .sum();
                if (f64::from(got[r]) - want).abs() > 1e-6 * ROW as f64 {
                    return wrong(format!("row {r}: sum {}, expected {want}", got[r]));
                }
            }
        }
        "mul_scalar_inplace" => {
            let got = x.download()?;
            let sign = if calls.is_multiple_of(2) { 1.0 } else { -1.0 };
            for &i in idx {
                if got[i] != xa[i] * sign {
                    return wrong(format!("x[{i}] = {}, expected {}", got[i], xa[i] * sign));
                }
            }
        }
        "softmax" => {
            let got = c.download()?;
            let rows = xa.len() / ROW;
            for r in [0, rows / 2, rows - 1] {
                let row = &xa[r * ROW..(r + 1) * ROW];
                let m = row
                    .iter()
                    .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
                let s: f64 = row.iter().map(|&v| (f64::from(v) - m).exp()).sum();
                for j in [0, ROW / 2, ROW - 1] {
                    let want = (f64::from(row[j]) - m).exp() / s;
                    if !close(got[r * ROW + j], want, 1e-5) {
                        return wrong(format!("row {r} col {j}: {}", got[r * ROW + j]));
                    }
                }
            }
        }
        _ => {
            let got = c.download()?;
            for &i in idx {
                let (a, b) = (xa[i], xb[i]);
                let (want, rel) = match op {
                    "add" => (f64::from(a + b), 0.0),
                    "relu" => (f64::from(a.max(0.0)), 0.0),
                    _ => (f64::from(a).exp(), 1e-6),
                };
                if !close(got[i], want, rel) {
                    return wrong(format!("[{i}] = {}, expected {want}", got[i]));
                }
            }
        }
    }
    Ok(())
}
