//! [`Scalar`]: a scalar operand of an op, kept as the bits of its element type so that one
//! untyped [`super::Op`] carries it to any backend.

use crate::element::{DType, Element};

/// A scalar operand of an op (the value of `fill`, the `alpha` of `axpy`, the operand of
/// `add_scalar`, the bounds of `clamp`), kept as the bits of its element type.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Scalar {
    dtype: DType,
    bits: u64,
}

impl Scalar {
    /// The scalar `v`.
    pub fn new<T: Element>(v: T) -> Scalar {
        let mut bits = 0u64;
        let n = std::mem::size_of::<T>().min(8);
        // SAFETY: `T: Element` is plain data of `DTYPE.size() <= 8` bytes with no padding, so
        // its first `n` bytes are initialized and may be copied into the u64's bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&v as *const T).cast::<u8>(),
                (&mut bits as *mut u64).cast::<u8>(),
                n,
            );
        }
        Scalar {
            dtype: T::DTYPE,
            bits,
        }
    }

    /// The zero of `dtype` (all bits clear, which is zero in every element type).
    pub fn zero(dtype: DType) -> Scalar {
        Scalar { dtype, bits: 0 }
    }

    /// The value, if `T` is the scalar's element type.
    pub fn get<T: Element>(self) -> Option<T> {
        if T::DTYPE != self.dtype || std::mem::size_of::<T>() > 8 {
            return None;
        }
        let mut v = T::default();
        // SAFETY: `T` is the type the bits were taken from (same dtype, so same size and
        // representation, by `Element`'s contract), and any bit pattern of it is valid.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&self.bits as *const u64).cast::<u8>(),
                (&mut v as *mut T).cast::<u8>(),
                std::mem::size_of::<T>(),
            );
        }
        Some(v)
    }

    /// The element type.
    pub fn dtype(self) -> DType {
        self.dtype
    }

    /// The value's bytes in native order (`dtype().size()` of them).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: a u64 is 8 initialized bytes; the slice borrows `self`.
        let all = unsafe { std::slice::from_raw_parts((&self.bits as *const u64).cast(), 8) };
        &all[..self.dtype.size().min(8)]
    }
}

impl std::fmt::Debug for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scalar({}: {:#x})", self.dtype, self.bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_round_trip_and_refuse_other_types() {
        let s = Scalar::new(-3i8);
        assert_eq!(s.get::<i8>(), Some(-3));
        assert_eq!(s.get::<u8>(), None);
        assert_eq!(s.bytes(), &[0xfd]);
        assert_eq!(Scalar::new(1.5f64).get::<f64>(), Some(1.5));
    }

    #[test]
    fn scalars_keep_their_type_and_bytes() {
        let s = Scalar::new(1.5f32);
        assert_eq!(s.dtype(), DType::F32);
        assert_eq!(s.bytes(), 1.5f32.to_ne_bytes());
        assert_eq!(Scalar::new(-2i64).bytes(), (-2i64).to_ne_bytes());
        assert_eq!(Scalar::new(-2i64).get::<i64>(), Some(-2));
        assert_eq!(Scalar::new(7u32).get::<i32>(), None);
        let z = Scalar::zero(DType::F64);
        assert_eq!((z.dtype(), z.get::<f64>()), (DType::F64, Some(0.0)));
        assert_eq!(z.bytes(), [0; 8]);
        assert_eq!(Scalar::zero(DType::U8).get::<u8>(), Some(0));
        assert_eq!(format!("{:?}", Scalar::new(258u32)), "Scalar(u32: 0x102)");
    }
}
