//! The in-process collectives: every rank's context in this process, one stream per rank.
//!
//! Built from [`Stream::copy_peer`], [`Stream::copy`] and the op table's binary ops, so that
//! the ordering tracker orders them with everything else (a collective waits for the work
//! queued on its arrays, on any stream, and later work waits for it) and every backend runs
//! them. An all-reduce is a reduce-scatter then an all-gather: rank `k` reduces chunk `k`
//! ([`chunk`]) of every rank's array, always in rank order (`((x0 op x1) op x2) ...`), on its
//! own stream, then every rank copies every reduced chunk. The order is fixed, so the result
//! is the same bits whatever the thread timing, and every rank holds the same bits.

use std::marker::PhantomData;

use super::CollectiveOp;
use crate::array::{sealed, DeviceRead, DeviceWrite, GpuArray};
use crate::backend::Backend;
use crate::element::{Element, Numeric};
use crate::error::{Error, Result};
use crate::optable::BinaryOp;
use crate::stream::Stream;
use crate::track::SliceRef;

/// The part of an array of `len` elements that rank `k` of `n` reduces: `(start, len)`,
/// balanced (the first `len % n` parts have one element more).
pub fn chunk(len: usize, n: usize, k: usize) -> (usize, usize) {
    let (base, rem) = (len / n.max(1), len % n.max(1));
    (k * base + k.min(rem), base + usize::from(k < rem))
}

/// A range of an array or view, typed: what the collectives copy and reduce piece by piece.
struct Part<'a, T, B: Backend> {
    slice: SliceRef<'a, B>,
    len: usize,
    _t: PhantomData<T>,
}

impl<T, B: Backend> sealed::Sealed for Part<'_, T, B> {}

impl<T: Element, B: Backend> DeviceRead<T, B> for Part<'_, T, B> {
    fn len(&self) -> usize {
        self.len
    }

    fn slice_ref(&self) -> SliceRef<'_, B> {
        self.slice
    }
}

/// Written only through a part of a `&mut` borrow of the whole, which the collective holds.
impl<T: Element, B: Backend> DeviceWrite<T, B> for Part<'_, T, B> {}

/// Elements `start..start + len` of `a`.
fn part<T: Element, B: Backend>(
    a: &impl DeviceRead<T, B>,
    start: usize,
    len: usize,
) -> Part<'_, T, B> {
    let size = std::mem::size_of::<T>();
    Part {
        slice: a.slice_ref().sub(start * size, len * size),
        len,
        _t: PhantomData,
    }
}

/// The checks every collective makes: one stream per rank, at least one rank, each rank's
/// arrays of its stream's context, no context twice, and the lengths given.
struct Ranks<'s, B: Backend> {
    call: &'static str,
    streams: &'s [Stream<B>],
}

/// Checks a communicator's streams: at least one, one per rank, no context twice
/// ([`Error::InvalidArgument`] naming `call` otherwise).
pub fn check_streams<B: Backend>(call: &'static str, streams: &[Stream<B>]) -> Result<()> {
    if streams.is_empty() {
        return Err(invalid(
            call,
            "streams",
            "a collective needs at least one rank".into(),
        ));
    }
    for (i, s) in streams.iter().enumerate() {
        if let Some(j) = streams[..i]
            .iter()
            .position(|t| t.context_id() == s.context_id())
        {
            return Err(invalid(
                call,
                "streams",
                format!("ranks {j} and {i} are streams of one context (one rank per device)"),
            ));
        }
    }
    Ok(())
}

/// Checks a collective's argument `arg`: one array per rank, each of its rank's stream's
/// context and of `len` elements (the first array's length when `None`); returns that
/// length. [`Error::InvalidArgument`] naming `call` otherwise.
pub fn check_arrays<T: Element, B: Backend>(
    call: &'static str,
    streams: &[Stream<B>],
    arg: &'static str,
    arrays: &[impl DeviceRead<T, B>],
    len: Option<usize>,
) -> Result<usize> {
    let n = streams.len();
    if arrays.len() != n {
        return Err(invalid(
            call,
            arg,
            format!("{} arrays for {n} ranks (one per rank)", arrays.len()),
        ));
    }
    let want = len.unwrap_or_else(|| arrays.first().map_or(0, |a| a.len()));
    for (r, (a, s)) in arrays.iter().zip(streams).enumerate() {
        let ctx = a.slice_ref().context_id();
        if ctx != s.context_id() {
            return Err(invalid(
                call,
                arg,
                format!(
                    "{arg}[{r}] is memory of context {ctx}, rank {r}'s stream is of context {}",
                    s.context_id()
                ),
            ));
        }
        if a.len() != want {
            return Err(invalid(
                call,
                arg,
                format!("{arg}[{r}] has {} elements, expected {want}", a.len()),
            ));
        }
    }
    Ok(want)
}

impl<'s, B: Backend> Ranks<'s, B> {
    fn new(call: &'static str, streams: &'s [Stream<B>]) -> Result<Self> {
        check_streams(call, streams)?;
        Ok(Ranks { call, streams })
    }

    fn n(&self) -> usize {
        self.streams.len()
    }

    /// [`check_arrays`] for this call.
    fn arrays<T: Element>(
        &self,
        arg: &'static str,
        arrays: &[impl DeviceRead<T, B>],
        len: Option<usize>,
    ) -> Result<usize> {
        check_arrays(self.call, self.streams, arg, arrays, len)
    }

    /// Copies `src` (on any rank's device) into `dst` (rank `r`'s) on rank `r`'s stream.
    fn copy_to<T: Element>(
        &self,
        r: usize,
        src: &impl DeviceRead<T, B>,
        dst: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let s = &self.streams[r];
        if src.slice_ref().context_id() == s.context_id() {
            s.copy(src, dst)
        } else {
            s.copy_peer(src, dst)
        }
    }

    /// Reduces elements `start..start + len` of every rank's `src`, in rank order, into a
    /// new array on rank `k`'s device (queued on rank `k`'s stream).
    fn reduce_part<T: Numeric>(
        &self,
        k: usize,
        src: &[impl DeviceRead<T, B>],
        start: usize,
        len: usize,
        op: CollectiveOp,
    ) -> Result<GpuArray<T, B>> {
        let home = src[k].slice_ref().home().clone();
        let mut acc = GpuArray::<T, B>::alloc(&home, len, false)?;
        self.reduce_part_into(k, src, start, len, op, &mut acc)?;
        Ok(acc)
    }

    /// [`Ranks::reduce_part`] into `acc`, `len` elements of rank `k`'s device.
    fn reduce_part_into<T: Numeric>(
        &self,
        k: usize,
        src: &[impl DeviceRead<T, B>],
        start: usize,
        len: usize,
        op: CollectiveOp,
        acc: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let s = &self.streams[k];
        let home = src[k].slice_ref().home().clone();
        let binary = match op {
            CollectiveOp::Sum | CollectiveOp::Avg => BinaryOp::Add,
            CollectiveOp::Prod => BinaryOp::Mul,
            CollectiveOp::Max => BinaryOp::Max,
            CollectiveOp::Min => BinaryOp::Min,
        };
        let [first, second] = [0, 1].map(|j| part(&src[j.min(self.n() - 1)], start, len));
        if self.n() == 1 {
            return s.copy(&first, acc);
        }
        // Another rank's part is staged here first; this rank's own is read where it is.
        let staging = || GpuArray::<T, B>::alloc(&home, len, false);
        let mut spare = staging()?;
        match k {
            0 => {
                s.copy_peer(&second, &mut spare)?;
                s.binary(binary, &first, &spare, acc)?;
            }
            1 => {
                s.copy_peer(&first, &mut spare)?;
                s.binary(binary, &spare, &second, acc)?;
            }
            _ => {
                let mut other = staging()?;
                s.copy_peer(&first, &mut spare)?;
                s.copy_peer(&second, &mut other)?;
                s.binary(binary, &spare, &other, acc)?;
            }
        }
        for (j, x) in src.iter().enumerate().skip(2) {
            let xj = part(x, start, len);
            if j == k {
                s.binary_inplace(binary, acc, &xj)?;
            } else {
                // Queued after the last op that read `spare`, on this stream: in order.
                s.copy_peer(&xj, &mut spare)?;
                s.binary_inplace(binary, acc, &spare)?;
            }
        }
        if op == CollectiveOp::Avg {
            s.binary_scalar_inplace(BinaryOp::Div, acc, T::from_f64(self.n() as f64))?;
        }
        Ok(())
    }

    /// Rank `k`'s part ([`chunk`]) of the reduction of every rank's `src` (of `len`
    /// elements), on rank `k`'s device (`None` for an empty part).
    fn reduce_scatter<T: Numeric>(
        &self,
        src: &[impl DeviceRead<T, B>],
        len: usize,
        op: CollectiveOp,
    ) -> Result<Vec<Option<GpuArray<T, B>>>> {
        let n = self.n();
        (0..n)
            .map(|k| match chunk(len, n, k) {
                (_, 0) => Ok(None),
                (start, part_len) => self.reduce_part(k, src, start, part_len, op).map(Some),
            })
            .collect()
    }

    /// Copies every rank's reduced part into its place in every rank's `dst`.
    fn gather<T: Element>(
        &self,
        reduced: &[Option<GpuArray<T, B>>],
        len: usize,
        dst: &mut [impl DeviceWrite<T, B>],
    ) -> Result<()> {
        let n = self.n();
        for (r, d) in dst.iter_mut().enumerate() {
            for (k, acc) in reduced.iter().enumerate() {
                let Some(acc) = acc else { continue };
                let (start, part_len) = chunk(len, n, k);
                self.copy_to(r, acc, &mut part(&*d, start, part_len))?;
            }
        }
        Ok(())
    }
}

fn invalid(op: &'static str, arg: &'static str, message: String) -> Error {
    Error::InvalidArgument { op, arg, message }
}

/// [`CollectiveOp::Avg`] divides, which integers do not do exactly: refused for them
/// ([`Error::InvalidArgument`] naming `call`).
pub fn check_op<T: Element>(call: &'static str, op: CollectiveOp) -> Result<()> {
    if op == CollectiveOp::Avg && !T::DTYPE.is_float() {
        return Err(invalid(
            call,
            "op",
            format!(
                "avg is for float elements, not {} (sum, then divide as you need)",
                T::DTYPE
            ),
        ));
    }
    Ok(())
}

/// `dst[r] = src[0] op src[1] op ... op src[n-1]` element-wise, for every rank `r`, each
/// rank's part queued on `streams[r]` (one stream per rank, each of its own context).
pub fn all_reduce_into<T: Numeric, B: Backend>(
    streams: &[Stream<B>],
    src: &[impl DeviceRead<T, B>],
    dst: &mut [impl DeviceWrite<T, B>],
    op: CollectiveOp,
) -> Result<()> {
    const CALL: &str = "Communicator::all_reduce_into";
    check_op::<T>(CALL, op)?;
    let ranks = Ranks::new(CALL, streams)?;
    let len = ranks.arrays("src", src, None)?;
    ranks.arrays("dst", dst, Some(len))?;
    if let ([s], [one], [d]) = (streams, src, &mut *dst) {
        // A reduction over one rank is the array itself.
        return s.copy(one, d);
    }
    let reduced = ranks.reduce_scatter(src, len, op)?;
    ranks.gather(&reduced, len, dst)
}

/// [`all_reduce_into`] in place: every rank's `bufs[r]` becomes the reduction of all.
pub fn all_reduce<T: Numeric, B: Backend>(
    streams: &[Stream<B>],
    bufs: &mut [impl DeviceWrite<T, B>],
    op: CollectiveOp,
) -> Result<()> {
    const CALL: &str = "Communicator::all_reduce";
    check_op::<T>(CALL, op)?;
    let ranks = Ranks::new(CALL, streams)?;
    let len = ranks.arrays("bufs", bufs, None)?;
    if ranks.n() == 1 {
        // A reduction over one rank is the array itself (avg divides by one).
        return Ok(());
    }
    // Every part is reduced into new memory before any rank's array is written: the
    // tracker orders each write after the other ranks' reads of the array.
    let reduced = ranks.reduce_scatter(bufs, len, op)?;
    ranks.gather(&reduced, len, bufs)
}

/// Copies `src` (on rank `root`'s device) into every rank's `dst[r]` (rank `root`'s too).
pub fn broadcast_into<T: Element, B: Backend>(
    streams: &[Stream<B>],
    root: usize,
    src: &impl DeviceRead<T, B>,
    dst: &mut [impl DeviceWrite<T, B>],
) -> Result<()> {
    const CALL: &str = "Communicator::broadcast_into";
    let ranks = Ranks::new(CALL, streams)?;
    check_root(CALL, root, ranks.n())?;
    ranks
        .arrays("src", std::slice::from_ref(src), None)
        .or_else(|_| {
            let ctx = src.slice_ref().context_id();
            if ctx == streams[root].context_id() {
                Ok(src.len())
            } else {
                Err(invalid(
                    CALL,
                    "src",
                    format!("src is memory of context {ctx}, not of rank {root}'s (the root)"),
                ))
            }
        })?;
    ranks.arrays("dst", dst, Some(src.len()))?;
    for (r, d) in dst.iter_mut().enumerate() {
        ranks.copy_to(r, src, d)?;
    }
    Ok(())
}

/// Copies rank `root`'s `bufs[root]` into every other rank's `bufs[r]`.
pub fn broadcast<T: Element, B: Backend>(
    streams: &[Stream<B>],
    root: usize,
    bufs: &mut [impl DeviceWrite<T, B>],
) -> Result<()> {
    const CALL: &str = "Communicator::broadcast";
    let ranks = Ranks::new(CALL, streams)?;
    check_root(CALL, root, ranks.n())?;
    ranks.arrays("bufs", bufs, None)?;
    let (before, rest) = bufs.split_at_mut(root);
    let (src, after) = rest
        .split_first_mut()
        .ok_or_else(|| invalid(CALL, "root", "no root".into()))?;
    for (r, d) in before.iter_mut().enumerate() {
        ranks.copy_to(r, &*src, d)?;
    }
    for (i, d) in after.iter_mut().enumerate() {
        ranks.copy_to(root + 1 + i, &*src, d)?;
    }
    Ok(())
}

/// Checks that `root` is one of `n` ranks ([`Error::InvalidArgument`] naming `call`).
pub fn check_root(call: &'static str, root: usize, n: usize) -> Result<()> {
    if root < n {
        return Ok(());
    }
    Err(invalid(call, "root", format!("rank {root} of {n} ranks")))
}

/// Every rank's `dst[r]` (of `n * len` elements) receives every rank's `src[k]` (of `len`)
/// at elements `k * len..(k + 1) * len`.
pub fn all_gather_into<T: Element, B: Backend>(
    streams: &[Stream<B>],
    src: &[impl DeviceRead<T, B>],
    dst: &mut [impl DeviceWrite<T, B>],
) -> Result<()> {
    const CALL: &str = "Communicator::all_gather_into";
    let ranks = Ranks::new(CALL, streams)?;
    let len = ranks.arrays("src", src, None)?;
    let total = len.checked_mul(ranks.n()).ok_or_else(|| {
        invalid(
            CALL,
            "src",
            format!("{len} elements times {} ranks overflows", ranks.n()),
        )
    })?;
    ranks.arrays("dst", dst, Some(total))?;
    for (r, d) in dst.iter_mut().enumerate() {
        for (k, s) in src.iter().enumerate() {
            ranks.copy_to(r, s, &mut part(&*d, k * len, len))?;
        }
    }
    Ok(())
}

/// Rank `r`'s `dst[r]` (of `len` elements) receives elements `r * len..(r + 1) * len` of
/// `src[0] op src[1] op ... op src[n-1]` (each `src[k]` of `n * len`), reduced in rank order
/// on rank `r`'s stream.
pub fn reduce_scatter_into<T: Numeric, B: Backend>(
    streams: &[Stream<B>],
    src: &[impl DeviceRead<T, B>],
    dst: &mut [impl DeviceWrite<T, B>],
    op: CollectiveOp,
) -> Result<()> {
    const CALL: &str = "Communicator::reduce_scatter_into";
    check_op::<T>(CALL, op)?;
    let ranks = Ranks::new(CALL, streams)?;
    let n = ranks.n();
    let len = ranks.arrays("dst", dst, None)?;
    let total = len.checked_mul(n).ok_or_else(|| {
        invalid(
            CALL,
            "dst",
            format!("{len} elements times {n} ranks overflows"),
        )
    })?;
    ranks.arrays("src", src, Some(total))?;
    if len == 0 {
        return Ok(());
    }
    for (r, d) in dst.iter_mut().enumerate() {
        ranks.reduce_part_into(r, src, r * len, len, op, d)?;
    }
    Ok(())
}
