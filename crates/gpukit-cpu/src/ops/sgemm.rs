//! f32 gemm on AVX-512: packed panels in cache-sized blocks and a register-blocked
//! micro-kernel, split across rayon's pool by blocks of output rows or columns.
//!
//! The layout is BLIS's. `op(B)` is packed `KC x NC` at a time into panels of `NR` columns
//! (`k`-major, zero-padded to `NR`) and `op(A)` `MC x KC` at a time into panels of `MR` rows
//! (zero-padded to `MR`); the micro-kernel keeps an `MR x NR` block of `C` in 24 zmm
//! registers and adds one rank-1 update per `k` (`MR` broadcasts of `A`, two loads of `B`,
//! `2 MR` fused multiply-adds). Each block of `KC` ends with one update of `C`: the first
//! writes `alpha AB` (plus `beta C` when `beta` is not zero; `C` is not read when it is), the
//! others add `alpha AB`.
//!
//! The bits do not depend on the split: an element's sum is the same chain of fused
//! multiply-adds over the same `KC` blocks wherever its tile lies (edge tiles run the same
//! kernel on zero-padded panels and mask the store), and the split is over output blocks,
//! never over `k`. Each thread keeps its packing buffers (thread-local, grown to the largest
//! product seen), so a steady stream of products allocates nothing.
//!
//! [`sgemm`] takes a product only when the CPU has AVX-512F and the product is large enough
//! ([`TAKES_FROM`]); the caller runs the others through matrixmultiply.

use std::cell::RefCell;

/// Rows of `C` per micro-kernel tile.
const MR: usize = 12;
/// Columns of `C` per micro-kernel tile: two zmm vectors.
const NR: usize = 32;
/// Depth of a packed block: a `KC x NR` panel of `B` (32 KiB) stays in the L1 cache while
/// the kernel streams the `A` panels past it.
const KC: usize = 256;
/// Rows of a packed block of `A` (`MC x KC`, 240 KiB: in the L2 cache); a multiple of `MR`.
const MC: usize = 240;
/// Columns of a packed block of `B` (`KC x NC`, 3 MiB: in the L3 cache); a multiple of `NR`.
const NC: usize = 3072;

/// Multiply-adds (`m n k`) from which [`sgemm`] takes a product: below, matrixmultiply is
/// as fast (its kernel fits small products as well, and its pool hands half a product to
/// a helper thread while the caller computes the other half, where a hand-off to rayon's
/// pool wakes two of its threads).
pub(super) const TAKES_FROM: usize = 288 * 288 * 288;

/// A matrix's shape in a product: `op(A)` is `m x k`, `op(B)` `k x n`, `C` `m x n`, all
/// stored row-major; `trans_a` (`trans_b`) says `A` (`B`) is stored as its transpose.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dims {
    pub(super) m: usize,
    pub(super) n: usize,
    pub(super) k: usize,
    pub(super) trans_a: bool,
    pub(super) trans_b: bool,
}

/// `C = alpha op(A) op(B) + beta C` on AVX-512 when the CPU has it and the product is at
/// least [`TAKES_FROM`] multiply-adds; `false` (nothing touched) otherwise, or when a slice
/// is shorter than its matrix. `C` is not read when `beta` is zero.
pub(super) fn sgemm(d: Dims, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) -> bool {
    work(d) >= TAKES_FROM && sgemm_split(d, alpha, a, b, beta, c, rayon::current_num_threads())
}

/// `m n k`, saturating.
fn work(d: Dims) -> usize {
    d.m.saturating_mul(d.n).saturating_mul(d.k)
}

/// [`sgemm`] in up to `pieces` pieces, whatever its size.
fn sgemm_split(
    d: Dims,
    alpha: f32,
    a: &[f32],
    b: &[f32],
    beta: f32,
    c: &mut [f32],
    pieces: usize,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let fits = |len: usize, x: usize, y: usize| x.checked_mul(y).is_some_and(|s| s <= len);
        if !std::arch::is_x86_feature_detected!("avx512f")
            || !fits(a.len(), d.m, d.k)
            || !fits(b.len(), d.k, d.n)
            || !fits(c.len(), d.m, d.n)
        {
            return false;
        }
        let (rsa, csa) = if d.trans_a { (1, d.m) } else { (d.k, 1) };
        let (rsb, csb) = if d.trans_b { (1, d.k) } else { (d.n, 1) };
        let p = Product {
            k: d.k,
            alpha,
            beta,
            a: a.as_ptr(),
            rsa,
            csa,
            b: b.as_ptr(),
            rsb,
            csb,
            c: c.as_mut_ptr(),
            rsc: d.n,
        };
        // Split rows or columns, in whole tiles, whichever leaves the largest piece fewer
        // tiles (rows on a tie).
        let (row_tiles, col_tiles) = (d.m.div_ceil(MR), d.n.div_ceil(NR));
        let pieces = pieces.clamp(1, row_tiles.max(col_tiles).max(1));
        let by_rows =
            row_tiles.div_ceil(pieces) * col_tiles <= row_tiles * col_tiles.div_ceil(pieces);
        let (tiles, tile, len) = if by_rows {
            (row_tiles, MR, d.m)
        } else {
            (col_tiles, NR, d.n)
        };
        let pieces = pieces.min(tiles.max(1));
        let block = |piece: usize| {
            let lo = (tiles * piece / pieces * tile).min(len);
            let hi = (tiles * (piece + 1) / pieces * tile).min(len);
            let (rows, cols) = if by_rows {
                (lo..hi, 0..d.n)
            } else {
                (0..d.m, lo..hi)
            };
            // SAFETY: AVX-512F is present (checked above); the slices hold the m x k, k x n
            // and m x n matrices the strides describe (checked above), so every index of the
            // block is inside them; the pieces' blocks of C are disjoint row (or column)
            // ranges, and `c` is borrowed exclusively for the whole split.
            unsafe { avx512::block(&p, rows, cols) }
        };
        in_pieces(0, pieces, &block);
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (d, alpha, a, b, beta, c, pieces);
        false
    }
}

/// Runs `f(piece)` for each piece in `lo..hi` across rayon's pool (`join`, which allocates
/// nothing).
fn in_pieces(lo: usize, hi: usize, f: &(impl Fn(usize) + Sync)) {
    if hi - lo <= 1 {
        if hi > lo {
            f(lo);
        }
        return;
    }
    let mid = lo + (hi - lo) / 2;
    rayon::join(|| in_pieces(lo, mid, f), || in_pieces(mid, hi, f));
}

/// One product's operands: element `(i, p)` of `op(A)` is at `a + i rsa + p csa`, `(p, j)` of
/// `op(B)` at `b + p rsb + j csb`, `(i, j)` of `C` at `c + i rsc + j`.
struct Product {
    k: usize,
    alpha: f32,
    beta: f32,
    a: *const f32,
    rsa: usize,
    csa: usize,
    b: *const f32,
    rsb: usize,
    csb: usize,
    c: *mut f32,
    rsc: usize,
}

// SAFETY: a `Product` only carries the pointers of slices `sgemm_split` borrows for as long
// as the product runs (`c` exclusively); the pieces read `a` and `b` and write disjoint
// blocks of `c`.
unsafe impl Sync for Product {}

/// 64 bytes: the unit of the packing buffers, so that every panel starts on a cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// One thread's packing buffers, grown to the largest block seen.
#[derive(Default)]
struct Packs {
    a: Vec<Line>,
    b: Vec<Line>,
}

impl Packs {
    /// The two buffers, holding at least `a` and `b` floats.
    fn reserve(&mut self, a: usize, b: usize) -> (*mut f32, *mut f32) {
        let grow = |v: &mut Vec<Line>, floats: usize| {
            let lines = floats.div_ceil(16);
            if v.len() < lines {
                v.resize(lines, Line([0.0; 16]));
            }
            v.as_mut_ptr().cast::<f32>()
        };
        (grow(&mut self.a, a), grow(&mut self.b, b))
    }
}

thread_local! {
    static PACKS: RefCell<Packs> = RefCell::new(Packs::default());
}

/// Runs `f` with this thread's packing buffers (a fresh pair if they are in use).
fn with_packs<R>(f: impl FnOnce(&mut Packs) -> R) -> R {
    let mut f = Some(f);
    let mut run = |packs: &mut Packs| f.take().map(|f| f(packs));
    PACKS
        .try_with(|cell| cell.try_borrow_mut().ok().and_then(|mut p| run(&mut p)))
        .ok()
        .flatten()
        .or_else(|| run(&mut Packs::default()))
        .unwrap_or_else(|| unreachable!("`run` calls `f` exactly once"))
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use core::arch::x86_64::*;
    use std::ops::Range;

    use super::{with_packs, Product, KC, MC, MR, NC, NR};

    /// How a kernel call updates its tile of `C`.
    #[derive(Clone, Copy)]
    enum Update {
        /// `C = alpha AB`: the first block when `beta` is zero (`C` is not read).
        Overwrite,
        /// `C = alpha AB + beta C`: the first block otherwise.
        Scale(f32),
        /// `C += alpha AB`: every later block.
        Accumulate,
    }

    /// The rows `rows` and columns `cols` of `C` of the product `p`.
    ///
    /// # Safety
    ///
    /// - The CPU has AVX-512F.
    /// - Every element of `op(A)`, `op(B)` and `C` that `p` addresses for these rows and
    ///   columns (all of `k`) is inside a live allocation; `A` and `B` are not written while
    ///   this runs, and no one else reads or writes this block of `C`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn block(p: &Product, rows: Range<usize>, cols: Range<usize>) {
        if rows.is_empty() || cols.is_empty() {
            return;
        }
        if p.k == 0 {
            for i in rows {
                for j in cols.clone() {
                    // SAFETY: (i, j) is in this block of C (the contract).
                    let c = unsafe { &mut *p.c.add(i * p.rsc + j) };
                    *c = if p.beta == 0.0 { 0.0 } else { *c * p.beta };
                }
            }
            return;
        }
        let mc_max = MC.min(rows.len().next_multiple_of(MR));
        let nc_max = NC.min(cols.len().next_multiple_of(NR));
        with_packs(|packs| {
            let (apack, bpack) = packs.reserve(mc_max * KC, KC * nc_max);
            for jc in cols.clone().step_by(NC) {
                let nc = NC.min(cols.end - jc);
                for pc in (0..p.k).step_by(KC) {
                    let kc = KC.min(p.k - pc);
                    // SAFETY: the B block lies in the product (the contract); the buffer
                    // holds KC x nc_max floats, at least kc x nc rounded up to NR.
                    unsafe { pack_b(p, pc, kc, jc, nc, bpack) };
                    let update = if pc > 0 {
                        Update::Accumulate
                    } else if p.beta == 0.0 {
                        Update::Overwrite
                    } else {
                        Update::Scale(p.beta)
                    };
                    for ic in rows.clone().step_by(MC) {
                        let mc = MC.min(rows.end - ic);
                        // SAFETY: as for B; the buffer holds mc_max x KC floats.
                        unsafe { pack_a(p, ic, mc, pc, kc, apack) };
                        for jr in (0..nc).step_by(NR) {
                            for ir in (0..mc).step_by(MR) {
                                // SAFETY: the panels were packed above, kc deep; the tile's
                                // rows and columns are in this block of C.
                                unsafe {
                                    kernel(
                                        kc,
                                        apack.add(ir * kc),
                                        bpack.add(jr * kc),
                                        p.c.add((ic + ir) * p.rsc + jc + jr),
                                        p.rsc,
                                        (mc - ir).min(MR),
                                        (nc - jr).min(NR),
                                        p.alpha,
                                        update,
                                    )
                                };
                            }
                        }
                    }
                }
            }
        });
    }

    /// Packs `op(B)[pc..pc + kc, jc..jc + nc]` into `dst` as panels of `NR` columns, each
    /// `kc x NR` row-major, the last zero-padded.
    ///
    /// # Safety
    ///
    /// The block lies in `p`'s `op(B)`; `dst` holds `kc` times `nc` rounded up to `NR`
    /// floats.
    #[inline]
    unsafe fn pack_b(p: &Product, pc: usize, kc: usize, jc: usize, nc: usize, dst: *mut f32) {
        // SAFETY: the block's origin is in op(B), and its columns are its lanes (the
        // contract).
        unsafe { pack::<NR>(p.b.add(pc * p.rsb + jc * p.csb), p.csb, p.rsb, nc, kc, dst) }
    }

    /// Packs `op(A)[ic..ic + mc, pc..pc + kc]` into `dst` as panels of `MR` rows, each
    /// `kc x MR` row-major (`A` transposed), the last zero-padded.
    ///
    /// # Safety
    ///
    /// The block lies in `p`'s `op(A)`; `dst` holds `mc` rounded up to `MR`, times `kc`
    /// floats.
    #[inline]
    unsafe fn pack_a(p: &Product, ic: usize, mc: usize, pc: usize, kc: usize, dst: *mut f32) {
        // SAFETY: the block's origin is in op(A), and its rows are its lanes (the contract).
        unsafe { pack::<MR>(p.a.add(ic * p.rsa + pc * p.csa), p.rsa, p.csa, mc, kc, dst) }
    }

    /// Packs a block of `n` lanes by `kc` steps (element `(l, q)` at `src + l lane + q
    /// step`) into `dst` as panels of `W` lanes, each `kc x W` row-major, the last
    /// zero-padded: `B`'s columns ([`pack_b`]) or `A`'s rows ([`pack_a`]).
    ///
    /// # Safety
    ///
    /// Every element of the block is readable; `dst` holds `n` rounded up to `W`, times
    /// `kc` floats.
    #[inline]
    unsafe fn pack<const W: usize>(
        src: *const f32,
        lane: usize,
        step: usize,
        n: usize,
        kc: usize,
        dst: *mut f32,
    ) {
        for first in (0..n).step_by(W) {
            let lanes = (n - first).min(W);
            // SAFETY: panel `first / W` of `dst`, kc x W floats, is inside it (the
            // contract).
            let panel = unsafe { std::slice::from_raw_parts_mut(dst.add(first * kc), kc * W) };
            // SAFETY: the panel's elements are in the block (the contract).
            let src = unsafe { src.add(first * lane) };
            if lane == 1 {
                for (q, row) in panel.chunks_exact_mut(W).enumerate() {
                    // SAFETY: step q of the panel: `lanes` contiguous floats of the block.
                    let from = unsafe { std::slice::from_raw_parts(src.add(q * step), lanes) };
                    row[..lanes].copy_from_slice(from);
                    row[lanes..].fill(0.0);
                }
            } else {
                for l in 0..W {
                    for q in 0..kc {
                        panel[q * W + l] = if l < lanes {
                            // SAFETY: (l, q) is in the panel's part of the block.
                            unsafe { *src.add(q * step + l * lane) }
                        } else {
                            0.0
                        };
                    }
                }
            }
        }
    }

    /// The `rows x cols` tile of `C` at `c` (row stride `rsc`) from a `kc x MR` panel of `A`
    /// and a `kc x NR` panel of `B`, updated as `update` says.
    ///
    /// # Safety
    ///
    /// - The CPU has AVX-512F.
    /// - `a` holds `kc MR` floats and `b` `kc NR`, 64-byte aligned.
    /// - `rows <= MR`, `cols <= NR`, and the tile's elements are valid for reads and
    ///   writes (reads only where `update` reads `C`).
    #[inline]
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn kernel(
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        rsc: usize,
        rows: usize,
        cols: usize,
        alpha: f32,
        update: Update,
    ) {
        // C's tile is read at the end, after kc steps: fetch it now, so that the read does
        // not wait on memory (C is often far larger than the caches). A prefetch never faults.
        for i in 0..rows {
            let row = c.wrapping_add(i * rsc);
            for j in [0, 16.min(cols - 1), cols - 1] {
                _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(j).cast());
            }
        }
        let mut acc = [[_mm512_setzero_ps(); 2]; MR];
        for q in 0..kc {
            // SAFETY: row q of each panel is inside it (q < kc), and B's rows of NR
            // floats start on 64-byte boundaries.
            let (b0, b1, aq) = unsafe {
                (
                    _mm512_load_ps(b.add(q * NR)),
                    _mm512_load_ps(b.add(q * NR + 16)),
                    a.add(q * MR),
                )
            };
            for (i, row) in acc.iter_mut().enumerate() {
                // SAFETY: i < MR, inside row q of A's panel.
                let ai = _mm512_set1_ps(unsafe { *aq.add(i) });
                row[0] = _mm512_fmadd_ps(ai, b0, row[0]);
                row[1] = _mm512_fmadd_ps(ai, b1, row[1]);
            }
        }
        let mask = |from: usize| -> __mmask16 {
            let n = cols.saturating_sub(from).min(16);
            ((1u32 << n) - 1) as __mmask16
        };
        let masks = [mask(0), mask(16)];
        let alpha = _mm512_set1_ps(alpha);
        for (i, row) in acc.iter().enumerate().take(rows) {
            for (h, (&sum, &m)) in row.iter().zip(&masks).enumerate() {
                if m == 0 {
                    continue;
                }
                // Lanes the mask leaves out are neither read nor written, so the pointer may
                // pass the end of C there (hence `wrapping_add`).
                let at = c.wrapping_add(i * rsc + 16 * h);
                let v = match update {
                    Update::Overwrite => _mm512_mul_ps(alpha, sum),
                    // SAFETY: the masked lanes are the tile's elements of C (the contract).
                    Update::Scale(beta) => unsafe {
                        let old = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, at), _mm512_set1_ps(beta));
                        _mm512_fmadd_ps(alpha, sum, old)
                    },
                    // SAFETY: as above.
                    Update::Accumulate => unsafe {
                        _mm512_fmadd_ps(alpha, sum, _mm512_maskz_loadu_ps(m, at))
                    },
                };
                // SAFETY: as above.
                unsafe { _mm512_mask_storeu_ps(at, m, v) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` floats of assorted signs and magnitudes, from `seed`.
    fn input(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let unit = (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                unit * [1.0, 3.0, 0.125][(s % 3) as usize]
            })
            .collect()
    }

    /// `γ(n) = n u / (1 - n u)`, the bound on `n` roundings of unit roundoff `u`.
    fn gamma(n: usize, u: f64) -> f64 {
        let nu = n as f64 * u;
        nu / (1.0 - nu)
    }

    /// Checks `got` (from `c0`) against an f64 triple loop, entry by entry, within the
    /// facade's gemm tolerance (`γ(k + 2) · scale` twice, plus an ulp of f32).
    #[allow(clippy::too_many_arguments)]
    fn check(d: Dims, alpha: f32, a: &[f32], b: &[f32], beta: f32, c0: &[f32], got: &[f32]) {
        let at = |i: usize, p: usize| {
            f64::from(if d.trans_a {
                a[p * d.m + i]
            } else {
                a[i * d.k + p]
            })
        };
        let bt = |p: usize, j: usize| {
            f64::from(if d.trans_b {
                b[j * d.k + p]
            } else {
                b[p * d.n + j]
            })
        };
        let eps = f64::from(f32::EPSILON);
        for i in 0..d.m {
            for j in 0..d.n {
                let (mut sum, mut abs) = (0.0f64, 0.0f64);
                for p in 0..d.k {
                    sum += at(i, p) * bt(p, j);
                    abs += (at(i, p) * bt(p, j)).abs();
                }
                let old = if beta == 0.0 {
                    0.0
                } else {
                    f64::from(beta) * f64::from(c0[i * d.n + j])
                };
                let want = f64::from(alpha) * sum + old;
                let scale = f64::from(alpha).abs() * abs + old.abs();
                let g = f64::from(got[i * d.n + j]);
                let ulp = f64::from(f32::EPSILON)
                    * want.abs().max(g.abs()).max(f64::from(f32::MIN_POSITIVE));
                let tol = 2.0 * gamma(d.k + 2, eps) * scale + ulp;
                assert!(
                    (g - want).abs() <= tol,
                    "{d:?} alpha {alpha} beta {beta} at ({i}, {j}): {g} vs {want} ({tol:e})"
                );
            }
        }
    }

    /// Whether this CPU runs the AVX-512 path; prints `SKIPPED` when not.
    fn has_avx512() -> bool {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            return true;
        }
        println!("SKIPPED: this CPU has no AVX-512F");
        false
    }

    #[test]
    fn sgemm_matches_an_f64_triple_loop_at_edge_shapes() {
        if !has_avx512() {
            return;
        }
        let shapes = [
            (1, 1, 1),
            (1, 1, 0),
            (5, 7, 0),
            (MR - 1, NR - 1, 3),
            (MR, NR, 1),
            (MR + 1, NR + 1, 2),
            (2 * MR + 5, 3 * NR - 7, 17),
            (3, 2 * NR + 1, KC - 1),
            (MR + 3, 5, KC),
            (7, NR + 3, KC + 1),
            (2, 3, 2 * KC + 9),
            (MC + 5, NR + 9, KC + 3),
            (3, NC + 37, 5),
        ];
        for (m, n, k) in shapes {
            for (trans_a, trans_b) in [(false, false), (true, false), (false, true), (true, true)] {
                let d = Dims {
                    m,
                    n,
                    k,
                    trans_a,
                    trans_b,
                };
                let (a, b) = (input(m * k, 1 + m as u64), input(k * n, 2 + n as u64));
                for (alpha, beta) in [(1.0, 0.0), (1.5, 0.25), (-0.5, 1.0), (0.0, -2.0)] {
                    let c0 = if beta == 0.0 {
                        vec![f32::NAN; m * n]
                    } else {
                        input(m * n, 3)
                    };
                    let mut c = c0.clone();
                    assert!(sgemm_split(d, alpha, &a, &b, beta, &mut c, 2), "{d:?} ran");
                    check(d, alpha, &a, &b, beta, &c0, &c);
                }
            }
        }
    }

    #[test]
    fn sgemm_gives_the_same_bits_on_any_number_of_threads() {
        if !has_avx512() {
            return;
        }
        for (m, n, k) in [
            (37, 45, 19),
            (150, 130, 120),
            (13, 200, KC + 40),
            (301, 64, 2 * KC + 1),
        ] {
            for (trans_a, trans_b) in [(false, false), (true, true)] {
                let d = Dims {
                    m,
                    n,
                    k,
                    trans_a,
                    trans_b,
                };
                let (a, b, c0) = (input(m * k, 5), input(k * n, 6), input(m * n, 7));
                let run = |pieces: usize| {
                    let mut c = c0.clone();
                    assert!(sgemm_split(d, 0.75, &a, &b, 0.5, &mut c, pieces));
                    c.iter().map(|x| x.to_bits()).collect::<Vec<u32>>()
                };
                let one = run(1);
                for pieces in [2, 3, 7] {
                    assert!(run(pieces) == one, "{d:?}: {pieces} pieces differ from one");
                }
            }
        }
        // The entry point, in pools of one and two threads.
        let d = Dims {
            m: 300,
            n: 310,
            k: 290,
            trans_a: false,
            trans_b: true,
        };
        assert!(work(d) >= TAKES_FROM);
        let (a, b) = (input(300 * 290, 8), input(290 * 310, 9));
        let in_pool = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a thread pool");
            let mut c = vec![f32::NAN; 300 * 310];
            assert!(pool.install(|| sgemm(d, 1.0, &a, &b, 0.0, &mut c)));
            c.iter().map(|x| x.to_bits()).collect::<Vec<u32>>()
        };
        assert!(in_pool(1) == in_pool(2), "one and two threads differ");
    }

    #[test]
    fn sgemm_leaves_small_products_and_short_slices_to_the_caller() {
        let small = Dims {
            m: 8,
            n: 8,
            k: 8,
            trans_a: false,
            trans_b: false,
        };
        let mut c = [1.0f32; 64];
        assert!(!sgemm(small, 1.0, &[0.0; 64], &[0.0; 64], 0.0, &mut c));
        let d = Dims {
            m: 64,
            n: 64,
            k: 64,
            trans_a: false,
            trans_b: false,
        };
        let mut c = vec![1.0f32; 64 * 64];
        assert!(!sgemm_split(
            d,
            1.0,
            &[0.0; 64],
            &vec![0.0; 64 * 64],
            0.0,
            &mut c,
            1
        ));
        assert!(c.iter().all(|&x| x == 1.0), "nothing written");
    }
}
