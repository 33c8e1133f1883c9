//! The op table's element-wise ops as kernels: each entry's body, traced from its reference
//! into the kernel language ([`UnaryOp::body`], [`BinaryOp::body`]), inside a grid-stride
//! loop, built as a kernel of gpukit-kernel's IR at run time, once per op, element type and
//! form of operands, and compiled by the same emitters as a `#[kernel]`. The CPU backend runs
//! the entry's reference instead ([`Numeric::__unary`]: on vectors and across cores), which
//! gives the same bits for every op without a transcendental function.

use gpukit_kernel::ir::{
    Arr, BinOp, Body, Coord, Expr, ExprKind, Kernel as IrKernel, Local, Param, ParamKind, Place,
    Stmt, Storage, Ty,
};

use crate::backend::Backend;
use crate::element::{DType, Numeric};
use crate::error::{Error, Result};
use crate::kernel::{In, KernelSig, KernelSpec, Out, Reads, Value, Writes};
use crate::optable::{BinaryOp, RhsSlice, Shape, UnaryOp};
use crate::stream::Stream;

/// The second operand of a binary op.
pub(crate) enum Rhs2<'a, T, B: Backend> {
    /// An array of the output's length.
    Array(Reads<'a, T, B>),
    /// A row vector: element `j` with every row's column `j`.
    Row(Reads<'a, T, B>),
    /// A column vector: element `r` with every element of row `r`.
    Col(Reads<'a, T, B>),
    /// One value.
    Scalar(T),
}

impl<T: Copy, B: Backend> Clone for Rhs2<'_, T, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Copy, B: Backend> Copy for Rhs2<'_, T, B> {}

/// The IR type of an element type.
fn ty_of(d: DType) -> Ty {
    match d {
        DType::F32 => Ty::F32,
        DType::F64 => Ty::F64,
        DType::I32 => Ty::I32,
        DType::U32 => Ty::U32,
        DType::I64 => Ty::I64,
        DType::U64 => Ty::U64,
        DType::U8 => Ty::U8,
        DType::I8 => Ty::I8,
        DType::F16 => Ty::F16,
        DType::BF16 => Ty::BF16,
    }
}

fn e(kind: ExprKind, ty: Ty) -> Expr {
    Expr { kind, ty }
}

fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    let ty = if op.is_comparison() { Ty::Bool } else { a.ty };
    e(ExprKind::Binary(op, Box::new(a), Box::new(b)), ty)
}

fn local(n: usize, ty: Ty) -> Expr {
    e(ExprKind::Local(n), ty)
}

fn slice(name: &str, ty: Ty, mutable: bool, array: u32) -> Param {
    Param {
        name: name.into(),
        ty,
        kind: ParamKind::Slice { mutable, array },
    }
}

fn scalar(name: &str, ty: Ty) -> Param {
    Param {
        name: name.into(),
        ty,
        kind: ParamKind::Scalar,
    }
}

/// What feeds a kernel's operands: the first from `src` (parameter 0) or, in place, from
/// `out`; the second, for a binary op, from an array indexed by the mode or a scalar.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `out[i] = f(x[i])`: `(src, out)`, in place `(out)`.
    Unary,
    /// `out[i] = f(a[i], rhs[j])`, `j` by `mode` (0: `i`, 1: `i % cols`, 2: `i / cols`):
    /// `(src, rhs, mode, cols, out)`, in place `(out, rhs, mode, cols)`.
    Binary,
    /// `out[i] = f(a[i], s)`: `(src, s, out)`, in place `(out, s)`.
    Scalar,
}

/// The kernel `name` computing `body` (over the compute type of `elem`) element-wise in
/// the form `form`, into an array of `out` (`elem` but for a cast).
fn map_kernel(
    name: String,
    (elem, out_elem): (Ty, Ty),
    body: &Body,
    form: Form,
    in_place: bool,
) -> IrKernel {
    let c = elem.compute();
    // The arrays are numbered in parameter order, as fault reports name them.
    let mut params = Vec::new();
    let mut arrays = 0;
    let mut array = |name: &str, mutable: bool| {
        arrays += 1;
        slice(name, elem, mutable, arrays - 1)
    };
    params.push(if in_place {
        array("out", true)
    } else {
        array("src", false)
    });
    match form {
        Form::Unary => {}
        Form::Binary => {
            params.push(array("rhs", false));
            params.push(scalar("mode", Ty::U32));
            params.push(scalar("cols", Ty::U32));
        }
        Form::Scalar => params.push(scalar("s", elem)),
    }
    if !in_place {
        params.push(array("out", true));
    }
    if let Some(o) = params.iter_mut().find(|p| p.name == "out") {
        o.ty = out_elem;
    }
    let p = |name: &str| params.iter().position(|q| q.name == name).unwrap_or(0);
    let (out, rhs, mode, cols, s) = (p("out"), p("rhs"), p("mode"), p("cols"), p("s"));
    let src = if in_place { out } else { p("src") };

    // Locals: the body's operands first (its `Local(i)`s), then the loop's.
    let mut locals: Vec<Local> = body.operands.clone();
    let mut add = |name: &str, ty: Ty, mutable: bool| {
        locals.push(Local {
            name: name.into(),
            ty,
            mutable,
            storage: Storage::Plain,
        });
        locals.len() - 1
    };
    let stride = add("stride", Ty::Usize, false);
    let i = add("i", Ty::Usize, true);
    let (colsl, j) = (add("n_cols", Ty::Usize, false), add("j", Ty::Usize, true));
    let idx = |arr: usize, at: usize| {
        e(
            ExprKind::Index {
                arr: Arr::Param(arr),
                idx: Box::new(local(at, Ty::Usize)),
                proven: false,
            },
            c,
        )
    };
    let mut body_stmts = vec![Stmt::Let {
        local: 0,
        init: idx(src, i),
    }];
    match form {
        Form::Unary => {}
        Form::Binary => {
            let mode_is = |m: &str| {
                bin(
                    BinOp::Eq,
                    e(ExprKind::Param(mode), Ty::U32),
                    e(ExprKind::Lit(m.into()), Ty::U32),
                )
            };
            let set_j = |op: BinOp| Stmt::Assign {
                place: Place::Local(j),
                op: None,
                value: bin(op, local(i, Ty::Usize), local(colsl, Ty::Usize)),
            };
            body_stmts.push(Stmt::Let {
                local: j,
                init: local(i, Ty::Usize),
            });
            body_stmts.push(Stmt::If {
                cond: mode_is("1"),
                then: vec![set_j(BinOp::Rem)],
                els: vec![Stmt::If {
                    cond: mode_is("2"),
                    then: vec![set_j(BinOp::Div)],
                    els: Vec::new(),
                }],
            });
            body_stmts.push(Stmt::Let {
                local: 1,
                init: idx(rhs, j),
            });
        }
        Form::Scalar => body_stmts.push(Stmt::Let {
            local: 1,
            init: e(ExprKind::Param(s), c),
        }),
    }
    body_stmts.push(Stmt::Assign {
        place: Place::Index {
            arr: Arr::Param(out),
            idx: local(i, Ty::Usize),
            proven: false,
        },
        op: None,
        value: body.value.clone(),
    });
    body_stmts.push(Stmt::Assign {
        place: Place::Local(i),
        op: Some(BinOp::Add),
        value: local(stride, Ty::Usize),
    });
    let coord = |k: Coord| e(ExprKind::Coord(k, 0), Ty::Usize);
    let mut stmts = vec![
        Stmt::Let {
            local: stride,
            init: bin(BinOp::Mul, coord(Coord::GridDim), coord(Coord::BlockDim)),
        },
        Stmt::Let {
            local: i,
            init: coord(Coord::Global),
        },
    ];
    if form == Form::Binary {
        stmts.push(Stmt::Let {
            local: colsl,
            init: e(
                ExprKind::Cast(Box::new(e(ExprKind::Param(cols), Ty::U32))),
                Ty::Usize,
            ),
        });
    }
    stmts.push(Stmt::While {
        cond: bin(
            BinOp::Lt,
            local(i, Ty::Usize),
            e(ExprKind::Len(Arr::Param(out)), Ty::Usize),
        ),
        body: body_stmts,
    });
    let mut k = IrKernel {
        name,
        params,
        shared: Vec::new(),
        locals,
        body: stmts,
        atomic: Vec::new(),
        ret: None,
        calls: Vec::new(),
        comptime: Vec::new(),
        reports: Vec::new(),
    };
    k.assign_storage();
    k.prove_bounds();
    k
}

/// The spec of the kernel `name` computing `body` on elements of `T` in the form `form`,
/// without its native body.
fn spec_of<S: KernelSig, T: Numeric>(
    name: String,
    body: impl Fn(Ty) -> Body,
    form: Form,
    in_place: bool,
) -> KernelSpec<S> {
    let ty = ty_of(T::DTYPE);
    let name = if in_place { name + "_in_place" } else { name };
    KernelSpec::from_ir(&map_kernel(
        name,
        (ty, ty),
        &body(ty.compute()),
        form,
        in_place,
    ))
}

/// The spec of the unary op `op` on `T`: `(src, out)`.
fn unary_spec<T: Numeric>(op: UnaryOp) -> KernelSpec<(In<T>, Out<T>)> {
    spec_of::<(In<T>, Out<T>), T>(
        format!("unary_{}", op.name()),
        |c| op.body(c),
        Form::Unary,
        false,
    )
    .native(move |(src, out)| T::__unary(op, Some(src), out))
}

/// The spec of the unary op `op` on `T` in place: `(out)`.
fn unary_in_place_spec<T: Numeric>(op: UnaryOp) -> KernelSpec<(Out<T>,)> {
    spec_of::<(Out<T>,), T>(
        format!("unary_{}", op.name()),
        |c| op.body(c),
        Form::Unary,
        true,
    )
    .native(move |(out,)| T::__unary(op, None, out))
}

/// The second operand of a native binary body, from the kernel's `mode` and `cols`.
fn rhs_slice<'a, T: Copy>(
    rhs: &'a [T],
    mode: u32,
    cols: u32,
    out: usize,
) -> (RhsSlice<'a, T>, usize) {
    match mode {
        1 => (RhsSlice::Row(rhs), cols as usize),
        2 => (RhsSlice::Col(rhs), cols as usize),
        _ => (RhsSlice::Array(rhs), out.max(1)),
    }
}

/// The signature of a binary op's kernel: `(src, rhs, mode, cols, out)`.
type BinarySig<T> = (In<T>, In<T>, u32, u32, Out<T>);

/// The spec of the binary op `op` on `T` with an array operand: `(src, rhs, mode, cols,
/// out)`.
fn binary_spec<T: Numeric>(op: BinaryOp) -> KernelSpec<BinarySig<T>> {
    let name = format!("binary_{}", op.name());
    spec_of::<BinarySig<T>, T>(name, |c| op.body(c), Form::Binary, false).native(
        move |(src, rhs, mode, cols, out)| {
            let (r, c) = rhs_slice(rhs, *mode, *cols, out.len());
            T::__binary(op, Some(src), r, c, out)
        },
    )
}

/// [`binary_spec`] in place: `(out, rhs, mode, cols)`.
fn binary_in_place_spec<T: Numeric>(op: BinaryOp) -> KernelSpec<(Out<T>, In<T>, u32, u32)> {
    let name = format!("binary_{}", op.name());
    spec_of::<(Out<T>, In<T>, u32, u32), T>(name, |c| op.body(c), Form::Binary, true).native(
        move |(out, rhs, mode, cols)| {
            let (r, c) = rhs_slice(rhs, *mode, *cols, out.len());
            T::__binary(op, None, r, c, out)
        },
    )
}

/// The spec of the binary op `op` on `T` with a scalar operand: `(src, s, out)`.
fn scalar_spec<T: Numeric>(op: BinaryOp) -> KernelSpec<(In<T>, T, Out<T>)> {
    let name = format!("scalar_{}", op.name());
    spec_of::<(In<T>, T, Out<T>), T>(name, |c| op.body(c), Form::Scalar, false).native(
        move |(src, s, out)| {
            let n = out.len();
            T::__binary(op, Some(src), RhsSlice::Scalar(T::__from_cpu(s)), n, out)
        },
    )
}

/// [`scalar_spec`] in place: `(out, s)`.
fn scalar_in_place_spec<T: Numeric>(op: BinaryOp) -> KernelSpec<(Out<T>, T)> {
    let name = format!("scalar_{}", op.name());
    spec_of::<(Out<T>, T), T>(name, |c| op.body(c), Form::Scalar, true).native(move |(out, s)| {
        let n = out.len();
        T::__binary(op, None, RhsSlice::Scalar(T::__from_cpu(s)), n, out)
    })
}

/// The conversion of operand 0 (an element of `from`, as its compute value) to an element
/// of `to` as [`Numeric::from_wide`] converts: Rust's `as`, but into f16 and bf16 through
/// f32 rounded to odd, so that the store's rounding is the only one.
fn cast_body(from: Ty, to: Ty) -> Body {
    let x = local(0, from.compute());
    let value = if to.is_half() && from.compute() != Ty::F32 {
        e(ExprKind::RoundOdd(Box::new(x)), Ty::F32)
    } else if from.compute() == to.compute() {
        x
    } else {
        e(ExprKind::Cast(Box::new(x)), to.compute())
    };
    Body {
        operands: vec![Local {
            name: "x".into(),
            ty: from.compute(),
            mutable: false,
            storage: Storage::Plain,
        }],
        value,
    }
}

/// The spec of the cast from `T` to `U`: `(src, out)`.
pub(crate) fn cast_spec<T: Numeric, U: Numeric>() -> KernelSpec<(In<T>, Out<U>)> {
    let (from, to) = (ty_of(T::DTYPE), ty_of(U::DTYPE));
    let name = format!("cast_{}_{}", from.rust(), to.rust());
    let body = cast_body(from, to);
    KernelSpec::from_ir(&map_kernel(name, (from, to), &body, Form::Unary, false))
        .native(|(src, out): &mut (&[T], &mut [U])| crate::optable::cast_slice(src, out))
}

/// The CUDA C of the table's binary op `op` on `dtype` with an array operand and its entry
/// point's name, as release builds launch it (without bounds checks): parameters `(src,
/// rhs, mode, cols, out)` (mode 0 for two arrays), then each array's length in bytes (a
/// `u64`), a `u32` tag and the fault record. For benchmarks that launch the same kernel raw.
#[doc(hidden)]
pub fn __binary_kernel_cuda(op: BinaryOp, dtype: DType) -> (String, String) {
    let ty = ty_of(dtype);
    let name = format!("binary_{}", op.name());
    let k = map_kernel(
        name.clone(),
        (ty, ty),
        &op.body(ty.compute()),
        Form::Binary,
        false,
    );
    (name, gpukit_kernel::cuda::generate(&k, false))
}

/// The spec of the built-in kernel that the table's binary op `op` on `T` with an array
/// operand launches (`Stream::add` for [`BinaryOp::Add`]), as release builds load it:
/// parameters `(src, rhs, mode, cols, out)` (mode 0 and cols 1 for two arrays of the same
/// length). For benchmarks that time the backend's own launch of the op's kernel.
#[doc(hidden)]
pub fn __binary_kernel_spec<T: Numeric>(op: BinaryOp) -> KernelSpec<BinarySig<T>> {
    // SAFETY: the kernel touches only indices below the lengths of the arrays it is
    // launched with, as every built-in kernel (`Stream::builtin_kernel`); a launch of it
    // outside the library is `Backend::launch`, whose caller vouches for the arguments.
    unsafe { binary_spec::<T>(op).unchecked() }
}

impl<B: Backend> Stream<B> {
    /// The unary op `op` over `len` elements from `src` (in place from `out` where `None`)
    /// into `out`, as the op `call`; the caller checked the lengths.
    pub(crate) fn map_unary<T: Numeric>(
        &self,
        call: &'static str,
        op: UnaryOp,
        src: Option<Reads<'_, T, B>>,
        out: Writes<'_, T, B>,
        len: usize,
    ) -> Result<()> {
        // The key of the op among its form's kernels.
        let key = op.index();
        for (start, n) in self.windows(len, std::mem::size_of::<T>()) {
            let o = out.window(start, n);
            let cfg = self.grid_stride(n);
            match src {
                Some(x) => {
                    let spec = move || unary_spec::<T>(op);
                    self.launch_builtin_keyed(call, key, spec, cfg, (x.window(start, n), o))?
                }
                None => {
                    let spec = move || unary_in_place_spec::<T>(op);
                    self.launch_builtin_keyed(call, key, spec, cfg, (o,))?
                }
            }
        }
        Ok(())
    }

    /// The binary op `op` over the `shape` matrix `src` (in place from `out` where `None`)
    /// and `rhs` into `out`, as the op `call`; the caller checked the lengths. A row or
    /// column vector goes to the kernel with windows of whole rows.
    pub(crate) fn map_binary<T: Numeric>(
        &self,
        call: &'static str,
        op: BinaryOp,
        src: Option<Reads<'_, T, B>>,
        rhs: Rhs2<'_, T, B>,
        shape: Shape,
        out: Writes<'_, T, B>,
    ) -> Result<()> {
        let key = op.index();
        let len = shape.rows * shape.cols;
        if len == 0 {
            return Ok(());
        }
        let size = std::mem::size_of::<T>();
        // The kernel's `mode`, and the elements of a window's whole rows: a vector operand
        // is indexed by the element's position in its window.
        let (mode, row) = match rhs {
            Rhs2::Row(_) => (1u32, shape.cols),
            Rhs2::Col(_) => (2, shape.cols),
            Rhs2::Array(_) | Rhs2::Scalar(_) => (0, 1),
        };
        // The kernel reads `cols` for a vector operand only.
        let cols = u32::try_from(row).map_err(|_| Error::Unsupported {
            backend: self.backend().name(),
            what: format!(
                "`{call}` broadcasting over rows of {} elements (at most 2^32 - 1)",
                shape.cols
            ),
        })?;
        let per = self.windows(len, size).next().map_or(len, |(_, n)| n);
        if per < row {
            return Err(Error::Unsupported {
                backend: self.backend().name(),
                what: format!(
                    "`{call}` broadcasting over rows of {} bytes, more than one array argument can hold on this device",
                    shape.cols * size
                ),
            });
        }
        // Whole rows (a division only where there are rows to keep whole).
        let per = if row > 1 { per / row * row } else { per };
        let mut start = 0;
        while start < len {
            let n = per.min(len - start);
            let o = out.window(start, n);
            let cfg = self.grid_stride(n);
            let s = src.map(|x| x.window(start, n));
            let r = match rhs {
                Rhs2::Scalar(v) => {
                    match s {
                        Some(x) => {
                            let spec = move || scalar_spec::<T>(op);
                            self.launch_builtin_keyed(call, key, spec, cfg, (x, Value(v), o))?
                        }
                        None => {
                            let spec = move || scalar_in_place_spec::<T>(op);
                            self.launch_builtin_keyed(call, key, spec, cfg, (o, Value(v)))?
                        }
                    }
                    start += n;
                    continue;
                }
                Rhs2::Array(r) => r.window(start, n),
                Rhs2::Row(r) => r,
                Rhs2::Col(r) => r.window(start / row, n / row),
            };
            match s {
                Some(x) => {
                    let spec = move || binary_spec::<T>(op);
                    let args = (x, r, mode, cols, o);
                    self.launch_builtin_keyed(call, key, spec, cfg, args)?
                }
                None => {
                    let spec = move || binary_in_place_spec::<T>(op);
                    let args = (o, r, mode, cols);
                    self.launch_builtin_keyed(call, key, spec, cfg, args)?
                }
            }
            start += n;
        }
        Ok(())
    }
}
