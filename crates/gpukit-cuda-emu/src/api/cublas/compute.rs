//! The emulated cuBLAS's arithmetic: gemm's element types, its operands' spans in memory,
//! and the product itself, computed on the CPU in f32 or f64 as the types ask.

use super::*;

/// An element type of gemm's matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ty {
    F32,
    F64,
    F16,
    BF16,
}

impl Ty {
    pub(super) fn from_cuda(t: u32) -> Option<Ty> {
        Some(match t {
            0 => Ty::F32,
            1 => Ty::F64,
            2 => Ty::F16,
            14 => Ty::BF16,
            _ => return None,
        })
    }
    pub(super) fn size(self) -> u64 {
        match self {
            Ty::F64 => 8,
            Ty::F32 => 4,
            Ty::F16 | Ty::BF16 => 2,
        }
    }
}

/// One gemm (column-major), its matrices as device addresses.
#[derive(Debug, Clone, Copy)]
pub(super) struct Gemm {
    pub(super) ta: bool,
    pub(super) tb: bool,
    pub(super) m: u64,
    pub(super) n: u64,
    pub(super) k: u64,
    pub(super) alpha: f64,
    pub(super) beta: f64,
    pub(super) a: u64,
    pub(super) lda: u64,
    pub(super) b: u64,
    pub(super) ldb: u64,
    pub(super) c: u64,
    pub(super) ldc: u64,
    pub(super) ab: Ty,
    pub(super) c_ty: Ty,
    pub(super) batch: u64,
    pub(super) stride: [u64; 3],
}

/// Bytes a column-major `rows x cols` matrix with leading dimension `ld` spans.
pub(super) fn span(rows: u64, cols: u64, ld: u64, size: u64) -> u64 {
    if rows == 0 || cols == 0 {
        0
    } else {
        ((cols - 1) * ld + rows) * size
    }
}

pub(super) fn load(ty: Ty, p: u64, i: u64) -> f64 {
    // SAFETY: callers check that element `i` lies in a live allocation (its span).
    unsafe {
        match ty {
            Ty::F32 => f64::from(*(p as *const f32).add(i as usize)),
            Ty::F64 => *(p as *const f64).add(i as usize),
            Ty::F16 => f64::from(half::f16::from_bits(*(p as *const u16).add(i as usize)).to_f32()),
            Ty::BF16 => {
                f64::from(half::bf16::from_bits(*(p as *const u16).add(i as usize)).to_f32())
            }
        }
    }
}

pub(super) fn store(ty: Ty, p: u64, i: u64, v: f64) {
    // SAFETY: as in `load`.
    unsafe {
        match ty {
            Ty::F32 => *(p as *mut f32).add(i as usize) = v as f32,
            Ty::F64 => *(p as *mut f64).add(i as usize) = v,
            Ty::F16 => *(p as *mut u16).add(i as usize) = half::f16::from_f32(v as f32).to_bits(),
            Ty::BF16 => *(p as *mut u16).add(i as usize) = half::bf16::from_f32(v as f32).to_bits(),
        }
    }
}

pub(super) fn run_gemm(
    exec: &Exec<'_>,
    g: &Gemm,
    workspace: (u64, u64),
) -> Result<Vec<Touch>, Fault> {
    let (ra, ca) = if g.ta { (g.k, g.m) } else { (g.m, g.k) };
    let (rb, cb) = if g.tb { (g.n, g.k) } else { (g.k, g.n) };
    let mut touches = Vec::new();
    if workspace.1 > 0 {
        touches.push(exec.device(workspace.0, workspace.1.min(WORKSPACE_TOUCHED), Kind::Write)?);
    }
    for batch in 0..g.batch {
        let a = g.a + batch * g.stride[0] * g.ab.size();
        let b = g.b + batch * g.stride[1] * g.ab.size();
        let c = g.c + batch * g.stride[2] * g.c_ty.size();
        let sa = span(ra, ca, g.lda, g.ab.size());
        let sb = span(rb, cb, g.ldb, g.ab.size());
        let sc = span(g.m, g.n, g.ldc, g.c_ty.size());
        if sa > 0 {
            touches.push(exec.device(a, sa, Kind::Read)?);
        }
        if sb > 0 {
            touches.push(exec.device(b, sb, Kind::Read)?);
        }
        if sc == 0 {
            continue;
        }
        if g.beta != 0.0 {
            touches.push(exec.device(c, sc, Kind::Read)?);
        }
        touches.push(exec.device(c, sc, Kind::Write)?);
        let mem = memory().map_err(|code| Fault {
            code,
            message: String::new(),
        })?;
        let _live = mem.read();
        let mm = |p: u64, rows: u64, cols: u64, ld: u64| -> Vec<f64> {
            let mut out = vec![0.0; (rows * cols) as usize];
            for j in 0..cols {
                for i in 0..rows {
                    out[(i * cols + j) as usize] = load(g.ab, p, i + j * ld);
                }
            }
            out
        };
        // Row-major copies of op(A) (m x k) and op(B) (k x n).
        let a_rm = mm(a, ra, ca, g.lda);
        let b_rm = mm(b, rb, cb, g.ldb);
        let (sar, sac) = if g.ta {
            (1, g.m as isize)
        } else {
            (g.k as isize, 1)
        };
        let (sbr, sbc) = if g.tb {
            (1, g.k as isize)
        } else {
            (g.n as isize, 1)
        };
        let mut out = vec![0.0f64; (g.m * g.n) as usize];
        let f32_compute = g.c_ty != Ty::F64;
        if f32_compute {
            let a32: Vec<f32> = a_rm.iter().map(|&v| v as f32).collect();
            let b32: Vec<f32> = b_rm.iter().map(|&v| v as f32).collect();
            let mut o32 = vec![0.0f32; out.len()];
            // SAFETY: the slices hold the m x k, k x n and m x n matrices at these strides.
            unsafe {
                matrixmultiply::sgemm(
                    g.m as usize,
                    g.k as usize,
                    g.n as usize,
                    1.0,
                    a32.as_ptr(),
                    sar,
                    sac,
                    b32.as_ptr(),
                    sbr,
                    sbc,
                    0.0,
                    o32.as_mut_ptr(),
                    g.n as isize,
                    1,
                );
            }
            out.iter_mut().zip(o32).for_each(|(o, v)| *o = f64::from(v));
        } else {
            // SAFETY: as above.
            unsafe {
                matrixmultiply::dgemm(
                    g.m as usize,
                    g.k as usize,
                    g.n as usize,
                    1.0,
                    a_rm.as_ptr(),
                    sar,
                    sac,
                    b_rm.as_ptr(),
                    sbr,
                    sbc,
                    0.0,
                    out.as_mut_ptr(),
                    g.n as isize,
                    1,
                );
            }
        }
        for j in 0..g.n {
            for i in 0..g.m {
                let prod = out[(i * g.n + j) as usize];
                let at = i + j * g.ldc;
                let v = if f32_compute {
                    let mut r = (g.alpha as f32) * prod as f32;
                    if g.beta != 0.0 {
                        r += (g.beta as f32) * load(g.c_ty, c, at) as f32;
                    }
                    f64::from(r)
                } else {
                    let mut r = g.alpha * prod;
                    if g.beta != 0.0 {
                        r += g.beta * load(g.c_ty, c, at);
                    }
                    r
                };
                store(g.c_ty, c, at, v);
            }
        }
    }
    Ok(touches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_cover_the_last_column() {
        assert_eq!(span(3, 2, 5, 4), (5 + 3) * 4);
        assert_eq!(span(0, 2, 5, 4), 0);
    }
}
