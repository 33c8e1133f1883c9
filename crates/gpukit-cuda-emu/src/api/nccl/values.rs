//! The emulated NCCL's element types and arithmetic: reading and writing a rank's values,
//! combining them in the element type (wrapping integers, rounding floats after each step)
//! and what each collective computes from every rank's buffers.

use super::Slot;

/// An element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ty {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F16,
    F32,
    F64,
    BF16,
}

impl Ty {
    pub(super) fn from_nccl(t: u32) -> Option<Ty> {
        Some(match t {
            0 => Ty::I8,
            1 => Ty::U8,
            2 => Ty::I32,
            3 => Ty::U32,
            4 => Ty::I64,
            5 => Ty::U64,
            6 => Ty::F16,
            7 => Ty::F32,
            8 => Ty::F64,
            9 => Ty::BF16,
            _ => return None,
        })
    }
    pub(super) fn size(self) -> u64 {
        match self {
            Ty::I8 | Ty::U8 => 1,
            Ty::F16 | Ty::BF16 => 2,
            Ty::I32 | Ty::U32 | Ty::F32 => 4,
            Ty::I64 | Ty::U64 | Ty::F64 => 8,
        }
    }
}

/// One value, widened: floats as f64 (rounded to the type after each step), integers as
/// their 64-bit pattern.
#[derive(Clone, Copy)]
pub(super) enum V {
    F(f64),
    I(i64),
    U(u64),
}

pub(super) fn read(ty: Ty, p: u64, i: u64) -> V {
    // SAFETY: callers checked the ranges against live allocations.
    unsafe {
        match ty {
            Ty::I8 => V::I(i64::from(*(p as *const i8).add(i as usize))),
            Ty::U8 => V::U(u64::from(*(p as *const u8).add(i as usize))),
            Ty::I32 => V::I(i64::from(*(p as *const i32).add(i as usize))),
            Ty::U32 => V::U(u64::from(*(p as *const u32).add(i as usize))),
            Ty::I64 => V::I(*(p as *const i64).add(i as usize)),
            Ty::U64 => V::U(*(p as *const u64).add(i as usize)),
            Ty::F32 => V::F(f64::from(*(p as *const f32).add(i as usize))),
            Ty::F64 => V::F(*(p as *const f64).add(i as usize)),
            Ty::F16 => V::F(f64::from(
                half::f16::from_bits(*(p as *const u16).add(i as usize)).to_f32(),
            )),
            Ty::BF16 => V::F(f64::from(
                half::bf16::from_bits(*(p as *const u16).add(i as usize)).to_f32(),
            )),
        }
    }
}

pub(super) fn write(ty: Ty, p: u64, i: u64, v: V) {
    let f = |v: V| match v {
        V::F(x) => x,
        V::I(x) => x as f64,
        V::U(x) => x as f64,
    };
    let n = |v: V| match v {
        V::F(x) => x as i64,
        V::I(x) => x,
        V::U(x) => x as i64,
    };
    // SAFETY: as in `read`.
    unsafe {
        match ty {
            Ty::I8 | Ty::U8 => *(p as *mut u8).add(i as usize) = n(v) as u8,
            Ty::I32 | Ty::U32 => *(p as *mut u32).add(i as usize) = n(v) as u32,
            Ty::I64 | Ty::U64 => *(p as *mut u64).add(i as usize) = n(v) as u64,
            Ty::F32 => *(p as *mut f32).add(i as usize) = f(v) as f32,
            Ty::F64 => *(p as *mut f64).add(i as usize) = f(v),
            Ty::F16 => {
                *(p as *mut u16).add(i as usize) = half::f16::from_f32(f(v) as f32).to_bits()
            }
            Ty::BF16 => {
                *(p as *mut u16).add(i as usize) = half::bf16::from_f32(f(v) as f32).to_bits()
            }
        }
    }
}

/// Rounds a float to the type (integers stay).
pub(super) fn round(ty: Ty, v: V) -> V {
    match (ty, v) {
        (Ty::F32, V::F(x)) => V::F(f64::from(x as f32)),
        (Ty::F16, V::F(x)) => V::F(f64::from(half::f16::from_f32(x as f32).to_f32())),
        (Ty::BF16, V::F(x)) => V::F(f64::from(half::bf16::from_f32(x as f32).to_f32())),
        _ => v,
    }
}

pub(super) fn combine(ty: Ty, op: u32, a: V, b: V) -> V {
    let bits = ty.size() * 8;
    let wrap_i = |x: i64| -> i64 {
        if bits == 64 {
            x
        } else {
            (x << (64 - bits)) >> (64 - bits)
        }
    };
    let wrap_u = |x: u64| -> u64 {
        if bits == 64 {
            x
        } else {
            x & ((1u64 << bits) - 1)
        }
    };
    let r = match (a, b) {
        (V::F(x), V::F(y)) => V::F(match op {
            1 => x * y,
            2 => {
                if y > x || x.is_nan() {
                    y
                } else {
                    x
                }
            }
            3 => {
                if y < x || x.is_nan() {
                    y
                } else {
                    x
                }
            }
            _ => x + y,
        }),
        (V::I(x), V::I(y)) => V::I(wrap_i(match op {
            1 => x.wrapping_mul(y),
            2 => x.max(y),
            3 => x.min(y),
            _ => x.wrapping_add(y),
        })),
        (V::U(x), V::U(y)) => V::U(wrap_u(match op {
            1 => x.wrapping_mul(y),
            2 => x.max(y),
            3 => x.min(y),
            _ => x.wrapping_add(y),
        })),
        _ => a,
    };
    round(ty, r)
}

/// The operation that combines the ranks' values: `ncclAvg` (4) sums, then divides.
pub(super) fn sum_for_avg(op: u32) -> u32 {
    if op == 4 {
        0
    } else {
        op
    }
}

pub(super) fn average(ty: Ty, v: V, n: usize) -> V {
    round(
        ty,
        match v {
            V::F(x) => V::F(x / n as f64),
            V::I(x) => V::I(x / n as i64),
            V::U(x) => V::U(x / n as u64),
        },
    )
}

/// What a collective does with the slots of every rank.
#[derive(Debug, Clone, Copy)]
pub(super) enum Coll {
    AllReduce { count: u64, op: u32 },
    Broadcast { count: u64, root: usize },
    AllGather { count: u64 },
    ReduceScatter { count: u64, op: u32 },
}

pub(super) fn compute(ty: Ty, coll: Coll, slots: &[Slot]) {
    let n = slots.len();
    let size = ty.size();
    match coll {
        Coll::AllReduce { count, op } => {
            let mut out = Vec::with_capacity(count as usize);
            for i in 0..count {
                let mut acc = read(ty, slots[0].send, i);
                for s in &slots[1..] {
                    acc = combine(ty, sum_for_avg(op), acc, read(ty, s.send, i));
                }
                if op == 4 {
                    acc = average(ty, acc, n);
                }
                out.push(acc);
            }
            for s in slots {
                for (i, v) in out.iter().enumerate() {
                    write(ty, s.recv, i as u64, *v);
                }
            }
        }
        Coll::Broadcast { count, root } => {
            let src: Vec<V> = (0..count).map(|i| read(ty, slots[root].send, i)).collect();
            for s in slots {
                for (i, v) in src.iter().enumerate() {
                    write(ty, s.recv, i as u64, *v);
                }
            }
        }
        Coll::AllGather { count } => {
            let parts: Vec<Vec<V>> = slots
                .iter()
                .map(|s| (0..count).map(|i| read(ty, s.send, i)).collect())
                .collect();
            for s in slots {
                for (r, part) in parts.iter().enumerate() {
                    for (i, v) in part.iter().enumerate() {
                        write(ty, s.recv, r as u64 * count + i as u64, *v);
                    }
                }
            }
        }
        Coll::ReduceScatter { count, op } => {
            let total = count * n as u64;
            let mut out = Vec::with_capacity(total as usize);
            for i in 0..total {
                let mut acc = read(ty, slots[0].send, i);
                for s in &slots[1..] {
                    acc = combine(ty, sum_for_avg(op), acc, read(ty, s.send, i));
                }
                if op == 4 {
                    acc = average(ty, acc, n);
                }
                out.push(acc);
            }
            for (r, s) in slots.iter().enumerate() {
                for i in 0..count {
                    write(ty, s.recv, i, out[(r as u64 * count + i) as usize]);
                }
            }
        }
    }
    let _ = size;
}

/// The collective's byte counts: (send, recv) for one rank.
pub(super) fn sizes(ty: Ty, coll: Coll, n: usize) -> (u64, u64) {
    let s = ty.size();
    match coll {
        Coll::AllReduce { count, .. } | Coll::Broadcast { count, .. } => (count * s, count * s),
        Coll::AllGather { count } => (count * s, count * s * n as u64),
        Coll::ReduceScatter { count, .. } => (count * s * n as u64, count * s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_wrap_and_round_like_the_types() {
        let V::I(x) = combine(Ty::I8, 0, V::I(100), V::I(100)) else {
            panic!()
        };
        assert_eq!(x, -56);
        let V::U(x) = combine(Ty::U8, 1, V::U(16), V::U(17)) else {
            panic!()
        };
        assert_eq!(x, 16);
        let V::F(x) = combine(Ty::F16, 0, V::F(2048.0), V::F(1.0)) else {
            panic!()
        };
        assert_eq!(x, 2048.0, "f16 has no 2049");
        let V::I(x) = average(Ty::I32, V::I(7), 2) else {
            panic!()
        };
        assert_eq!(x, 3);
    }
}
