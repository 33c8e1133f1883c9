//! Typed kernel signatures ([`KernelSig`]: tuples of [`In`], [`Out`] and scalars) and the
//! launch arguments that match them ([`LaunchArg`], [`LaunchArgs`]), sealed so that safe
//! code cannot make an argument claim to be what it is not.

use std::marker::PhantomData;

use crate::array::{DeviceRead, GpuArray, GpuView, GpuViewMut};
use crate::backend::Backend;
use crate::element::Element;
use crate::track::SliceRef;

use super::*;

/// A kernel argument read by the kernel: `&[T]` on the CPU, `const T*` in CUDA C.
pub struct In<T>(PhantomData<T>);
/// A kernel argument the kernel may write: `&mut [T]` on the CPU, `T*` in CUDA C.
pub struct Out<T>(PhantomData<T>);

impl<T> std::fmt::Debug for In<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "In<{}>", std::any::type_name::<T>())
    }
}

impl<T> std::fmt::Debug for Out<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Out<{}>", std::any::type_name::<T>())
    }
}

/// One parameter of a kernel signature.
pub trait KernelParam: 'static {
    /// What the CPU closure receives for it.
    type Cpu<'a>;
    /// Rebuilds the CPU value.
    ///
    /// # Safety
    ///
    /// - `raw` was made from an argument of this parameter's kind and element type;
    /// - a slice's memory is live, aligned and not written by anything else for `'a`, and
    ///   for [`Out`] not read by anything else either.
    unsafe fn from_raw<'a>(raw: &RawArg) -> Self::Cpu<'a>;
}

impl<T: Element> KernelParam for In<T> {
    type Cpu<'a> = &'a [T];

    unsafe fn from_raw<'a>(raw: &RawArg) -> Self::Cpu<'a> {
        match *raw {
            // SAFETY: by this function's contract the range is live, aligned, typed `T`
            // (a whole number of elements) and not written for 'a.
            RawArg::Slice { ptr, bytes } => unsafe {
                std::slice::from_raw_parts(ptr.cast::<T>(), bytes / std::mem::size_of::<T>())
            },
            RawArg::Scalar(_) => &[],
        }
    }
}

impl<T: Element> KernelParam for Out<T> {
    type Cpu<'a> = &'a mut [T];

    unsafe fn from_raw<'a>(raw: &RawArg) -> Self::Cpu<'a> {
        match *raw {
            // SAFETY: by this function's contract the range is live, aligned, typed `T` and
            // used by nothing else for 'a.
            RawArg::Slice { ptr, bytes } => unsafe {
                std::slice::from_raw_parts_mut(ptr.cast::<T>(), bytes / std::mem::size_of::<T>())
            },
            RawArg::Scalar(_) => &mut [],
        }
    }
}

/// The scalar parameters: each travels as its `$wire` value (its own, but f16 and bf16 as
/// their exact `f32`, what a `#[kernel]` computes them in: CUDA C and WGSL receive a
/// `float`/`f32`, a CPU closure the 16-bit value again), written by
/// [`KernelNumeric`]'s encoding and read back with `$from`.
macro_rules! scalar_params {
    ($($t:ty => $wire:ty, $from:expr;)*) => {$(
        impl KernelParam for $t {
            type Cpu<'a> = $t;

            unsafe fn from_raw<'a>(raw: &RawArg) -> Self::Cpu<'a> {
                match raw {
                    RawArg::Scalar(bytes) => {
                        // SAFETY: the scalar's bytes were written from a `$wire` (16 >= its
                        // size); any bit pattern is a valid `$wire`.
                        let wire = unsafe { bytes.as_ptr().cast::<$wire>().read_unaligned() };
                        $from(wire)
                    }
                    RawArg::Slice { .. } => <$t>::default(),
                }
            }
        }

        impl sealed::Sealed for $t {}

        impl<B: Backend> LaunchArg<B> for $t {
            type Param = $t;

            fn arg(&self) -> ArgRef<'_, B> {
                let (bytes, len) = self.__scalar_arg();
                ArgRef::Scalar { bytes, len }
            }
        }
    )*};
}

scalar_params!(
    f32 => f32, f32::from;
    f64 => f64, f64::from;
    i32 => i32, i32::from;
    u32 => u32, u32::from;
    i64 => i64, i64::from;
    u64 => u64, u64::from;
    u8 => u8, u8::from;
    i8 => i8, i8::from;
);

#[cfg(feature = "half")]
scalar_params!(
    half::f16 => f32, half::f16::from_f32;
    half::bf16 => f32, half::bf16::from_f32;
);

/// A kernel's signature: a tuple of [`In`], [`Out`] and scalar types.
pub trait KernelSig: 'static {
    /// What the CPU closure receives: the tuple of the parameters' CPU values.
    type Cpu<'a>;
    /// Number of parameters.
    const ARITY: usize;
    /// Rebuilds the CPU tuple.
    ///
    /// # Safety
    ///
    /// - `raw` has [`Self::ARITY`] entries, each made from an argument matching its
    ///   parameter (see [`KernelParam::from_raw`]);
    /// - no two [`Out`] slices overlap each other or any [`In`] slice.
    unsafe fn from_raw<'a>(raw: &[RawArg]) -> Self::Cpu<'a>;
}

mod sealed {
    /// Only the workspace's arrays, views and scalars are launch arguments: a launch trusts
    /// an argument's [`super::LaunchArg::Param`] to describe the memory it hands over.
    pub trait Sealed {}
}

/// A launch argument: an array or view (by reference) or a scalar (by value). Sealed: a
/// launch relies on [`LaunchArg::Param`] describing the memory exactly.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a launch argument",
    label = "not a device array, a view of one, or a scalar",
    note = "a kernel takes `&GpuArray<T>` or a view for an `In<T>` parameter, `&mut GpuArray<T>` \
            or a mutable view for an `Out<T>`, and a value of the parameter's type for a \
            scalar; upload host data first (`ctx.alloc_upload(&v)`)"
)]
pub trait LaunchArg<B: Backend>: sealed::Sealed {
    /// The signature parameter it matches.
    type Param: KernelParam;
    /// The argument for the safe layer.
    fn arg(&self) -> ArgRef<'_, B>;
}

/// A launch argument, resolved.
pub enum ArgRef<'a, B: Backend> {
    /// Device memory the kernel reads.
    Read(SliceRef<'a, B>),
    /// Device memory the kernel may write.
    Write(SliceRef<'a, B>),
    /// A scalar value.
    Scalar {
        /// The value's bytes.
        bytes: [u8; 16],
        /// Its size.
        len: usize,
    },
}

impl<B: Backend> std::fmt::Debug for ArgRef<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArgRef::Read(s) => f.debug_tuple("Read").field(s).finish(),
            ArgRef::Write(s) => f.debug_tuple("Write").field(s).finish(),
            ArgRef::Scalar { bytes, len } => f
                .debug_struct("Scalar")
                .field("bytes", &bytes.get(..*len).unwrap_or(bytes))
                .finish(),
        }
    }
}

impl<T: Element, B: Backend> sealed::Sealed for &GpuArray<T, B> {}

impl<T: Element, B: Backend> LaunchArg<B> for &GpuArray<T, B> {
    type Param = In<T>;
    fn arg(&self) -> ArgRef<'_, B> {
        ArgRef::Read(self.slice_ref())
    }
}

impl<T: Element, B: Backend> sealed::Sealed for &mut GpuArray<T, B> {}

impl<T: Element, B: Backend> LaunchArg<B> for &mut GpuArray<T, B> {
    type Param = Out<T>;
    fn arg(&self) -> ArgRef<'_, B> {
        ArgRef::Write(self.slice_ref())
    }
}

impl<T: Element, B: Backend> sealed::Sealed for GpuView<'_, T, B> {}

impl<T: Element, B: Backend> LaunchArg<B> for GpuView<'_, T, B> {
    type Param = In<T>;
    fn arg(&self) -> ArgRef<'_, B> {
        ArgRef::Read(self.slice_ref())
    }
}

impl<T: Element, B: Backend> sealed::Sealed for &GpuView<'_, T, B> {}

impl<T: Element, B: Backend> LaunchArg<B> for &GpuView<'_, T, B> {
    type Param = In<T>;
    fn arg(&self) -> ArgRef<'_, B> {
        ArgRef::Read(self.slice_ref())
    }
}

impl<T: Element, B: Backend> sealed::Sealed for GpuViewMut<'_, T, B> {}

impl<T: Element, B: Backend> LaunchArg<B> for GpuViewMut<'_, T, B> {
    type Param = Out<T>;
    fn arg(&self) -> ArgRef<'_, B> {
        ArgRef::Write(self.slice_ref())
    }
}

impl<T: Element, B: Backend> sealed::Sealed for &mut GpuViewMut<'_, T, B> {}

impl<T: Element, B: Backend> LaunchArg<B> for &mut GpuViewMut<'_, T, B> {
    type Param = Out<T>;
    fn arg(&self) -> ArgRef<'_, B> {
        ArgRef::Write(self.slice_ref())
    }
}

/// A range a built-in op reads, as a launch argument of element type `T` (taken from any
/// `DeviceRead<T>`, which typed it).
pub(crate) struct Reads<'a, T, B: Backend>(pub(crate) SliceRef<'a, B>, PhantomData<fn(T)>);

/// A range a built-in op writes, as a launch argument of element type `T` (taken from a
/// `DeviceWrite<T>`, borrowed mutably for the call).
pub(crate) struct Writes<'a, T, B: Backend>(pub(crate) SliceRef<'a, B>, PhantomData<fn(T)>);

impl<'a, T: Element, B: Backend> Reads<'a, T, B> {
    pub(crate) fn of(x: &'a impl DeviceRead<T, B>) -> Self {
        Reads(x.slice_ref(), PhantomData)
    }
}

impl<'a, T: Element, B: Backend> Reads<'a, T, B> {
    /// Elements `start..start + len` (in range: the caller's window of the array).
    pub(crate) fn window(self, start: usize, len: usize) -> Self {
        let size = std::mem::size_of::<T>();
        Reads(self.0.sub(start * size, len * size), PhantomData)
    }
}

impl<'a, T: Element, B: Backend> Writes<'a, T, B> {
    /// Elements `start..start + len` (in range: the caller's window of the array).
    pub(crate) fn window(self, start: usize, len: usize) -> Self {
        let size = std::mem::size_of::<T>();
        Writes(self.0.sub(start * size, len * size), PhantomData)
    }
}

impl<'a, T: Element, B: Backend> Writes<'a, T, B> {
    pub(crate) fn of<W: crate::array::DeviceWrite<T, B>>(x: &'a mut W) -> Self {
        let x: &'a W = x;
        Writes(x.slice_ref(), PhantomData)
    }

    /// The range `r` as elements of `T`: one the caller owns for writing and knows to hold
    /// `T`s (the bytes of an allocation being zeroed, a `T` result typed as `R == T`).
    pub(crate) fn raw(r: SliceRef<'a, B>) -> Self {
        Writes(r, PhantomData)
    }
}

impl<T, B: Backend> Clone for Reads<'_, T, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, B: Backend> Copy for Reads<'_, T, B> {}

// Copied only within one op, which launches its kernels on it one after another.
impl<T, B: Backend> Clone for Writes<'_, T, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, B: Backend> Copy for Writes<'_, T, B> {}

/// A scalar of any `#[kernel]` element type, as a built-in op's launch argument.
#[derive(Clone, Copy)]
pub(crate) struct Value<T>(pub(crate) T);

impl<T: KernelNumeric> sealed::Sealed for Value<T> {}

impl<T: KernelNumeric, B: Backend> LaunchArg<B> for Value<T> {
    type Param = T;
    fn arg(&self) -> ArgRef<'_, B> {
        let (bytes, len) = self.0.__scalar_arg();
        ArgRef::Scalar { bytes, len }
    }
}

impl<T: Element, B: Backend> sealed::Sealed for Reads<'_, T, B> {}

impl<T: Element, B: Backend> LaunchArg<B> for Reads<'_, T, B> {
    type Param = In<T>;
    fn arg(&self) -> ArgRef<'_, B> {
        ArgRef::Read(self.0)
    }
}

impl<T: Element, B: Backend> sealed::Sealed for Writes<'_, T, B> {}

impl<T: Element, B: Backend> LaunchArg<B> for Writes<'_, T, B> {
    type Param = Out<T>;
    fn arg(&self) -> ArgRef<'_, B> {
        ArgRef::Write(self.0)
    }
}

/// The most parameters a kernel signature has: signatures are tuples of 1 to 12 parameters.
pub const MAX_KERNEL_ARGS: usize = 12;

/// The most arguments a backend is given for one launch: a signature's, plus what a
/// bounds-checked kernel takes after them (a length per array, its tag, the fault record).
pub const MAX_LAUNCH_ARGS: usize = 2 * MAX_KERNEL_ARGS + 2;

/// A [`LaunchArg`] for the signature parameter `P`: what a launch asks of each element of
/// its argument tuple, so that the compiler reports a wrong argument at the argument
/// ("expected `Out<f32>`, found `Out<f64>`").
pub trait LaunchArgFor<B: Backend, P>: LaunchArg<B> {}

impl<B: Backend, A: LaunchArg<B>> LaunchArgFor<B, A::Param> for A {}

/// A tuple of launch arguments matching the signature `S`, each element the
/// [`LaunchArg`] of its parameter (so that a mismatch is reported at the element). Sealed,
/// as [`LaunchArg`] is.
#[diagnostic::on_unimplemented(
    message = "the launch arguments `{Self}` do not match the kernel's signature `{S}`",
    label = "one argument per parameter of the kernel, in order",
    note = "an `In<T>` parameter takes `&GpuArray<T>` or a view of one, an `Out<T>` parameter \
            `&mut GpuArray<T>` or a mutable view, a scalar parameter a value of its type; a \
            kernel of one parameter takes a tuple of one, `(&mut x,)`"
)]
pub trait LaunchArgs<B: Backend, S: KernelSig>: sealed::Sealed {
    /// Calls `f` with each resolved argument, in order.
    fn each_arg<'a>(&'a self, f: impl FnMut(ArgRef<'a, B>));
}

macro_rules! tuples {
    ($($name:ident $p:ident $idx:tt),+) => {
        impl<$($name: KernelParam),+> KernelSig for ($($name,)+) {
            type Cpu<'a> = ($($name::Cpu<'a>,)+);
            const ARITY: usize = [$($idx),+].len();

            unsafe fn from_raw<'a>(raw: &[RawArg]) -> Self::Cpu<'a> {
                // SAFETY: forwarded from the caller, entry by entry.
                unsafe { ($($name::from_raw(&raw[$idx]),)+) }
            }
        }

        impl<$($name: sealed::Sealed),+> sealed::Sealed for ($($name,)+) {}

        impl<B: Backend, $($name, $p),+> LaunchArgs<B, ($($p,)+)> for ($($name,)+)
        where
            $($p: KernelParam, $name: LaunchArgFor<B, $p>,)+
        {
            fn each_arg<'a>(&'a self, mut f: impl FnMut(ArgRef<'a, B>)) {
                $(f(self.$idx.arg());)+
            }
        }
    };
}

tuples!(A P0 0);
tuples!(A P0 0, B1 P1 1);
tuples!(A P0 0, B1 P1 1, C P2 2);
tuples!(A P0 0, B1 P1 1, C P2 2, D P3 3);
tuples!(A P0 0, B1 P1 1, C P2 2, D P3 3, E P4 4);
tuples!(A P0 0, B1 P1 1, C P2 2, D P3 3, E P4 4, F P5 5);
tuples!(A P0 0, B1 P1 1, C P2 2, D P3 3, E P4 4, F P5 5, G P6 6);
tuples!(A P0 0, B1 P1 1, C P2 2, D P3 3, E P4 4, F P5 5, G P6 6, H P7 7);
tuples!(A P0 0, B1 P1 1, C P2 2, D P3 3, E P4 4, F P5 5, G P6 6, H P7 7, I P8 8);
tuples!(A P0 0, B1 P1 1, C P2 2, D P3 3, E P4 4, F P5 5, G P6 6, H P7 7, I P8 8, J P9 9);
tuples!(A P0 0, B1 P1 1, C P2 2, D P3 3, E P4 4, F P5 5, G P6 6, H P7 7, I P8 8, J P9 9, K P10 10);
tuples!(A P0 0, B1 P1 1, C P2 2, D P3 3, E P4 4, F P5 5, G P6 6, H P7 7, I P8 8, J P9 9, K P10 10, L P11 11);
