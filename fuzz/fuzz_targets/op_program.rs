//! Fuzz target `op_program`: random programs of ops over 1 to 3 streams on the CPU backend,
//! checked against a sequential interpreter on the host.
//!
//! The input bytes decode (through `arbitrary::Unstructured`, by hand) into a small program
//! over 2 to 4 `i32` arrays of one length (at most 256 elements, at most 32 instructions):
//! uploads (asynchronous from a `Vec` or a pinned buffer, or blocking), fill, axpy, scale,
//! add/sub/mul/div, copies (between arrays, or between disjoint ranges of one array through
//! `split_at_mut`), events and waits, downloads (asynchronous, blocking, or a view's),
//! sums, syncs, early waits on outstanding copies, and dropping an array for a fresh one while
//! work on it may still be queued. Every operand is a range of an array.
//!
//! gpukit-core orders work on different streams by data dependencies, so the program must give
//! exactly what running it one instruction at a time gives: every download and sum is an
//! observation compared with the interpreter's, and so is every array at the end. `i32`
//! arithmetic wraps (as [`gpukit_core::Numeric`] says), so the comparison is exact.
#![no_main]

use gpukit_core::{BinaryOp, Context, Event, GpuArray, GpuView, GpuViewMut, HostBuffer, HostUse};
use gpukit_core::{Pending, Stream};
use gpukit_cpu::CpuBackend;
use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;

type B = CpuBackend;

const MAX_LEN: usize = 256;
const MAX_INSTRS: usize = 32;

/// `[off, off + len)` of an array.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Range {
    off: usize,
    len: usize,
}

impl Range {
    fn end(self) -> usize {
        self.off + self.len
    }
    fn std(self) -> std::ops::Range<usize> {
        self.off..self.end()
    }
}

/// An operand: an array and a range of it.
#[derive(Debug, Clone, Copy)]
struct Operand {
    arr: usize,
    at: Range,
}

#[derive(Debug, Clone, Copy)]
enum Bin {
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Debug, Clone, Copy)]
enum UploadKind {
    Vec,
    Pinned,
    Blocking,
}

#[derive(Debug, Clone, Copy)]
enum DownloadKind {
    Vec,
    Pinned,
    Blocking,
    View,
}

#[derive(Debug)]
enum Instr {
    Upload {
        stream: usize,
        dst: Operand,
        data: Vec<i32>,
        kind: UploadKind,
    },
    Fill {
        stream: usize,
        dst: Operand,
        value: i32,
    },
    Axpy {
        stream: usize,
        alpha: i32,
        x: Operand,
        y: Operand,
    },
    Scale {
        stream: usize,
        alpha: i32,
        x: Operand,
    },
    Binary {
        stream: usize,
        op: Bin,
        a: Operand,
        b: Operand,
        out: Operand,
    },
    Copy {
        stream: usize,
        src: Operand,
        dst: Operand,
    },
    Record {
        stream: usize,
    },
    Wait {
        stream: usize,
        event: usize,
    },
    Download {
        stream: usize,
        src: Operand,
        kind: DownloadKind,
    },
    Sum {
        stream: usize,
        x: Operand,
    },
    Sync {
        stream: usize,
    },
    Finish {
        pending: usize,
    },
    Replace {
        arr: usize,
        data: Option<Vec<i32>>,
    },
}

#[derive(Debug)]
struct Program {
    streams: usize,
    arrays: usize,
    len: usize,
    instrs: Vec<Instr>,
}

fn value(u: &mut Unstructured<'_>) -> ArbResult<i32> {
    // Mostly small values, so products stay readable in a failure report; sometimes any.
    Ok(if u.ratio(1, 4)? {
        u.arbitrary()?
    } else {
        u.int_in_range(-8..=8)?
    })
}

fn values(u: &mut Unstructured<'_>, len: usize) -> ArbResult<Vec<i32>> {
    (0..len).map(|_| value(u)).collect()
}

fn operands<const N: usize>(
    u: &mut Unstructured<'_>,
    arrays: usize,
    len: usize,
) -> ArbResult<[Operand; N]> {
    let n = u.int_in_range(0..=len)?;
    let mut out = [Operand {
        arr: 0,
        at: Range { off: 0, len: 0 },
    }; N];
    for op in &mut out {
        op.arr = u.int_in_range(0..=arrays - 1)?;
        op.at = Range {
            off: u.int_in_range(0..=len - n)?,
            len: n,
        };
    }
    Ok(out)
}

impl Program {
    fn decode(u: &mut Unstructured<'_>) -> ArbResult<Program> {
        let streams = u.int_in_range(1..=3)?;
        let arrays = u.int_in_range(2..=4)?;
        let len = if u.ratio(3, 4)? {
            u.int_in_range(0..=16)?
        } else {
            u.int_in_range(0..=MAX_LEN)?
        };
        let mut instrs = Vec::new();
        while instrs.len() < MAX_INSTRS && !u.is_empty() {
            let stream = u.int_in_range(0..=streams - 1)?;
            let instr = match u.int_in_range(0..=12u8)? {
                0 => {
                    let [dst] = operands(u, arrays, len)?;
                    let kind =
                        *u.choose(&[UploadKind::Vec, UploadKind::Pinned, UploadKind::Blocking])?;
                    Instr::Upload {
                        stream,
                        dst,
                        data: values(u, dst.at.len)?,
                        kind,
                    }
                }
                1 => {
                    let [dst] = operands(u, arrays, len)?;
                    Instr::Fill {
                        stream,
                        dst,
                        value: value(u)?,
                    }
                }
                2 => {
                    let [x, y] = operands(u, arrays, len)?;
                    Instr::Axpy {
                        stream,
                        alpha: value(u)?,
                        x,
                        y,
                    }
                }
                3 => {
                    let [x] = operands(u, arrays, len)?;
                    Instr::Scale {
                        stream,
                        alpha: value(u)?,
                        x,
                    }
                }
                4 => {
                    let [a, b, out] = operands(u, arrays, len)?;
                    let op = *u.choose(&[Bin::Add, Bin::Sub, Bin::Mul, Bin::Div])?;
                    Instr::Binary {
                        stream,
                        op,
                        a,
                        b,
                        out,
                    }
                }
                5 => {
                    let [src, dst] = operands(u, arrays, len)?;
                    Instr::Copy { stream, src, dst }
                }
                6 => Instr::Record { stream },
                7 => Instr::Wait {
                    stream,
                    event: u.arbitrary()?,
                },
                8 => {
                    let [src] = operands(u, arrays, len)?;
                    let kind = *u.choose(&[
                        DownloadKind::Vec,
                        DownloadKind::Pinned,
                        DownloadKind::Blocking,
                        DownloadKind::View,
                    ])?;
                    Instr::Download { stream, src, kind }
                }
                9 => {
                    let [x] = operands(u, arrays, len)?;
                    Instr::Sum { stream, x }
                }
                10 => Instr::Sync { stream },
                11 => Instr::Finish {
                    pending: u.arbitrary()?,
                },
                _ => {
                    let arr = u.int_in_range(0..=arrays - 1)?;
                    let data = if u.arbitrary()? {
                        Some(values(u, len)?)
                    } else {
                        None
                    };
                    Instr::Replace { arr, data }
                }
            };
            instrs.push(instr);
        }
        Ok(Program {
            streams,
            arrays,
            len,
            instrs,
        })
    }
}

/// Where the reads that share the written array go when it is split.
#[derive(Debug, Clone, Copy)]
enum Plan {
    /// No read is in the written array.
    Apart,
    /// Split at `mid`: the same-array reads left of it, the write right of it.
    ReadsLeft(usize),
    /// Split at `mid`: the write left of it, the same-array reads right of it.
    ReadsRight(usize),
}

/// How to take one writable range and some read ranges out of the arrays at once; `None`
/// when a read overlaps the write in the same array, or same-array reads lie on both sides
/// of it (such an instruction is skipped by both the device run and the interpreter).
fn split_plan(reads: &[Operand], write: Operand) -> Option<Plan> {
    let same: Vec<Range> = reads
        .iter()
        .filter(|r| r.arr == write.arr)
        .map(|r| r.at)
        .collect();
    if same.is_empty() {
        Some(Plan::Apart)
    } else if same.iter().all(|r| r.end() <= write.at.off) {
        Some(Plan::ReadsLeft(write.at.off))
    } else if same.iter().all(|r| r.off >= write.at.end()) {
        Some(Plan::ReadsRight(write.at.end()))
    } else {
        None
    }
}

/// Runs `f` with views of `reads` and a writable view of `write`, as `split_plan` says;
/// returns `None` for an instruction that is skipped.
fn with_views<R>(
    arrays: &mut [GpuArray<i32, B>],
    reads: &[Operand],
    write: Operand,
    f: impl FnOnce(&[GpuView<'_, i32, B>], &mut GpuViewMut<'_, i32, B>) -> R,
) -> Option<R> {
    let plan = split_plan(reads, write)?;
    let (before, rest) = arrays.split_at_mut(write.arr);
    let (target, after) = rest.split_first_mut()?;
    let other = |i: usize| -> &GpuArray<i32, B> {
        if i < write.arr {
            &before[i]
        } else {
            &after[i - write.arr - 1]
        }
    };
    let (mid, reads_left) = match plan {
        Plan::Apart => {
            let views: Vec<_> = reads
                .iter()
                .map(|r| must(other(r.arr).slice(r.at.std()), "slice"))
                .collect();
            let mut w = must(target.slice_mut(write.at.std()), "slice_mut");
            return Some(f(&views, &mut w));
        }
        Plan::ReadsLeft(mid) => (mid, true),
        Plan::ReadsRight(mid) => (mid, false),
    };
    let (left, right) = must(target.split_at_mut(mid), "split_at_mut");
    let (mut wside, wbase, rside, rbase) = if reads_left {
        (right, mid, left, 0)
    } else {
        (left, 0, right, mid)
    };
    let rview = rside.as_view();
    let views: Vec<_> = reads
        .iter()
        .map(|r| {
            if r.arr == write.arr {
                must(
                    rview.slice(r.at.off - rbase..r.at.end() - rbase),
                    "slice of a split",
                )
            } else {
                must(other(r.arr).slice(r.at.std()), "slice")
            }
        })
        .collect();
    let mut w = must(
        wside.slice_mut(write.at.off - wbase..write.at.end() - wbase),
        "slice_mut of a split",
    );
    Some(f(&views, &mut w))
}

fn must<T>(r: gpukit_core::Result<T>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what} failed on valid input: {e}"),
    }
}

fn binary_op(op: Bin) -> BinaryOp {
    match op {
        Bin::Add => BinaryOp::Add,
        Bin::Sub => BinaryOp::Sub,
        Bin::Mul => BinaryOp::Mul,
        Bin::Div => BinaryOp::Div,
    }
}

/// The reference: the program run one instruction at a time on `Vec<i32>`s. Returns the
/// observations (downloads and sums, in program order) and the final arrays.
fn interpret(p: &Program) -> (Vec<Vec<i32>>, Vec<Vec<i32>>) {
    let mut mem = vec![vec![0i32; p.len]; p.arrays];
    let mut seen = Vec::new();
    let read = |mem: &Vec<Vec<i32>>, o: Operand| mem[o.arr][o.at.std()].to_vec();
    for instr in &p.instrs {
        match instr {
            Instr::Upload { dst, data, .. } => mem[dst.arr][dst.at.std()].copy_from_slice(data),
            Instr::Fill { dst, value, .. } => mem[dst.arr][dst.at.std()].fill(*value),
            Instr::Axpy { alpha, x, y, .. } => {
                if split_plan(&[*x], *y).is_some() {
                    let xs = read(&mem, *x);
                    for (y, x) in mem[y.arr][y.at.std()].iter_mut().zip(xs) {
                        *y = alpha.wrapping_mul(x).wrapping_add(*y);
                    }
                }
            }
            Instr::Scale { alpha, x, .. } => {
                for v in &mut mem[x.arr][x.at.std()] {
                    *v = alpha.wrapping_mul(*v);
                }
            }
            Instr::Binary { op, a, b, out, .. } => {
                if split_plan(&[*a, *b], *out).is_some() {
                    let (xs, ys) = (read(&mem, *a), read(&mem, *b));
                    for ((o, x), y) in mem[out.arr][out.at.std()].iter_mut().zip(xs).zip(ys) {
                        *o = match op {
                            Bin::Add => x.wrapping_add(y),
                            Bin::Sub => x.wrapping_sub(y),
                            Bin::Mul => x.wrapping_mul(y),
                            Bin::Div if y == 0 => 0,
                            Bin::Div => x.wrapping_div(y),
                        };
                    }
                }
            }
            Instr::Copy { src, dst, .. } => {
                if split_plan(&[*src], *dst).is_some() {
                    let xs = read(&mem, *src);
                    mem[dst.arr][dst.at.std()].copy_from_slice(&xs);
                }
            }
            Instr::Download { src, .. } => seen.push(read(&mem, *src)),
            Instr::Sum { x, .. } => seen.push(vec![read(&mem, *x)
                .iter()
                .fold(0i32, |a, &v| a.wrapping_add(v))]),
            Instr::Replace { arr, data } => {
                mem[*arr] = data.clone().unwrap_or_else(|| vec![0; p.len]);
            }
            Instr::Record { .. }
            | Instr::Wait { .. }
            | Instr::Sync { .. }
            | Instr::Finish { .. } => {}
        }
    }
    (seen, mem)
}

/// Host memory an asynchronous copy holds until it is done.
enum Outstanding {
    Upload(Pending<Vec<i32>, B>),
    UploadPinned(Pending<HostBuffer<i32, B>, B>),
    /// A download and the index of its observation.
    Download(Pending<Vec<i32>, B>, usize),
    DownloadPinned(Pending<HostBuffer<i32, B>, B>, usize),
}

impl Outstanding {
    fn finish(self, seen: &mut [Option<Vec<i32>>]) {
        match self {
            Outstanding::Upload(p) => drop(must(p.wait().map_err(|r| r.error), "upload wait")),
            Outstanding::UploadPinned(p) => {
                drop(must(p.wait().map_err(|r| r.error), "upload wait"))
            }
            Outstanding::Download(p, i) => {
                seen[i] = Some(must(p.wait().map_err(|r| r.error), "download wait"))
            }
            Outstanding::DownloadPinned(p, i) => {
                let host = must(p.wait().map_err(|r| r.error), "download wait");
                seen[i] = Some(host.to_vec());
            }
        }
    }
}

/// Runs the program on the CPU backend; returns the observations and the final arrays.
fn execute(p: &Program, observations: usize) -> (Vec<Vec<i32>>, Vec<Vec<i32>>) {
    let ctx: Context<B> = must(CpuBackend::context(), "CpuBackend::context");
    let mut streams: Vec<Stream<B>> = vec![ctx.default_stream().clone()];
    for _ in 1..p.streams {
        streams.push(must(ctx.create_stream(), "create_stream"));
    }
    let mut arrays: Vec<GpuArray<i32, B>> = (0..p.arrays)
        .map(|_| must(ctx.alloc_zeros::<i32>(p.len), "alloc_zeros"))
        .collect();
    let mut events: Vec<Event<B>> = Vec::new();
    let mut outstanding: Vec<Outstanding> = Vec::new();
    let mut seen: Vec<Option<Vec<i32>>> = vec![None; observations];
    let mut next = 0;
    for instr in &p.instrs {
        match instr {
            Instr::Upload {
                stream,
                dst,
                data,
                kind,
            } => {
                let s = &streams[*stream];
                let mut d = must(arrays[dst.arr].slice_mut(dst.at.std()), "slice_mut");
                match kind {
                    UploadKind::Vec => {
                        let pending = must(
                            s.upload(data.clone(), &mut d).map_err(|r| r.error),
                            "upload",
                        );
                        outstanding.push(Outstanding::Upload(pending));
                    }
                    UploadKind::Pinned => {
                        let mut host = must(
                            ctx.alloc_host::<i32>(data.len(), HostUse::Upload),
                            "alloc_host",
                        );
                        host.copy_from_slice(data);
                        let pending = must(s.upload(host, &mut d).map_err(|r| r.error), "upload");
                        outstanding.push(Outstanding::UploadPinned(pending));
                    }
                    UploadKind::Blocking => {
                        must(s.upload_blocking(data, &mut d), "upload_blocking")
                    }
                }
            }
            Instr::Fill { stream, dst, value } => {
                let mut d = must(arrays[dst.arr].slice_mut(dst.at.std()), "slice_mut");
                must(streams[*stream].fill(&mut d, *value), "fill");
            }
            Instr::Axpy {
                stream,
                alpha,
                x,
                y,
            } => {
                let s = &streams[*stream];
                with_views(&mut arrays, &[*x], *y, |r, w| {
                    must(s.axpy(*alpha, &r[0], w), "axpy")
                });
            }
            Instr::Scale { stream, alpha, x } => {
                let mut d = must(arrays[x.arr].slice_mut(x.at.std()), "slice_mut");
                must(streams[*stream].scale(*alpha, &mut d), "scale");
            }
            Instr::Binary {
                stream,
                op,
                a,
                b,
                out,
            } => {
                let s = &streams[*stream];
                with_views(&mut arrays, &[*a, *b], *out, |r, w| {
                    must(s.binary(binary_op(*op), &r[0], &r[1], w), "binary")
                });
            }
            Instr::Copy { stream, src, dst } => {
                let s = &streams[*stream];
                with_views(&mut arrays, &[*src], *dst, |r, w| {
                    must(s.copy(&r[0], w), "copy")
                });
            }
            Instr::Record { stream } => {
                events.push(must(streams[*stream].record_event(), "record_event"))
            }
            Instr::Wait { stream, event } => {
                if !events.is_empty() {
                    must(streams[*stream].wait(&events[event % events.len()]), "wait");
                }
            }
            Instr::Download { stream, src, kind } => {
                let s = &streams[*stream];
                let v = must(arrays[src.arr].slice(src.at.std()), "slice");
                let i = next;
                next += 1;
                match kind {
                    DownloadKind::Vec => {
                        let pending = must(
                            s.download(&v, vec![0; src.at.len]).map_err(|r| r.error),
                            "download",
                        );
                        outstanding.push(Outstanding::Download(pending, i));
                    }
                    DownloadKind::Pinned => {
                        let host = must(
                            ctx.alloc_host::<i32>(src.at.len, HostUse::Download),
                            "alloc_host",
                        );
                        let pending = must(s.download(&v, host).map_err(|r| r.error), "download");
                        outstanding.push(Outstanding::DownloadPinned(pending, i));
                    }
                    DownloadKind::Blocking => {
                        let mut host = vec![0; src.at.len];
                        must(s.download_blocking(&v, &mut host), "download_blocking");
                        seen[i] = Some(host);
                    }
                    DownloadKind::View => seen[i] = Some(must(v.download(), "GpuView::download")),
                }
            }
            Instr::Sum { stream, x } => {
                let v = must(arrays[x.arr].slice(x.at.std()), "slice");
                seen[next] = Some(vec![must(streams[*stream].sum(&v), "sum")]);
                next += 1;
            }
            Instr::Sync { stream } => must(streams[*stream].sync(), "sync"),
            Instr::Finish { pending } => {
                if !outstanding.is_empty() {
                    let i = pending % outstanding.len();
                    outstanding.swap_remove(i).finish(&mut seen);
                }
            }
            Instr::Replace { arr, data } => {
                // The old array may still be in use by queued work: dropping it must wait.
                arrays[*arr] = match data {
                    Some(d) => must(ctx.alloc_upload(d), "alloc_upload"),
                    None => must(ctx.alloc_zeros(p.len), "alloc_zeros"),
                };
            }
        }
    }
    for o in outstanding {
        o.finish(&mut seen);
    }
    let finals: Vec<Vec<i32>> = arrays
        .iter()
        .map(|a| must(a.download(), "download"))
        .collect();
    drop(arrays);
    drop(events);
    drop(streams);
    must(ctx.close(), "close");
    let seen = seen
        .into_iter()
        .enumerate()
        .map(|(i, s)| s.unwrap_or_else(|| panic!("observation {i} never completed")))
        .collect();
    (seen, finals)
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(program) = Program::decode(&mut u) else {
        return;
    };
    let (want_seen, want_final) = interpret(&program);
    let (got_seen, got_final) = execute(&program, want_seen.len());
    for (i, (got, want)) in got_seen.iter().zip(&want_seen).enumerate() {
        assert_eq!(got, want, "observation {i} differs\nprogram: {program:#?}");
    }
    assert_eq!(
        got_final, want_final,
        "final arrays differ\nprogram: {program:#?}"
    );
});
