//! Random multi-stream programs against the same program interpreted sequentially on the host.

use super::*;

/// The size of the pool of arrays a program works on.
const ARRAYS: usize = 4;

/// One instruction; `s` is the stream it is queued on. Every instruction that writes one
/// array while reading another names two different arrays.
#[derive(Debug, Clone)]
enum Instr {
    Fill {
        s: usize,
        dst: usize,
        v: f32,
    },
    Scale {
        s: usize,
        alpha: f32,
        x: usize,
    },
    Axpy {
        s: usize,
        alpha: f32,
        x: usize,
        y: usize,
    },
    Add {
        s: usize,
        a: usize,
        b: usize,
        out: usize,
    },
    Mul {
        s: usize,
        a: usize,
        b: usize,
        out: usize,
    },
    Copy {
        s: usize,
        src: usize,
        dst: usize,
    },
    /// Copies `src[start..end]` into `dst[start..end]` through views.
    CopyRange {
        s: usize,
        src: usize,
        dst: usize,
        start: usize,
        end: usize,
    },
    /// An asynchronous upload of `data(seed)` that the program waits for only at the end.
    Upload {
        s: usize,
        dst: usize,
        seed: u32,
    },
    /// An asynchronous download, waited for only at the end: it must see the array as it
    /// was at this point of the program.
    Download {
        s: usize,
        src: usize,
    },
    /// `to` waits for an event recorded on `from`.
    Event {
        from: usize,
        to: usize,
    },
    /// A kernel that only takes time, so that the streams' work interleaves differently.
    Delay {
        s: usize,
        us: u32,
    },
}

#[derive(Debug, Clone)]
struct Program {
    streams: usize,
    len: usize,
    /// Stream 0 is the context's default stream (else a created one).
    default_first: bool,
    /// Run on a fresh context whose arrays are uploaded before any second stream exists.
    fresh: bool,
    seed: u32,
    instrs: Vec<Instr>,
}

fn instr(streams: usize, len: usize) -> impl Strategy<Value = Instr> {
    let s = 0..streams;
    let arr = 0..ARRAYS;
    // An offset that makes a second index differ from the first: (i + o) % ARRAYS.
    let off = 1..ARRAYS;
    let alpha = || prop_oneof![-2.0f32..2.0, Just(1.0f32), Just(-1.0f32), Just(0.5f32)];
    let three = |s: std::ops::Range<usize>| {
        (s, 0..ARRAYS, 0..ARRAYS - 1, 0..ARRAYS - 1).prop_map(|(s, out, i, j)| {
            // `a` and `b` (possibly equal) are both different from `out`.
            (s, (out + 1 + i) % ARRAYS, (out + 1 + j) % ARRAYS, out)
        })
    };
    prop_oneof![
        2 => (s.clone(), arr.clone(), -4.0f32..4.0)
            .prop_map(|(s, dst, v)| Instr::Fill { s, dst, v }),
        2 => (s.clone(), alpha(), arr.clone()).prop_map(|(s, alpha, x)| Instr::Scale { s, alpha, x }),
        3 => (s.clone(), alpha(), arr.clone(), off.clone())
            .prop_map(|(s, alpha, x, o)| Instr::Axpy { s, alpha, x, y: (x + o) % ARRAYS }),
        3 => three(s.clone()).prop_map(|(s, a, b, out)| Instr::Add { s, a, b, out }),
        1 => three(s.clone()).prop_map(|(s, a, b, out)| Instr::Mul { s, a, b, out }),
        3 => (s.clone(), arr.clone(), off.clone())
            .prop_map(|(s, src, o)| Instr::Copy { s, src, dst: (src + o) % ARRAYS }),
        2 => (s.clone(), arr.clone(), off, 0..=len, 0..=len).prop_map(|(s, src, o, p, q)| {
            Instr::CopyRange { s, src, dst: (src + o) % ARRAYS, start: p.min(q), end: p.max(q) }
        }),
        1 => (s.clone(), arr.clone(), any::<u32>())
            .prop_map(|(s, dst, seed)| Instr::Upload { s, dst, seed }),
        2 => (s.clone(), arr).prop_map(|(s, src)| Instr::Download { s, src }),
        2 => (s.clone(), s.clone()).prop_map(|(from, to)| Instr::Event { from, to }),
        2 => (s, 0..1500u32).prop_map(|(s, us)| Instr::Delay { s, us }),
    ]
}

fn program() -> impl Strategy<Value = Program> {
    (
        1..=4usize,
        length(3000),
        any::<bool>(),
        any::<bool>(),
        any::<u32>(),
    )
        .prop_flat_map(|(streams, len, default_first, fresh, seed)| {
            (
                Just((streams, len, default_first, fresh, seed)),
                vec(instr(streams, len), 1..=30),
            )
        })
        .prop_map(
            |((streams, len, default_first, fresh, seed), instrs)| Program {
                streams,
                len,
                default_first,
                fresh,
                seed,
                instrs,
            },
        )
}

/// The arrays after the program and every `Download`'s snapshot, in program order.
type Outcome = (Vec<Vec<f32>>, Vec<Vec<f32>>);

fn initial(p: &Program) -> Vec<Vec<f32>> {
    (0..ARRAYS as u32)
        .map(|i| data(p.seed.wrapping_add(i), p.len))
        .collect()
}

/// The program run one instruction after the other on the host, in plain f32 arithmetic
/// (`alpha * x + y` rounds twice, like the built-in axpy).
fn interpret(p: &Program) -> Outcome {
    let mut arrs = initial(p);
    let mut snaps = Vec::new();
    for ins in &p.instrs {
        match *ins {
            Instr::Fill { dst, v, .. } => arrs[dst].fill(v),
            Instr::Scale { alpha, x, .. } => arrs[x].iter_mut().for_each(|v| *v *= alpha),
            Instr::Axpy { alpha, x, y, .. } => {
                let xs = arrs[x].clone();
                for (y, x) in arrs[y].iter_mut().zip(xs) {
                    // `alpha * x` rounded, then added: no fused multiply-add.
                    *y += alpha * x;
                }
            }
            Instr::Add { a, b, out, .. } => {
                arrs[out] = (0..p.len).map(|i| arrs[a][i] + arrs[b][i]).collect()
            }
            Instr::Mul { a, b, out, .. } => {
                arrs[out] = (0..p.len).map(|i| arrs[a][i] * arrs[b][i]).collect()
            }
            Instr::Copy { src, dst, .. } => arrs[dst] = arrs[src].clone(),
            Instr::CopyRange {
                src,
                dst,
                start,
                end,
                ..
            } => {
                let part = arrs[src][start..end].to_vec();
                arrs[dst][start..end].copy_from_slice(&part);
            }
            Instr::Upload { dst, seed, .. } => arrs[dst] = data(seed, p.len),
            Instr::Download { src, .. } => snaps.push(arrs[src].clone()),
            Instr::Event { .. } | Instr::Delay { .. } => {}
        }
    }
    (arrs, snaps)
}

/// The arrays other than `dst`, shared, beside `dst` itself, mutable: a `get_many_mut`
/// for one writer and any number of readers, built on `split_at_mut`.
struct Others<'a, T> {
    below: &'a [T],
    above: &'a [T],
    dst: usize,
}

impl<'a, T> Others<'a, T> {
    fn get(&self, i: usize) -> &'a T {
        assert_ne!(i, self.dst, "an instruction read the array it writes");
        if i < self.dst {
            &self.below[i]
        } else {
            &self.above[i - self.dst - 1]
        }
    }
}

fn split_dst<T>(arrs: &mut [T], dst: usize) -> (Others<'_, T>, &mut T) {
    let (below, rest) = arrs.split_at_mut(dst);
    let (d, above) = rest.split_first_mut().expect("dst is inside the pool");
    (Others { below, above, dst }, d)
}

/// The program run on `ctx`'s streams, with no synchronisation but what it says; the
/// final downloads rely on the automatic ordering alone.
fn execute(ctx: &gpukit::Context, p: &Program) -> Result<Outcome, TestCaseError> {
    let delay = if p.fresh || p.instrs.iter().any(|i| matches!(i, Instr::Delay { .. })) {
        Some(ctx.kernel(common::delay_spec()).tc()?)
    } else {
        None
    };
    let mut uploads = Vec::new();
    let mut arrs: Vec<GpuArray<f32>> = Vec::with_capacity(ARRAYS);
    if let (true, Some(k)) = (p.fresh, &delay) {
        // A single-stream context records no ordering events. Leave its default stream
        // busy with the arrays' initial contents when the other streams are created: their
        // first uses of the arrays must still wait for that work. Odd arrays get theirs
        // from an op (`2 * (v / 2)`, exact), even ones from an asynchronous upload.
        let init = initial(p);
        let halves: Vec<GpuArray<f32>> = init
            .iter()
            .map(|v| ctx.alloc_upload(&v.iter().map(|x| x / 2.0).collect::<Vec<f32>>()))
            .collect::<gpukit::Result<_>>()
            .tc()?;
        ctx.launch(k, gpukit::LaunchConfig::linear(1, 1), (2000u32,))
            .tc()?;
        for (i, (v, mut half)) in init.into_iter().zip(halves).enumerate() {
            if i % 2 == 1 {
                ctx.scale(2.0f32, &mut half).tc()?;
            } else {
                uploads.push(ctx.upload(v, &mut half).tc()?);
            }
            arrs.push(half);
        }
    } else {
        for v in initial(p) {
            arrs.push(ctx.alloc_upload(&v).tc()?);
        }
    }
    let mut streams = Vec::with_capacity(p.streams);
    for k in 0..p.streams {
        streams.push(if k == 0 && p.default_first {
            gpukit::Stream::clone(ctx)
        } else {
            ctx.create_stream().tc()?
        });
    }
    let mut downloads = Vec::new();
    for ins in &p.instrs {
        match *ins {
            Instr::Fill { s, dst, v } => streams[s].fill(&mut arrs[dst], v).tc()?,
            Instr::Scale { s, alpha, x } => streams[s].scale(alpha, &mut arrs[x]).tc()?,
            Instr::Axpy { s, alpha, x, y } => {
                let (others, y) = split_dst(&mut arrs, y);
                streams[s].axpy(alpha, others.get(x), y).tc()?
            }
            Instr::Add { s, a, b, out } => {
                let (others, out) = split_dst(&mut arrs, out);
                streams[s].add(others.get(a), others.get(b), out).tc()?
            }
            Instr::Mul { s, a, b, out } => {
                let (others, out) = split_dst(&mut arrs, out);
                streams[s].mul(others.get(a), others.get(b), out).tc()?
            }
            Instr::Copy { s, src, dst } => {
                let (others, dst) = split_dst(&mut arrs, dst);
                streams[s].copy(others.get(src), dst).tc()?
            }
            Instr::CopyRange {
                s,
                src,
                dst,
                start,
                end,
            } => {
                let (others, dst) = split_dst(&mut arrs, dst);
                let from = others.get(src).slice(start..end).tc()?;
                let mut to = dst.slice_mut(start..end).tc()?;
                streams[s].copy(&from, &mut to).tc()?
            }
            Instr::Upload { s, dst, seed } => {
                uploads.push(streams[s].upload(data(seed, p.len), &mut arrs[dst]).tc()?)
            }
            Instr::Download { s, src } => {
                downloads.push(streams[s].download(&arrs[src], vec![0.0f32; p.len]).tc()?)
            }
            Instr::Event { from, to } => {
                let e = streams[from].record_event().tc()?;
                streams[to].wait(&e).tc()?
            }
            Instr::Delay { s, us } => {
                let k = delay.as_ref().expect("loaded when the program has delays");
                streams[s]
                    .launch(k, gpukit::LaunchConfig::linear(1, 1), (us,))
                    .tc()?
            }
        }
    }
    let finals = arrs
        .iter()
        .map(|a| a.download())
        .collect::<gpukit::Result<Vec<_>>>()
        .tc()?;
    for u in uploads {
        u.wait().tc()?;
    }
    let snaps = downloads
        .into_iter()
        .map(|d| d.wait())
        .collect::<Result<Vec<_>, _>>()
        .tc()?;
    for s in &streams {
        s.sync().tc()?;
    }
    Ok((finals, snaps))
}

/// Bitwise equality, except that any NaN matches any NaN (payloads may differ between
/// backends and between vectorised and scalar code).
fn same_bits(got: &[f32], want: &[f32]) -> Option<usize> {
    if got.len() != want.len() {
        return Some(got.len().min(want.len()));
    }
    got.iter()
        .zip(want)
        .position(|(g, w)| g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan()))
}

fn programs_match_sequential(ctx: &gpukit::Context) -> gpukit::Result<()> {
    check(384, program(), |p| {
        let (want, want_snaps) = interpret(&p);
        let (got, got_snaps) = if p.fresh {
            let fresh = gpukit::Context::new(ctx.selection().requested).tc()?;
            let r = execute(&fresh, &p);
            fresh.close().tc()?;
            r?
        } else {
            execute(ctx, &p)?
        };
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            if let Some(at) = same_bits(g, w) {
                prop_assert!(
                    false,
                    "array {} differs at [{}] of {}: got {:?}, want {:?}",
                    i,
                    at,
                    p.len,
                    g.get(at),
                    w.get(at)
                );
            }
        }
        prop_assert_eq!(got_snaps.len(), want_snaps.len());
        for (i, (g, w)) in got_snaps.iter().zip(&want_snaps).enumerate() {
            if let Some(at) = same_bits(g, w) {
                prop_assert!(
                    false,
                    "download #{} differs at [{}] of {}: got {:?}, want {:?}",
                    i,
                    at,
                    p.len,
                    g.get(at),
                    w.get(at)
                );
            }
        }
        Ok(())
    })
}

backend_tests! {
    fn multi_stream_programs_match_sequential_runs(ctx) {
        programs_match_sequential(ctx)
    }
}
