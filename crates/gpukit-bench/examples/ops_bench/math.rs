//! The math ops (the CPU backend's vectorised ones): ours per element, before and after
//! against the op table's scalar body on one thread, and side by side with numpy and
//! PyTorch (see the program's docs).

use gpukit::core::{cross_entropy_rows, softmax_rows, BinaryOp, RhsSlice, UnaryOp};

use super::roofline::side_by_side;
use super::*;

/// The ops, in the table's and the child's names.
const MATH_OPS: [&str; 11] = [
    "exp",
    "log",
    "log1p",
    "tanh",
    "sigmoid",
    "silu",
    "gelu",
    "softplus",
    "pow",
    "log_softmax",
    "cross_entropy",
];
/// Array sizes in bytes; `--quick` takes the first two.
const MATH_SIZES: [usize; 3] = [64 << 10, 1 << 20, 16 << 20];

/// The unary op named `op`, if it is one.
fn unary(op: &str) -> Option<UnaryOp> {
    UnaryOp::ALL.iter().copied().find(|u| u.name() == op)
}

/// Whether `op` reads `p` (`log`, `log1p`, `pow`: positive inputs) rather than `a`.
fn reads_p(op: &str) -> bool {
    matches!(op, "log" | "log1p" | "pow")
}

/// The inputs: `a` in [-4, 4) and `p = |a| + 1/64` (log, log1p and pow), labels per row.
struct Inputs {
    a: Vec<f32>,
    p: Vec<f32>,
    labels: Vec<u32>,
}

impl Inputs {
    fn new(n: usize) -> Inputs {
        let a: Vec<f32> = input(n, 3).iter().map(|v| v * 4.0).collect();
        let p = a.iter().map(|v| v.abs() + 1.0 / 64.0).collect();
        let labels = (0..n / ROW).map(|r| ((r * 7) % ROW) as u32).collect();
        Inputs { a, p, labels }
    }

    /// The input `op` reads.
    fn of(&self, op: &str) -> &[f32] {
        if reads_p(op) {
            &self.p
        } else {
            &self.a
        }
    }
}

pub(super) fn math(ctx: &Context, args: &Args, records: &mut Vec<Record>) -> Res {
    let sizes = args.sizes(&MATH_SIZES, 2);
    let runs_for = |bytes: usize| args.runs_for(bytes);
    println!(
        "\nmath ops on f32: our ns per element (medians of {} runs, {} from 16 MiB); at {} the \
         speed-up over the op table's scalar body on one thread (what the CPU backend ran \
         before its vectorised math)",
        runs_for(0),
        runs_for(16 << 20),
        fmt_bytes(sizes[0])
    );
    print!("{:>10}", "size");
    for op in MATH_OPS {
        print!(" {op:>13}");
    }
    println!();
    let mut speedups = Vec::new();
    for (k, &bytes) in sizes.iter().enumerate() {
        let n = bytes / 4;
        let runs = runs_for(bytes);
        let inputs = Inputs::new(n);
        let a = ctx.alloc_upload(&inputs.a)?;
        let p = ctx.alloc_upload(&inputs.p)?;
        let labels = ctx.alloc_upload(&inputs.labels)?;
        let mut c = ctx.alloc_zeros::<f32>(n)?;
        let mut loss = ctx.alloc_zeros::<f32>(n / ROW)?;
        let shape = Shape::new(n / ROW, ROW);
        print!("{:>10}", fmt_bytes(bytes));
        for op in MATH_OPS {
            let t = median_or_nan(samples(runs, || -> gpukit::Result<()> {
                match op {
                    "pow" => ctx.binary_scalar(BinaryOp::Pow, &p, 1.5f32, &mut c)?,
                    "log_softmax" => ctx.log_softmax(shape, &a, &mut c)?,
                    "cross_entropy" => ctx.cross_entropy(shape, &a, &labels, &mut loss)?,
                    _ => {
                        let x = if reads_p(op) { &p } else { &a };
                        ctx.unary(unary(op).expect("a unary op"), x, &mut c)?
                    }
                }
                ctx.sync()
            })?);
            let got = if op == "cross_entropy" {
                loss.download()?
            } else {
                c.download()?
            };
            check(op, &inputs, &got)?;
            // Before: the table's scalar body, one thread, at the smallest size.
            let table = (k == 0).then(|| {
                let x = inputs.of(op);
                let mut out = vec![0.0f32; if op == "cross_entropy" { n / ROW } else { n }];
                median_or_nan(
                    samples(runs, || -> Result<(), std::convert::Infallible> {
                        match op {
                            "pow" => {
                                BinaryOp::Pow.map_float(Some(x), RhsSlice::Scalar(1.5), n, &mut out)
                            }
                            "log_softmax" => softmax_rows(true, Some(x), ROW, &mut out),
                            "cross_entropy" => {
                                cross_entropy_rows(x, &inputs.labels, ROW, &mut out, None)
                            }
                            _ => unary(op).expect("a unary op").map_float(Some(x), &mut out),
                        }
                        std::hint::black_box(&mut out);
                        Ok(())
                    })
                    .unwrap_or_default(),
                )
            });
            if let Some(before) = table {
                speedups.push(before / t);
            }
            print!(" {:>13.2}", t / n as f64 * 1e9);
            records.push(Record::Math {
                backend: ctx.backend_name(),
                op,
                bytes,
                seconds: t,
                ns_per_element: t / n as f64 * 1e9,
                table_seconds: table,
                speedup_vs_table: table.map(|b| b / t),
                foreign: Foreign::default(),
            });
        }
        println!();
    }
    print!("{:>10}", "speed-up");
    for s in speedups {
        print!(" {s:>12.2}x");
    }
    println!();
    side_by_side(
        args,
        "math",
        &MATH_OPS,
        sizes.iter().map(|&b| (b, runs_for(b))).collect(),
        records,
    );
    Ok(())
}

/// Checks `op`'s result at sampled elements (rows for the row-wise ops) against f64.
fn check(op: &str, inputs: &Inputs, got: &[f32]) -> Res {
    let x = inputs.of(op);
    let wrong = |what: String| -> Res { Err(format!("{op} gave a wrong result: {what}").into()) };
    let row_stats = |r: usize| {
        let row = &x[r * ROW..(r + 1) * ROW];
        let m = row
            .iter()
            .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
        let s: f64 = row.iter().map(|&v| (f64::from(v) - m).exp()).sum();
        (row, m, s.ln())
    };
    match op {
        "log_softmax" | "cross_entropy" => {
            let rows = x.len() / ROW;
            for r in [0, rows / 2, rows - 1] {
                let (row, m, ln_s) = row_stats(r);
                let l = inputs.labels[r] as usize;
                let (j, g) = if op == "log_softmax" {
                    (l, got[r * ROW + l])
                } else {
                    (l, -got[r])
                };
                let want = f64::from(row[j]) - m - ln_s;
                if !close(g, want, 1e-5) {
                    return wrong(format!("row {r}: {g} for {want}"));
                }
            }
        }
        _ => {
            for i in sample_indices(x.len()) {
                let v = f64::from(x[i]);
                let want = match op {
                    "pow" => v.powf(1.5),
                    _ => unary(op).expect("a unary op").apply_real::<f64>(v),
                };
                if !close(got[i], want, 1e-5) {
                    return wrong(format!("[{i}] = {} for {want}", got[i]));
                }
            }
        }
    }
    Ok(())
}
