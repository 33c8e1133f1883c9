//! Comparisons into `u8` masks, `select` (NumPy's and PyTorch's `where`), counting equal
//! elements, rows gathered and scattered by a `u32` index array, one-hot rows, `arange` and
//! random permutations.
//!
//! An index array is read on the device, so a bad index cannot be refused before the op is
//! queued: the op skips it (a gathered or one-hot row stays zero, a scattered row is not
//! added) and the context's fault record (the one `#[kernel]`s use) reports the first as
//! [`Error::KernelFailed`] at the stream's next `sync` (or `query` that finds it idle), or
//! the context's. No op reads or writes outside its arrays, whatever the indices.

use gpukit_macros::kernel;

use crate::array::{DeviceRead, DeviceWrite};
use crate::backend::Backend;
use crate::element::Numeric;
use crate::error::{same_len, Error, Result};
use crate::kernel::{In, Out, Reads, Value, Writes};
use crate::optable::{self, CmpOp, Shape};
use crate::stream::Stream;

use super::shape_len;

/// Adds to `out[0]` the number of positions where `a` and `b` are equal (compared in the
/// compute type, so a NaN equals nothing), wrapping: each thread counts its elements of a
/// grid-stride loop, each subgroup adds its threads' counts and one lane adds that to
/// `out[0]` atomically.
#[kernel(core = "crate")]
fn count_eq<T: Numeric>(a: &[T], b: &[T], out: &mut [u32]) {
    let stride = grid_dim_x() * block_dim_x();
    let mut c: u32 = 0;
    let mut i = global_x();
    while i < a.len() {
        if a[i] == b[i] {
            c += 1;
        }
        i += stride;
    }
    let n = subgroup_add(c);
    if subgroup_lane() == 0 && n > 0 {
        atomic_add(&mut out[0], n);
    }
}

/// `out[i] = (a[i] op b[i]) as u8`, `b[i]` the scalar `s` where `scalar` is not 0, `op`
/// [`CmpOp`]'s position in [`CmpOp::ALL`]; compared in the compute type (IEEE).
#[kernel(core = "crate")]
fn compare<T: Numeric>(a: &[T], b: &[T], s: T, op: u32, scalar: u32, out: &mut [u8]) {
    let stride = grid_dim_x() * block_dim_x();
    let mut i = global_x();
    while i < out.len() {
        let x = a[i];
        let y = if scalar != 0 { s } else { b[i] };
        let mut r = false;
        if op == 0 {
            r = x == y;
        } else if op == 1 {
            r = x != y;
        } else if op == 2 {
            r = x < y;
        } else if op == 3 {
            r = x <= y;
        } else if op == 4 {
            r = x > y;
        } else {
            r = x >= y;
        }
        out[i] = r as u8;
        i += stride;
    }
}

/// `out[i] = if mask[i] != 0 { a[i] } else { b[i] }`, `b[i]` the scalar `s` where `scalar`
/// is not 0.
#[kernel(core = "crate")]
fn select_elements<T: Numeric>(mask: &[u8], a: &[T], b: &[T], s: T, scalar: u32, out: &mut [T]) {
    let stride = grid_dim_x() * block_dim_x();
    let mut i = global_x();
    while i < out.len() {
        if mask[i] != 0 {
            out[i] = a[i];
        } else if scalar != 0 {
            out[i] = s;
        } else {
            out[i] = b[i];
        }
        i += stride;
    }
}

/// `out[i] = start + (base + i) * step` in the compute type (`out` a window of the array
/// from element `base`).
#[kernel(core = "crate")]
fn arange<T: Numeric>(out: &mut [T], start: T, step: T, base: u32) {
    let stride = grid_dim_x() * block_dim_x();
    let mut i = global_x();
    while i < out.len() {
        out[i] = start + ((base as usize + i) as T) * step;
        i += stride;
    }
}

/// Row `r` of `out` (`idx.len()` rows) is row `idx[r]` of the table `src` (rows as wide
/// as `out`'s); a row number past the table leaves its row zero and is reported.
#[kernel(core = "crate")]
fn gather_rows<T: Numeric>(src: &[T], idx: &[u32], out: &mut [T]) {
    let cols = out.len() / idx.len();
    let rows = src.len() / cols;
    let stride = grid_dim_x() * block_dim_x();
    let mut e = global_x();
    while e < out.len() {
        let r = idx[e / cols] as usize;
        let j = e % cols;
        if r < rows {
            out[e] = src[r * cols + j];
        } else {
            out[e] = 0;
            if j == 0 {
                report_out_of_bounds("src", r, rows);
            }
        }
        e += stride;
    }
}

/// The scatter-add kernels, one per element type with atomic adds: row `r` of `src`
/// (`idx.len()` rows) added into row `idx[r]` of `out` (rows as wide as `src`'s); a row
/// number past `out` is skipped and reported.
macro_rules! scatter_kernels {
    ($($name:ident: $t:ident),*) => {$(
        #[kernel(core = "crate")]
        fn $name(src: &[$t], idx: &[u32], out: &mut [$t]) {
            let cols = src.len() / idx.len();
            let rows = out.len() / cols;
            let stride = grid_dim_x() * block_dim_x();
            let mut e = global_x();
            while e < src.len() {
                let r = idx[e / cols] as usize;
                let j = e % cols;
                if r < rows {
                    atomic_add(&mut out[r * cols + j], src[e]);
                } else if j == 0 {
                    report_out_of_bounds("out", r, rows);
                }
                e += stride;
            }
        }
    )*};
}
scatter_kernels!(scatter_f32: f32, scatter_i32: i32, scatter_u32: u32, scatter_f64: f64, scatter_i64: i64, scatter_u64: u64);

/// The signature of the kernels that gather and scatter rows.
type ScatterSig<T> = (In<T>, In<u32>, Out<T>);

/// `scatter_add_rows`'s kernel for `T`, where `T` has atomic adds.
fn scatter_spec<T: Numeric>() -> Option<crate::KernelSpec<ScatterSig<T>>> {
    scatter_f32()
        .retyped()
        .or_else(|| scatter_i32().retyped())
        .or_else(|| scatter_u32().retyped())
        .or_else(|| scatter_f64().retyped())
        .or_else(|| scatter_i64().retyped())
        .or_else(|| scatter_u64().retyped())
}

/// One-hot rows: row `r` of `out` (`idx.len()` rows of classes) is 1 at column `idx[r]`, 0
/// elsewhere; a class past the row leaves it zero and is reported.
#[kernel(core = "crate")]
fn one_hot<T: Numeric>(idx: &[u32], out: &mut [T]) {
    let classes = out.len() / idx.len();
    let stride = grid_dim_x() * block_dim_x();
    let mut e = global_x();
    while e < out.len() {
        let c = idx[e / classes] as usize;
        let j = e % classes;
        if c == j {
            out[e] = 1;
        } else {
            out[e] = 0;
        }
        if j == 0 && c >= classes {
            report_out_of_bounds("classes", c, classes);
        }
        e += stride;
    }
}

/// The index checks: the first of an array's `u32`s that is `bound` or more reported,
/// against the array's name at the user's call.
macro_rules! check_kernels {
    ($($name:ident($arr:ident, $what:literal)),*) => {$(
        #[kernel(core = "crate")]
        fn $name($arr: &[u32], bound: u32) {
            let stride = grid_dim_x() * block_dim_x();
            let mut i = global_x();
            while i < $arr.len() {
                let v = $arr[i];
                if v >= bound {
                    report_out_of_bounds($what, v as usize, bound as usize);
                }
                i += stride;
            }
        }
    )*};
}
check_kernels!(check_idx(idx, "idx"), check_labels(labels, "labels"));

/// The comparison methods: array and scalar forms.
macro_rules! comparisons {
    ($( $op:ident: $arr:ident, $sca:ident, $what:literal; )*) => {$(
        #[doc = concat!("`mask[i] = (a[i] ", $what, " b[i]) as u8` (1 or 0; IEEE: a NaN compares false except with `ne`).")]
        pub fn $arr<T: Numeric>(
            &self,
            a: &impl DeviceRead<T, B>,
            b: &impl DeviceRead<T, B>,
            mask: &mut impl DeviceWrite<u8, B>,
        ) -> Result<()> {
            self.compare(CmpOp::$op, a, b, mask)
        }

        #[doc = concat!("`mask[i] = (a[i] ", $what, " s) as u8` (see [`Stream::compare_scalar`]).")]
        pub fn $sca<T: Numeric>(
            &self,
            a: &impl DeviceRead<T, B>,
            s: T,
            mask: &mut impl DeviceWrite<u8, B>,
        ) -> Result<()> {
            self.compare_scalar(CmpOp::$op, a, s, mask)
        }
    )*};
}

impl<B: Backend> Stream<B> {
    comparisons! {
        Eq: eq, eq_scalar, "==";
        Ne: ne, ne_scalar, "!=";
        Lt: lt, lt_scalar, "<";
        Le: le, le_scalar, "<=";
        Gt: gt, gt_scalar, ">";
        Ge: ge, ge_scalar, ">=";
    }

    /// `mask[i] = (a[i] op b[i]) as u8`: 1 where the comparison holds, else 0, compared in
    /// the compute type (IEEE for floats: every comparison with a NaN is false but `Ne`).
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// use gpukit::core::optable::CmpOp;
    /// let a = ctx.alloc_upload(&[1.0f32, 5.0, f32::NAN])?;
    /// let b = ctx.alloc_upload(&[2.0f32, 5.0, 1.0])?;
    /// let mut m = ctx.alloc::<u8>(3)?;
    /// ctx.compare(CmpOp::Le, &a, &b, &mut m)?;
    /// assert_eq!(m.download()?, [1, 1, 0]);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn compare<T: Numeric>(
        &self,
        op: CmpOp,
        a: &impl DeviceRead<T, B>,
        b: &impl DeviceRead<T, B>,
        mask: &mut impl DeviceWrite<u8, B>,
    ) -> Result<()> {
        let name = op.name();
        same_len(name, "b", a.len(), b.len())?;
        same_len(name, "mask", a.len(), mask.len())?;
        self.compare_with(name, op, a, (Reads::of(b), None), mask)
    }

    /// The comparison `op` of `a` with the array `b` or, where `s` is given, the scalar
    /// (`b` is then `a` itself, unread); errors name `name`.
    fn compare_with<T: Numeric>(
        &self,
        name: &'static str,
        op: CmpOp,
        a: &impl DeviceRead<T, B>,
        (b, s): (Reads<'_, T, B>, Option<T>),
        mask: &mut impl DeviceWrite<u8, B>,
    ) -> Result<()> {
        self.same_contexts(
            name,
            [
                ("a", a.slice_ref().context_id()),
                ("b", b.0.context_id()),
                ("mask", mask.slice_ref().context_id()),
            ],
        )?;
        if a.is_empty() {
            return Ok(());
        }
        let code = CmpOp::ALL.iter().position(|&c| c == op).unwrap_or(0) as u32;
        let (ra, rm) = (Reads::of(a), Writes::of(mask));
        let (sv, scalar) = (Value(s.unwrap_or(T::ZERO)), u32::from(s.is_some()));
        let spec = || {
            compare::<T>().native(|(a, b, s, op, scalar, out)| {
                let op = CmpOp::ALL[*op as usize % CmpOp::ALL.len()];
                let (b, s) = (*b, T::__from_cpu(s));
                match *scalar != 0 {
                    true => optable::compare_slice(op, a, |_| s, out),
                    false => optable::compare_slice(op, a, |i| b[i], out),
                }
            })
        };
        for (start, len) in self.windows(a.len(), std::mem::size_of::<T>()) {
            let (wa, wb) = (ra.window(start, len), b.window(start, len));
            let args = (wa, wb, sv, code, scalar, rm.window(start, len));
            self.launch_builtin(name, spec, self.grid_stride(len), args)?;
        }
        Ok(())
    }

    /// `mask[i] = (a[i] op s) as u8` (see [`Stream::compare`]).
    pub fn compare_scalar<T: Numeric>(
        &self,
        op: CmpOp,
        a: &impl DeviceRead<T, B>,
        s: T,
        mask: &mut impl DeviceWrite<u8, B>,
    ) -> Result<()> {
        let name = op.name();
        same_len(name, "mask", a.len(), mask.len())?;
        self.compare_with(name, op, a, (Reads::of(a), Some(s)), mask)
    }

    /// `out[i] = if mask[i] != 0 { a[i] } else { b[i] }`: NumPy's and PyTorch's `where`.
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let h = ctx.alloc_upload(&[-1.0f32, 2.0, 0.5])?;
    /// let mut pos = ctx.alloc::<u8>(3)?;
    /// ctx.gt_scalar(&h, 0.0, &mut pos)?;
    /// let mut out = ctx.alloc::<f32>(3)?;
    /// ctx.select_scalar(&pos, &h, -9.0, &mut out)?;
    /// assert_eq!(out.download()?, [-9.0, 2.0, 0.5]);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    #[doc(alias = "where")]
    pub fn select<T: Numeric>(
        &self,
        mask: &impl DeviceRead<u8, B>,
        a: &impl DeviceRead<T, B>,
        b: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let name = "select";
        same_len(name, "a", mask.len(), a.len())?;
        same_len(name, "b", mask.len(), b.len())?;
        same_len(name, "out", mask.len(), out.len())?;
        self.select_with(name, mask, a, (Reads::of(b), None), out)
    }

    /// `select` from the array `b` or, where `s` is given, the scalar (`b` is then `a`
    /// itself, unread); errors name `name`.
    fn select_with<T: Numeric>(
        &self,
        name: &'static str,
        mask: &impl DeviceRead<u8, B>,
        a: &impl DeviceRead<T, B>,
        (b, s): (Reads<'_, T, B>, Option<T>),
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        self.same_contexts(
            name,
            [
                ("mask", mask.slice_ref().context_id()),
                ("a", a.slice_ref().context_id()),
                ("b", b.0.context_id()),
                ("out", out.slice_ref().context_id()),
            ],
        )?;
        if a.is_empty() {
            return Ok(());
        }
        let (rm, ra, ro) = (Reads::of(mask), Reads::of(a), Writes::of(out));
        let (sv, scalar) = (Value(s.unwrap_or(T::ZERO)), u32::from(s.is_some()));
        let spec = || {
            select_elements::<T>().native(|(mask, a, b, s, scalar, out)| {
                let (b, s) = (*b, T::__from_cpu(s));
                match *scalar != 0 {
                    true => optable::where_slice(mask, a, |_| s, out),
                    false => optable::where_slice(mask, a, |i| b[i], out),
                }
            })
        };
        for (start, len) in self.windows(a.len(), std::mem::size_of::<T>()) {
            let (wa, wb) = (ra.window(start, len), b.window(start, len));
            let args = (
                rm.window(start, len),
                wa,
                wb,
                sv,
                scalar,
                ro.window(start, len),
            );
            self.launch_builtin(name, spec, self.grid_stride(len), args)?;
        }
        Ok(())
    }

    /// `out[i] = if mask[i] != 0 { a[i] } else { s }` (see [`Stream::select`]).
    #[doc(alias = "where")]
    pub fn select_scalar<T: Numeric>(
        &self,
        mask: &impl DeviceRead<u8, B>,
        a: &impl DeviceRead<T, B>,
        s: T,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let name = "select_scalar";
        same_len(name, "a", mask.len(), a.len())?;
        same_len(name, "out", mask.len(), out.len())?;
        self.select_with(name, mask, a, (Reads::of(a), Some(s)), out)
    }

    /// Writes the number of positions where `a` and `b` hold equal elements into the
    /// one-element `out` (a classifier's correct predictions: `row_argmax` of its logits
    /// against the labels): a reduction on the device, compared in the compute type (a NaN
    /// equals nothing), the count wrapping past `u32::MAX`. No scratch memory: it can be
    /// captured in a graph.
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let pred = ctx.alloc_upload(&[3u32, 1, 4, 1])?;
    /// let labels = ctx.alloc_upload(&[3u32, 1, 0, 2])?;
    /// let mut correct = ctx.alloc::<u32>(1)?;
    /// ctx.count_eq_into(&pred, &labels, &mut correct)?;
    /// assert_eq!(correct.download()?, [2]);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn count_eq_into<T: Numeric>(
        &self,
        a: &impl DeviceRead<T, B>,
        b: &impl DeviceRead<T, B>,
        out: &mut impl DeviceWrite<u32, B>,
    ) -> Result<()> {
        let name = "count_eq_into";
        same_len(name, "b", a.len(), b.len())?;
        same_len(name, "out", 1, out.len())?;
        self.fill(out, 0)?;
        if a.is_empty() {
            return Ok(());
        }
        let spec = || {
            count_eq::<T>().native(|(a, b, out)| {
                out[0] = out[0].wrapping_add(optable::count_eq(a, b));
            })
        };
        let (ra, rb, ro) = (Reads::of(a), Reads::of(b), Writes::of(out));
        // Each window's count is added to `out[0]`.
        for (start, len) in self.windows(a.len(), std::mem::size_of::<T>()) {
            let args = (ra.window(start, len), rb.window(start, len), ro);
            self.launch_builtin(name, spec, self.grid_stride(len), args)?;
        }
        Ok(())
    }

    /// Rows of the `shape` matrix `src` picked by the `u32` indices `idx`: row `r` of `out`
    /// (`idx.len() x shape.cols`) is row `idx[r]` of `src` (PyTorch's `index_select` along
    /// dimension 0; a minibatch from a dataset on the device). An index of `shape.rows` or
    /// more leaves its row zero and is [`Error::KernelFailed`] at the next sync (see the
    /// module docs); nothing outside `src` is read.
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// use gpukit::Shape;
    /// let table = ctx.alloc_upload(&[0.0f32, 0.5, 1.0, 1.5, 2.0, 2.5])?; // 3 x 2
    /// let idx = ctx.alloc_upload(&[2u32, 0, 2])?;
    /// let mut rows = ctx.alloc::<f32>(6)?;
    /// ctx.gather_rows(Shape::new(3, 2), &table, &idx, &mut rows)?;
    /// assert_eq!(rows.download()?, [2.0, 2.5, 0.0, 0.5, 2.0, 2.5]);
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    #[doc(alias = "index_select")]
    pub fn gather_rows<T: Numeric>(
        &self,
        shape: Shape,
        src: &impl DeviceRead<T, B>,
        idx: &impl DeviceRead<u32, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let name = "gather_rows";
        same_len(name, "src", shape_len(name, shape)?, src.len())?;
        same_len(
            name,
            "out",
            shape_len(name, Shape::new(idx.len(), shape.cols))?,
            out.len(),
        )?;
        if shape.cols > 0 && !idx.is_empty() && shape.rows == 0 {
            return Err(Error::InvalidShape {
                op: name,
                arg: "src",
                message: "no rows to gather from".into(),
            });
        }
        let spec = || {
            gather_rows::<T>().native_reporting(|(src, idx, out), f| {
                let cols = out.len() / idx.len();
                optable::gather_rows(src, cols, idx, out, |at, len| f.fault(0, at, len));
            })
        };
        self.launch_rows(name, spec, out.len(), (src, idx, out))
    }

    /// Adds row `r` of `src` (`idx.len() x shape.cols`) into row `idx[r]` of the `shape`
    /// matrix `out`; rows with the same index add up (an embedding's gradient: the backward
    /// pass of [`Stream::gather_rows`]). Floats add in an order that may differ between
    /// backends and runs (atomically on GPUs), so results are within rounding of the
    /// sequential sum; integers wrap, exactly. A bad index is skipped and reported as for
    /// [`Stream::gather_rows`]. Element types of 4 and 8 bytes (32 bits only on Vulkan,
    /// whose WGSL has no 64-bit atomics); others are [`Error::Unsupported`].
    pub fn scatter_add_rows<T: Numeric>(
        &self,
        shape: Shape,
        src: &impl DeviceRead<T, B>,
        idx: &impl DeviceRead<u32, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let name = "scatter_add_rows";
        if T::DTYPE.size() < 4 {
            return Err(Error::Unsupported {
                backend: self.backend().name(),
                what: format!(
                    "`{name}` on {} (GPUs add atomically in 4 and 8 bytes; scatter into f32 or i32)",
                    T::DTYPE
                ),
            });
        }
        same_len(name, "out", shape_len(name, shape)?, out.len())?;
        same_len(
            name,
            "src",
            shape_len(name, Shape::new(idx.len(), shape.cols))?,
            src.len(),
        )?;
        let spec = || {
            // Every type of 4 or 8 bytes has its kernel; a spec without code (refused when
            // loaded) stands for the others, which the check above turned away.
            scatter_spec::<T>()
                .unwrap_or_else(|| crate::KernelSpec::named("scatter_add_rows"))
                .native_reporting(|(src, idx, out), f| {
                    let cols = src.len() / idx.len();
                    optable::scatter_add_rows(src, cols, idx, out, |at, len| f.fault(2, at, len));
                })
        };
        self.launch_rows(name, spec, src.len(), (src, idx, out))
    }

    /// Launches `gather_rows`' or `scatter_add_rows`' kernel over `count` elements of
    /// `(src, idx, out)` after checking their contexts (nothing to do where `count` is 0).
    fn launch_rows<T: Numeric, F>(
        &self,
        name: &'static str,
        spec: F,
        count: usize,
        (src, idx, out): (
            &impl DeviceRead<T, B>,
            &impl DeviceRead<u32, B>,
            &mut impl DeviceWrite<T, B>,
        ),
    ) -> Result<()>
    where
        F: Fn() -> crate::KernelSpec<ScatterSig<T>> + 'static,
    {
        self.same_contexts(
            name,
            [
                ("src", src.slice_ref().context_id()),
                ("idx", idx.slice_ref().context_id()),
                ("out", out.slice_ref().context_id()),
            ],
        )?;
        if count == 0 {
            return Ok(());
        }
        let args = (Reads::of(src), Reads::of(idx), Writes::of(out));
        self.launch_builtin(name, spec, self.grid_stride(count), args)
    }

    /// One-hot rows: row `r` of the `shape` matrix `out` is 1 at column `idx[r]` and 0
    /// elsewhere (`shape.rows` indices, `shape.cols` classes). An index of `shape.cols` or
    /// more leaves its row zero and is reported as for [`Stream::gather_rows`].
    pub fn one_hot<T: Numeric>(
        &self,
        shape: Shape,
        idx: &impl DeviceRead<u32, B>,
        out: &mut impl DeviceWrite<T, B>,
    ) -> Result<()> {
        let name = "one_hot";
        same_len(name, "idx", shape.rows, idx.len())?;
        same_len(name, "out", shape_len(name, shape)?, out.len())?;
        if shape.cols == 0 && shape.rows > 0 {
            return Err(Error::InvalidShape {
                op: name,
                arg: "out",
                message: "0 classes: no index is in range".into(),
            });
        }
        self.same_contexts(
            name,
            [
                ("idx", idx.slice_ref().context_id()),
                ("out", out.slice_ref().context_id()),
            ],
        )?;
        if out.is_empty() {
            return Ok(());
        }
        let spec = || {
            one_hot::<T>().native_reporting(|(idx, out), f| {
                let classes = out.len() / idx.len();
                // Fault code 2: what the kernel's report names, after its two arrays.
                optable::one_hot_rows(idx, classes, out, |at, len| f.fault(2, at, len));
            })
        };
        let cfg = self.grid_stride(out.len());
        self.launch_builtin(name, spec, cfg, (Reads::of(idx), Writes::of(out)))
    }

    /// `out[i] = start + i * step`, in the compute type (`i` converted to it: exact below
    /// 2^24 in f32), integers wrapping.
    pub fn arange<T: Numeric>(
        &self,
        out: &mut impl DeviceWrite<T, B>,
        start: T,
        step: T,
    ) -> Result<()> {
        let name = "arange";
        self.same_contexts(name, [("out", out.slice_ref().context_id())])?;
        if out.is_empty() {
            return Ok(());
        }
        let spec = || {
            arange::<T>().native(|(out, start, step, base)| {
                let (start, step) = (T::__from_cpu(start), T::__from_cpu(step));
                optable::arange_slice(start, step, *base as usize, out);
            })
        };
        let (n, ro) = (out.len(), Writes::of(out));
        for (first, len) in self.windows(n, std::mem::size_of::<T>()) {
            // Windows exist on the wgpu backend alone, whose arrays have u32 indices.
            let base = u32::try_from(first).map_err(|_| Error::InvalidShape {
                op: name,
                arg: "out",
                message: format!("{n} elements in windows: a window past element 2^32"),
            })?;
            let args = (ro.window(first, len), Value(start), Value(step), base);
            self.launch_builtin(name, spec, self.grid_stride(len), args)?;
        }
        Ok(())
    }

    /// A random permutation of `0..out.len()` keyed by `seed` (a keyed Feistel network with
    /// cycle walking, [`crate::optable::permutation`]): the same permutation on every
    /// backend, each position computed alone. Shuffles a dataset on the device with
    /// [`Stream::gather_rows`]; [`crate::Rng::permutation`] draws the seed from a stream.
    ///
    /// ```
    /// # let ctx = gpukit::Context::new(gpukit::DeviceSpec::Cpu(None))?;
    /// let mut order = ctx.alloc::<u32>(10)?;
    /// ctx.permutation(&mut order, 7)?;
    /// let mut seen = order.download()?;
    /// seen.sort();
    /// assert_eq!(seen, (0..10).collect::<Vec<u32>>());
    /// # Ok::<(), gpukit::Error>(())
    /// ```
    pub fn permutation(&self, out: &mut impl DeviceWrite<u32, B>, seed: u64) -> Result<()> {
        let len = out.len();
        if len as u64 > u64::from(u32::MAX) + 1 {
            return Err(Error::InvalidShape {
                op: "permutation",
                arg: "out",
                message: format!("{len} elements: a u32 names at most 2^32"),
            });
        }
        let name = "permutation";
        self.same_contexts(name, [("out", out.slice_ref().context_id())])?;
        if len == 0 {
            return Ok(());
        }
        let key = optable::seed_key(seed);
        let h = optable::feistel_half_bits(len as u64);
        let last = (len - 1) as u32;
        let spec = || {
            super::random::permute().native(|(out, k0, k1, _, last, base)| {
                let seed = super::random::join(*k0, *k1);
                let (len, base) = (u64::from(*last) + 1, u64::from(*base));
                crate::native::split::pieces(out, 1, crate::native::split::MATH, |at, o| {
                    optable::permutation(seed, len, base + at as u64, o);
                });
            })
        };
        let ro = Writes::<u32, B>::of(out);
        for (first, n) in self.windows(len, 4) {
            // Positions below 2^32: `len` is at most 2^32.
            let args = (ro.window(first, n), key[0], key[1], h, last, first as u32);
            self.launch_builtin(name, spec, self.grid_stride(n), args)?;
        }
        Ok(())
    }

    /// Checks `idx` on the device: the first index of `bound` or more is
    /// [`Error::KernelFailed`] at the next sync (see the module docs), naming this call and
    /// `idx`. Nothing is written.
    pub fn check_indices(&self, idx: &impl DeviceRead<u32, B>, bound: usize) -> Result<()> {
        self.check_indices_as("check_indices", false, idx, bound)
    }

    /// [`Stream::check_indices`], the fault naming `call` and its array `idx` (`labels`
    /// where `labels` holds).
    pub(crate) fn check_indices_as(
        &self,
        call: &'static str,
        labels: bool,
        idx: &impl DeviceRead<u32, B>,
        bound: usize,
    ) -> Result<()> {
        let array = if labels { "labels" } else { "idx" };
        self.same_contexts(call, [(array, idx.slice_ref().context_id())])?;
        // No `u32` reaches a bound past `u32::MAX`.
        let Ok(bound) = u32::try_from(bound) else {
            return Ok(());
        };
        if idx.is_empty() {
            return Ok(());
        }
        let native = |k: crate::KernelSpec<(In<u32>, u32)>| {
            k.native_reporting(|(idx, bound), f| {
                if let Some(&bad) = idx.iter().find(|&&v| v >= *bound) {
                    f.fault(0, u64::from(bad), u64::from(*bound));
                }
            })
        };
        let (cfg, args) = (self.grid_stride(idx.len()), (Reads::of(idx), bound));
        match labels {
            true => self.launch_builtin(call, move || native(check_labels()), cfg, args),
            false => self.launch_builtin(call, move || native(check_idx()), cfg, args),
        }
    }
}
