//! What a batch carries: one typed array or a tuple of them ([`Arrays`]), how many rows the
//! loader filled and its per-batch host data ([`Filled`], [`Batch`]).
//!
//! A batch has `rows` rows, at most the pipeline's `max_rows`. Each of its arrays has a
//! fixed number of elements per row, its *width*: a batch of 64-pixel images with one label
//! each is `(f32, u32)` with widths `[64, 1]`, and its arrays hold `64 * rows` and `rows`
//! elements. A single array of width 1 is the plain case: rows are elements.

use gpukit_core::{
    Backend, Context, DType, Element, GpuArray, GpuView, GpuViewMut, HostBuffer, HostUse, Pending,
    Stream,
};

/// One batch as compute and the sink see it: its index, its row count and the host data the
/// loader produced for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Batch<M = ()> {
    /// The batch's index, from 0, in load (and delivery) order.
    pub index: usize,
    /// Rows the loader filled (1 to `max_rows`; 0 for an empty batch): every array of the
    /// batch holds `rows * width` elements.
    pub rows: usize,
    /// What the loader returned with the rows (file name, ids, labels...), `()` if nothing.
    pub meta: M,
}

/// What a load function returns: the rows it filled, as `usize`, or the rows and the batch's
/// host data, as `(usize, M)`; the data reaches the sink with the batch's outputs.
///
/// ```
/// # use gpukit::BoxError;
/// let plain = |_i: usize, buf: &mut [f32]| -> Result<usize, BoxError> {
///     buf.fill(1.0);
///     Ok(buf.len())                       // every row filled
/// };
/// let named = |i: usize, buf: &mut [f32]| -> Result<(usize, String), BoxError> {
///     buf[..3].fill(1.0);
///     Ok((3, format!("shard-{i}.bin")))   // 3 rows, and where they came from
/// };
/// # let _ = (plain, named);
/// ```
///
/// The data crosses from the loader thread to the calling thread, so it must be `Send`:
/// metadata that cannot be sent is a compile error, not a failure at run time.
///
/// ```compile_fail
/// use gpukit::{Pattern, Pipeline};
/// use std::rc::Rc;
///
/// let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
/// Pipeline::new(&ctx, Pattern::Double)
///     .batches(2)
///     .max_rows(4)
///     .input::<f32>(1)
///     .output::<f32>(1)
///     .run(
///         |i, buf| Ok((buf.len(), Rc::new(i))),   // Rc is not Send
///         |s, _b, x, y| s.copy(x, y),
///         |_b, _y| Ok(()),
///     )?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Filled<M> {
    /// The rows and the host data.
    fn into_parts(self) -> (usize, M);
}

impl Filled<()> for usize {
    fn into_parts(self) -> (usize, ()) {
        (self, ())
    }
}

impl<M> Filled<M> for (usize, M) {
    fn into_parts(self) -> (usize, M) {
        self
    }
}

/// The arrays of a batch, in or out: one element type (`f32`) or a tuple of two to four
/// (`(f32, u32)`), each array with its own width (elements per row).
///
/// Each stage sees the arrays in the form it works with, for exactly the batch's rows:
///
/// | | one array `T` | a tuple `(T0, T1)` |
/// |---|---|---|
/// | widths | `usize` | `[usize; 2]` |
/// | the loader fills ([`Arrays::HostMut`]) | `&mut [T]` (`max_rows` rows) | `(&mut [T0], &mut [T1])` |
/// | compute reads ([`Arrays::Views`]) | `GpuView<T>` | `(GpuView<T0>, GpuView<T1>)` |
/// | compute writes ([`Arrays::ViewsMut`]) | `GpuViewMut<T>` | `(GpuViewMut<T0>, GpuViewMut<T1>)` |
/// | the sink reads ([`Arrays::Host`]) | `&[T]` | `(&[T0], &[T1])` |
/// | [`crate::Pipeline::run_iter`] items ([`Arrays::Owned`]) | `Vec<T>` | `(Vec<T0>, Vec<T1>)` |
///
/// The trait is sealed: the element types of `gpukit-core` (f16 and bf16 with this crate's
/// `half` feature) and tuples of them implement it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a set of batch arrays",
    label = "set the arrays with `.input::<T>(widths)` and `.output::<T>(widths)`: an element type or a tuple of 2 to 4"
)]
pub trait Arrays<B: Backend>: private::Sealed + Sized + 'static {
    /// Elements per row of each array: `usize` for one array, `[usize; N]` for a tuple.
    type Widths: Copy + Send + Sync + std::fmt::Debug + 'static;
    /// The loader's pinned staging memory, `max_rows` rows of each array.
    type HostMut<'a>;
    /// The downloaded outputs, as the sink reads them.
    type Host<'a>;
    /// The batch's device inputs, as compute reads them.
    type Views<'a>;
    /// The batch's device outputs, as compute writes them.
    type ViewsMut<'a>;
    /// One batch as owned host vectors (what [`crate::Pipeline::run_iter`] takes).
    type Owned: Send;

    // The engine's steps, for all arrays at once; hidden: only this crate calls them.

    #[doc(hidden)]
    /// The arrays' device memory (one slot's), `max_rows` rows each.
    type Device: Send;
    #[doc(hidden)]
    /// Pinned host buffers, one per array.
    type Staging: Send;
    #[doc(hidden)]
    /// Copies in flight that own their staging buffers.
    type Copies;

    #[doc(hidden)]
    /// The widths as a list.
    fn width_list(widths: &Self::Widths) -> Vec<usize>;
    #[doc(hidden)]
    /// The element types, in order.
    fn dtypes() -> Vec<DType>;
    #[doc(hidden)]
    /// Zeroed device arrays of `rows` rows.
    fn alloc_device(
        ctx: &Context<B>,
        widths: &[usize],
        rows: usize,
    ) -> gpukit_core::Result<Self::Device>;
    #[doc(hidden)]
    /// Pinned host buffers of `rows` rows.
    fn alloc_staging(
        ctx: &Context<B>,
        widths: &[usize],
        rows: usize,
        usage: HostUse,
    ) -> gpukit_core::Result<Self::Staging>;
    #[doc(hidden)]
    /// Cuts every buffer to `rows` rows.
    fn truncate(staging: &mut Self::Staging, widths: &[usize], rows: usize);
    #[doc(hidden)]
    /// The staging buffers as the loader fills them.
    fn host_mut(staging: &mut Self::Staging) -> Self::HostMut<'_>;
    #[doc(hidden)]
    /// The buffers as the sink reads them.
    fn host(staging: &Self::Staging) -> Self::Host<'_>;
    #[doc(hidden)]
    /// The first `rows` rows of each array, to read.
    fn views<'a>(
        device: &'a Self::Device,
        widths: &[usize],
        rows: usize,
    ) -> gpukit_core::Result<Self::Views<'a>>;
    #[doc(hidden)]
    /// The first `rows` rows of each array, to write.
    fn views_mut<'a>(
        device: &'a mut Self::Device,
        widths: &[usize],
        rows: usize,
    ) -> gpukit_core::Result<Self::ViewsMut<'a>>;
    #[doc(hidden)]
    /// Enqueues the copy of each (truncated) staging buffer into the first rows of its
    /// array. On error the copies already enqueued finish before their buffers go.
    fn upload(
        stream: &Stream<B>,
        staging: Self::Staging,
        device: &mut Self::Device,
    ) -> gpukit_core::Result<Self::Copies>;
    #[doc(hidden)]
    /// Enqueues the copy of the first rows of each array into its (truncated) buffer.
    fn download(
        stream: &Stream<B>,
        device: &Self::Device,
        staging: Self::Staging,
    ) -> gpukit_core::Result<Self::Copies>;
    #[doc(hidden)]
    /// Waits for the copies and gives the buffers back.
    fn wait(copies: Self::Copies) -> gpukit_core::Result<Self::Staging>;
    #[doc(hidden)]
    /// Whether every copy is done (a failed query counts as done: `wait` reports it).
    fn is_ready(copies: &Self::Copies) -> bool;
    #[doc(hidden)]
    /// The rows of an owned batch, checked against the widths.
    fn owned_rows(owned: &Self::Owned, widths: &[usize]) -> Result<usize, String>;
    #[doc(hidden)]
    /// Copies an owned batch into staging buffers (whose first rows it fits).
    fn fill_from(owned: Self::Owned, staging: &mut Self::Staging);
    #[doc(hidden)]
    /// The downloaded outputs as owned vectors (what an async sink is given).
    fn to_owned(host: Self::Host<'_>) -> Self::Owned;
}

pub(crate) mod private {
    /// Seals [`super::Arrays`]: only this crate's impls exist.
    pub trait Sealed {}
}

/// One array's part of each engine step; the impls below chain them over a tuple.
fn device_one<T: Element, B: Backend>(
    ctx: &Context<B>,
    width: usize,
    rows: usize,
) -> gpukit_core::Result<GpuArray<T, B>> {
    ctx.alloc_zeros::<T>(elements(width, rows))
}

fn staging_one<T: Element, B: Backend>(
    ctx: &Context<B>,
    width: usize,
    rows: usize,
    usage: HostUse,
) -> gpukit_core::Result<HostBuffer<T, B>> {
    ctx.alloc_host::<T>(elements(width, rows), usage)
}

fn upload_one<T: Element, B: Backend>(
    stream: &Stream<B>,
    buf: HostBuffer<T, B>,
    device: &mut GpuArray<T, B>,
) -> gpukit_core::Result<Pending<HostBuffer<T, B>, B>> {
    let n = buf.len();
    let mut dst = device.slice_mut(..n)?;
    stream.upload(buf, &mut dst).map_err(|r| r.error)
}

fn download_one<T: Element, B: Backend>(
    stream: &Stream<B>,
    device: &GpuArray<T, B>,
    buf: HostBuffer<T, B>,
) -> gpukit_core::Result<Pending<HostBuffer<T, B>, B>> {
    let src = device.slice(..buf.len())?;
    stream.download(&src, buf).map_err(|r| r.error)
}

fn wait_one<T: Element, B: Backend>(
    copy: Pending<HostBuffer<T, B>, B>,
) -> gpukit_core::Result<HostBuffer<T, B>> {
    copy.wait().map_err(|r| r.error)
}

fn ready_one<H, B: Backend>(copy: &Pending<H, B>) -> bool {
    copy.is_ready().unwrap_or(true)
}

fn owned_rows_one<T>(v: &[T], width: usize, k: usize) -> Result<usize, String> {
    if width == 0 || !v.len().is_multiple_of(width) {
        return Err(format!(
            "array {k} has {} elements, not a whole number of rows of {width}",
            v.len()
        ));
    }
    Ok(v.len() / width)
}

/// `width * rows`; the builder has checked that the maximum does not overflow.
fn elements(width: usize, rows: usize) -> usize {
    width.saturating_mul(rows)
}

macro_rules! single {
    ($($t:ty),* $(,)?) => {$(
        impl private::Sealed for $t {}

        impl<B: Backend> Arrays<B> for $t {
            type Widths = usize;
            type HostMut<'a> = &'a mut [$t];
            type Host<'a> = &'a [$t];
            type Views<'a> = GpuView<'a, $t, B>;
            type ViewsMut<'a> = GpuViewMut<'a, $t, B>;
            type Owned = Vec<$t>;
            type Device = GpuArray<$t, B>;
            type Staging = HostBuffer<$t, B>;
            type Copies = Pending<HostBuffer<$t, B>, B>;

            fn width_list(widths: &usize) -> Vec<usize> {
                vec![*widths]
            }
            fn dtypes() -> Vec<DType> {
                vec![<$t as Element>::DTYPE]
            }
            fn alloc_device(ctx: &Context<B>, w: &[usize], rows: usize)
                -> gpukit_core::Result<Self::Device> {
                device_one(ctx, w[0], rows)
            }
            fn alloc_staging(ctx: &Context<B>, w: &[usize], rows: usize, usage: HostUse)
                -> gpukit_core::Result<Self::Staging> {
                staging_one(ctx, w[0], rows, usage)
            }
            fn truncate(s: &mut Self::Staging, w: &[usize], rows: usize) {
                s.truncate(elements(w[0], rows));
            }
            fn host_mut(s: &mut Self::Staging) -> &mut [$t] {
                s
            }
            fn host(s: &Self::Staging) -> &[$t] {
                s
            }
            fn views<'a>(d: &'a Self::Device, w: &[usize], rows: usize)
                -> gpukit_core::Result<GpuView<'a, $t, B>> {
                d.slice(..elements(w[0], rows))
            }
            fn views_mut<'a>(d: &'a mut Self::Device, w: &[usize], rows: usize)
                -> gpukit_core::Result<GpuViewMut<'a, $t, B>> {
                d.slice_mut(..elements(w[0], rows))
            }
            fn upload(s: &Stream<B>, staging: Self::Staging, d: &mut Self::Device)
                -> gpukit_core::Result<Self::Copies> {
                upload_one(s, staging, d)
            }
            fn download(s: &Stream<B>, d: &Self::Device, staging: Self::Staging)
                -> gpukit_core::Result<Self::Copies> {
                download_one(s, d, staging)
            }
            fn wait(c: Self::Copies) -> gpukit_core::Result<Self::Staging> {
                wait_one(c)
            }
            fn is_ready(c: &Self::Copies) -> bool {
                ready_one(c)
            }
            fn owned_rows(o: &Vec<$t>, w: &[usize]) -> Result<usize, String> {
                owned_rows_one(o, w[0], 0)
            }
            fn fill_from(o: Vec<$t>, s: &mut Self::Staging) {
                s[..o.len()].copy_from_slice(&o);
            }
            fn to_owned(host: &[$t]) -> Vec<$t> {
                host.to_vec()
            }
        }
    )*};
}

single!(f32, f64, i32, u32, i64, u64, u8, i8);
#[cfg(feature = "half")]
single!(gpukit_core::half::f16, gpukit_core::half::bf16);

macro_rules! tuple {
    ($n:literal: $($t:ident $k:tt),+) => {
        impl<$($t: private::Sealed + Element),+> private::Sealed for ($($t,)+) {}

        impl<B: Backend, $($t: private::Sealed + Element),+> Arrays<B> for ($($t,)+) {
            type Widths = [usize; $n];
            type HostMut<'a> = ($(&'a mut [$t],)+);
            type Host<'a> = ($(&'a [$t],)+);
            type Views<'a> = ($(GpuView<'a, $t, B>,)+);
            type ViewsMut<'a> = ($(GpuViewMut<'a, $t, B>,)+);
            type Owned = ($(Vec<$t>,)+);
            type Device = ($(GpuArray<$t, B>,)+);
            type Staging = ($(HostBuffer<$t, B>,)+);
            type Copies = ($(Pending<HostBuffer<$t, B>, B>,)+);

            fn width_list(widths: &[usize; $n]) -> Vec<usize> {
                widths.to_vec()
            }
            fn dtypes() -> Vec<DType> {
                vec![$(<$t as Element>::DTYPE),+]
            }
            fn alloc_device(ctx: &Context<B>, w: &[usize], rows: usize)
                -> gpukit_core::Result<Self::Device> {
                Ok(($(device_one::<$t, B>(ctx, w[$k], rows)?,)+))
            }
            fn alloc_staging(ctx: &Context<B>, w: &[usize], rows: usize, usage: HostUse)
                -> gpukit_core::Result<Self::Staging> {
                Ok(($(staging_one::<$t, B>(ctx, w[$k], rows, usage)?,)+))
            }
            fn truncate(s: &mut Self::Staging, w: &[usize], rows: usize) {
                $(s.$k.truncate(elements(w[$k], rows));)+
            }
            fn host_mut(s: &mut Self::Staging) -> ($(&mut [$t],)+) {
                ($(&mut *s.$k,)+)
            }
            fn host(s: &Self::Staging) -> ($(&[$t],)+) {
                ($(&*s.$k,)+)
            }
            fn views<'a>(d: &'a Self::Device, w: &[usize], rows: usize)
                -> gpukit_core::Result<($(GpuView<'a, $t, B>,)+)> {
                Ok(($(d.$k.slice(..elements(w[$k], rows))?,)+))
            }
            fn views_mut<'a>(d: &'a mut Self::Device, w: &[usize], rows: usize)
                -> gpukit_core::Result<($(GpuViewMut<'a, $t, B>,)+)> {
                Ok(($(d.$k.slice_mut(..elements(w[$k], rows))?,)+))
            }
            fn upload(s: &Stream<B>, staging: Self::Staging, d: &mut Self::Device)
                -> gpukit_core::Result<Self::Copies> {
                // `?` drops the copies already enqueued; a Pending's drop waits for its copy.
                Ok(($(upload_one(s, staging.$k, &mut d.$k)?,)+))
            }
            fn download(s: &Stream<B>, d: &Self::Device, staging: Self::Staging)
                -> gpukit_core::Result<Self::Copies> {
                Ok(($(download_one(s, &d.$k, staging.$k)?,)+))
            }
            fn wait(c: Self::Copies) -> gpukit_core::Result<Self::Staging> {
                // Every copy is waited for (and its buffer kept) before the first error is
                // returned, so no buffer is dropped while a later copy may still use it.
                let waited = ($(wait_one(c.$k),)+);
                Ok(($(waited.$k?,)+))
            }
            fn is_ready(c: &Self::Copies) -> bool {
                $(ready_one(&c.$k))&&+
            }
            fn owned_rows(o: &Self::Owned, w: &[usize]) -> Result<usize, String> {
                let rows = [$(owned_rows_one(&o.$k, w[$k], $k)?),+];
                if rows.iter().any(|&r| r != rows[0]) {
                    return Err(format!("the arrays hold different numbers of rows: {rows:?}"));
                }
                Ok(rows[0])
            }
            fn fill_from(o: Self::Owned, s: &mut Self::Staging) {
                $(s.$k[..o.$k.len()].copy_from_slice(&o.$k);)+
            }
            fn to_owned(host: Self::Host<'_>) -> Self::Owned {
                ($(host.$k.to_vec(),)+)
            }
        }
    };
}

tuple!(2: T0 0, T1 1);
tuple!(3: T0 0, T1 1, T2 2);
tuple!(4: T0 0, T1 1, T2 2, T3 3);
