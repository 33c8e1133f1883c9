//! The kernel language, construct by construct: small `#[kernel]`s, each run on every
//! backend against the same computation in plain Rust on host slices.

use gpukit::{kernel, LaunchConfig};

/// Integer arithmetic wraps; `/ 0` gives the dividend and `% 0` gives 0 (WGSL's rules,
/// which CUDA and the CPU twin follow); shifts take the amount modulo the width.
#[kernel]
pub(super) fn int_ops(a: &[i32], b: &[i32], out: &mut [i32]) {
    let i = global_x();
    if i < a.len() {
        let (x, y) = (a[i], b[i]);
        let s = (y as u32) & 7;
        out[i * 8] = x + y;
        out[i * 8 + 1] = x - y;
        out[i * 8 + 2] = x * y;
        out[i * 8 + 3] = x / y;
        out[i * 8 + 4] = x % y;
        out[i * 8 + 5] = (x << s) ^ (y >> s);
        out[i * 8 + 6] = (x & y) | !x;
        out[i * 8 + 7] = -x + x.abs().min(y).max(-5);
    }
}

pub(super) fn int_ops_ref(a: &[i32], b: &[i32]) -> Vec<i32> {
    let mut out = vec![0; a.len() * 8];
    for i in 0..a.len() {
        let (x, y) = (a[i], b[i]);
        let s = (y as u32) & 7;
        let o = &mut out[i * 8..i * 8 + 8];
        o[0] = x.wrapping_add(y);
        o[1] = x.wrapping_sub(y);
        o[2] = x.wrapping_mul(y);
        o[3] = if y == 0 { 0 } else { x.wrapping_div(y) };
        o[4] = if y == 0 { 0 } else { x.wrapping_rem(y) };
        o[5] = x.wrapping_shl(s) ^ y.wrapping_shr(s);
        o[6] = (x & y) | !x;
        o[7] = x
            .wrapping_neg()
            .wrapping_add(x.wrapping_abs().min(y).max(-5));
    }
    out
}

/// `mul_hi`: the high word of the 64-bit product of two `u32`s (WGSL builds it from 16-bit
/// halves, CUDA has `__umulhi`).
#[kernel]
pub(super) fn mul_hi_words(a: &[u32], b: &[u32], out: &mut [u32]) {
    let i = global_x();
    if i < a.len() {
        out[i] = a[i].mul_hi(b[i]);
    }
}

/// Unsigned arithmetic, casts between integer and float types (in range), comparisons
/// into a value with `if`/`else`.
#[kernel]
pub(super) fn casts(a: &[u32], out: &mut [f32], bits: &mut [u32]) {
    let i = global_x();
    if i < a.len() {
        let v = a[i];
        let f = (v % 1000) as f32 * 0.5 - 100.0;
        out[i] = if f < 0.0 {
            -f
        } else if f > 200.0 {
            200.0
        } else {
            f
        };
        bits[i] = (f as i32) as u32 + (v / 3) * 7 - (v >> 4);
    }
}

pub(super) fn casts_ref(a: &[u32]) -> (Vec<f32>, Vec<u32>) {
    let mut out = Vec::new();
    let mut bits = Vec::new();
    for &v in a {
        let f = (v % 1000) as f32 * 0.5 - 100.0;
        out.push(if f < 0.0 {
            -f
        } else if f > 200.0 {
            200.0
        } else {
            f
        });
        bits.push(
            ((f as i32) as u32)
                .wrapping_add((v / 3).wrapping_mul(7))
                .wrapping_sub(v >> 4),
        );
    }
    (out, bits)
}

/// Loops: `for` with a step, `while`, `loop` with `break` and `continue`, an early `return`,
/// a compound assignment to an array element.
#[kernel]
pub(super) fn loops(n: &[u32], out: &mut [u32]) {
    let i = global_x();
    if i >= n.len() {
        return;
    }
    let m = n[i];
    let mut acc = 0u32;
    for j in (0..m).step_by(3) {
        acc += j;
    }
    let mut k = m;
    while k > 1 {
        k = if k % 2 == 0 { k / 2 } else { 3 * k + 1 };
        acc += 1;
    }
    let mut t = 0u32;
    loop {
        t += 1;
        if t % 2 == 0 {
            continue;
        }
        if t > m {
            break;
        }
        acc ^= t;
    }
    out[i] = acc;
    out[i] += 1;
}

pub(super) fn loops_ref(n: &[u32]) -> Vec<u32> {
    n.iter()
        .map(|&m| {
            let mut acc = 0u32;
            for j in (0..m).step_by(3) {
                acc = acc.wrapping_add(j);
            }
            let mut k = m;
            while k > 1 {
                k = if k.is_multiple_of(2) {
                    k / 2
                } else {
                    3 * k + 1
                };
                acc = acc.wrapping_add(1);
            }
            let mut t = 0u32;
            loop {
                t += 1;
                if t.is_multiple_of(2) {
                    continue;
                }
                if t > m {
                    break;
                }
                acc ^= t;
            }
            acc.wrapping_add(1)
        })
        .collect()
}

/// The math methods, against the host's within a few ulps (each device has its own
/// implementations).
#[kernel]
pub(super) fn math(x: &[f32], out: &mut [f32]) {
    let i = global_x();
    if i < x.len() {
        let v = x[i];
        let o = i * 8;
        out[o] = v.exp();
        out[o + 1] = (v.abs() + 1.0).ln();
        out[o + 2] = v.tanh();
        out[o + 3] = v.abs().sqrt();
        out[o + 4] = (v.abs() + 0.5).powf(0.75);
        out[o + 5] = v.sin() + v.cos();
        out[o + 6] = v.floor() - v.ceil() + v.mul_add(2.0, 1.0);
        out[o + 7] = v.exp2().min(4.0).max(v.abs().log2());
    }
}

pub(super) fn math_ref(x: &[f32]) -> Vec<f32> {
    let mut out = Vec::new();
    for &v in x {
        out.extend([
            v.exp(),
            (v.abs() + 1.0).ln(),
            v.tanh(),
            v.abs().sqrt(),
            (v.abs() + 0.5).powf(0.75),
            v.sin() + v.cos(),
            v.floor() - v.ceil() + v.mul_add(2.0, 1.0),
            v.exp2().min(4.0).max(v.abs().log2()),
        ]);
    }
    out
}

/// `min` and `max` of every pair of special values (NaN, zeros of both signs, infinities),
/// and `ln_1p` near zero, where `(1 + x).ln()` loses the digits.
#[kernel]
pub(super) fn min_max_ln_1p(a: &[f32], b: &[f32], out: &mut [f32]) {
    let i = global_x();
    if i < a.len() {
        out[3 * i] = a[i].min(b[i]);
        out[3 * i + 1] = a[i].max(b[i]);
        out[3 * i + 2] = (a[i] * 1e-6).ln_1p();
    }
}

/// [`min_max_ln_1p`] on the host: a NaN loses to a number, and of two equal values (0.0 and
/// -0.0) the first wins, as the op table's `minimum` and `maximum` (not `f32::min`, which
/// may return either zero).
pub(super) fn min_max_ln_1p_ref(a: &[f32], b: &[f32]) -> Vec<f32> {
    let pick = |a: f32, b: f32, b_wins: bool| {
        if b_wins || (a.is_nan() && !b.is_nan()) {
            b
        } else {
            a
        }
    };
    a.iter()
        .zip(b)
        .flat_map(|(&a, &b)| [pick(a, b, b < a), pick(a, b, b > a), (a * 1e-6).ln_1p()])
        .collect()
}

/// Arithmetic, comparisons, casts and a shared array of every element type, for the
/// backends' outputs to be compared with the CPU twin's (on Vulkan the 8-bit types are
/// packed four to a word, computed in 32 bits and wrapped; the 64-bit ones need the
/// adapter's features).
#[kernel]
pub(super) fn every_type<T: Numeric>(a: &[T], b: &[T], out: &mut [T]) {
    let tile = shared::<T, 64>();
    let i = global_x();
    let t = thread_x();
    let mut v = a[0] - a[0];
    if i < a.len() {
        v = a[i];
    }
    tile[t] = v;
    barrier();
    let w = tile[63 - t];
    if i < a.len() {
        let (x, y) = (a[i], b[i]);
        let o = 6 * i;
        out[o] = x + y * w;
        out[o + 1] = x - y;
        out[o + 2] = x / y;
        out[o + 3] = x.min(y).max(w);
        out[o + 4] = if x < y { x * 2 } else { y - 1 };
        out[o + 5] = w;
        out[o + 5] += ((i % 7) as u8) as T;
    }
}

/// Atomics on u32, i32 and f32 arrays from every thread: counts, minima, maxima, a
/// compare-and-swap that only the first thread wins, a float sum.
#[kernel]
pub(super) fn atomics(
    x: &[i32],
    counts: &mut [u32],
    ext: &mut [i32],
    winner: &mut [u32],
    total: &mut [f32],
) {
    let i = global_x();
    if i < x.len() {
        let v = x[i];
        atomic_add(&mut counts[(v as u32 % 4) as usize], 1);
        atomic_min(&mut ext[0], v);
        atomic_max(&mut ext[1], v);
        let old = atomic_exchange(&mut ext[2], 7);
        atomic_cas(&mut winner[0], 0, i as u32 + 1);
        atomic_add(&mut total[0], (v % 8) as f32 * 0.25);
        if old != 7 && old != 0 {
            atomic_add(&mut counts[4], 1000);
        }
    }
}

/// Shared memory and barriers: each block reverses its part of `x` through shared memory
/// (every thread writes one element, then reads another thread's after the barrier), in
/// two dimensions.
#[kernel]
pub(super) fn block_reverse(x: &[f32], out: &mut [f32]) {
    let tile = shared::<f32, 64>();
    let t = thread_y() * block_dim_x() + thread_x();
    let per = block_dim_x() * block_dim_y();
    let base = (block_y() * grid_dim_x() + block_x()) * per;
    let i = base + t;
    tile[t] = if i < x.len() { x[i] } else { -1.0 };
    barrier();
    let r = tile[per - 1 - t];
    barrier();
    tile[t] = r * 2.0;
    barrier();
    if i < out.len() {
        out[i] = tile[t];
    }
}

pub(super) fn block_reverse_ref(x: &[f32], per: usize, blocks: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for b in 0..blocks {
        for t in 0..per {
            let i = b * per + t;
            let j = b * per + per - 1 - t;
            if i < x.len() {
                out[i] = if j < x.len() { x[j] } else { -1.0 } * 2.0;
            }
        }
    }
    out
}

/// Generic over every element type: `y += a * x + 1`, wrapping for integers.
#[kernel]
pub(super) fn axpy1<T: Numeric>(a: T, x: &[T], y: &mut [T]) {
    let i = global_x();
    if i < y.len() {
        y[i] += a * x[i] + 1;
    }
}

/// Generic over the float types, with a math method.
#[kernel]
pub(super) fn lerp_sqrt<T: Float>(a: &[T], b: &[T], t: T, out: &mut [T]) {
    let i = global_x();
    if i < out.len() {
        out[i] = (a[i] + (b[i] - a[i]) * t).abs().sqrt();
    }
}

/// A device function: scalars in, one scalar out; kernels call it, and so may the host.
#[kernel(device)]
pub(super) fn smoothstep(e0: f32, e1: f32, x: f32) -> f32 {
    let t = ((x - e0) / (e1 - e0)).max(0.0).min(1.0);
    t * t * (3.0 - 2.0 * t)
}

/// A device function with an early `return`.
#[kernel(device)]
pub(super) fn gain(x: f32, k: f32) -> f32 {
    if x < 0.5 {
        return 0.5 * (2.0 * x).powf(k);
    }
    1.0 - 0.5 * (2.0 - 2.0 * x).powf(k)
}

/// A device function calling two others.
#[kernel(device)]
pub(super) fn shaped(x: f32) -> f32 {
    gain(smoothstep(0.0, 1.0, x), 2.0)
}

/// A device function whose result is an integer division (its CUDA C brings the division
/// helper with it).
#[kernel(device)]
pub(super) fn mean2(a: i32, b: i32) -> i32 {
    (a + b) / 2
}

/// A device function with a loop: its CUDA C uses the generated code's 64-bit index type.
/// Regression test for "a `#[kernel(device)]` function with a `for` loop emits `gk_u64`,
/// whose typedef is in the kernel's prelude, which device functions are linked in front of"
/// (NVRTC: `identifier "gk_u64" is undefined`).
#[kernel(device)]
pub(super) fn sum_to(n: u32) -> u32 {
    let mut s = 0u32;
    for k in 0..n {
        s += k;
    }
    s
}

/// Calls `sum_to`.
#[kernel]
pub(super) fn triangles(n: &[u32], out: &mut [u32]) {
    let i = global_x();
    if i < out.len() {
        out[i] = sum_to(n[i]);
    }
}

/// Calls `mean2`.
#[kernel]
pub(super) fn means(a: &[i32], b: &[i32], out: &mut [i32]) {
    let i = global_x();
    if i < out.len() {
        out[i] = mean2(a[i], b[i]);
    }
}

/// A kernel calling device functions (one twice, through another).
#[kernel]
pub(super) fn shape(x: &[f32], out: &mut [f32]) {
    let i = global_x();
    if i < x.len() {
        out[i] = shaped(x[i]) + smoothstep(-1.0, 1.0, x[i]);
    }
}

/// f16 and bf16 arrays: an element read is an f32, an f32 written is rounded (the facade's
/// `half` feature provides the types).
#[cfg(feature = "half")]
#[kernel]
pub(super) fn halves(x: &[f16], y: &mut [bf16], s: f32) {
    let i = global_x();
    if i < x.len() && i < y.len() {
        y[i] += x[i] * s;
    }
}

/// A device function whose constant expression is 64-bit: its WGSL calls a helper that a
/// kernel without 64-bit types does not define itself.
#[kernel(device)]
pub(super) fn plus_seven(a: f32) -> f32 {
    a + ((3i64 * 5) / 2) as f32
}

/// f16 arrays (the module starts with `enable f16;`) and device functions linked in.
#[cfg(feature = "half")]
#[kernel]
pub(super) fn half_shaped(x: &[f16], y: &mut [f32]) {
    let i = global_x();
    if i < x.len() && i < y.len() {
        y[i] = plus_seven(shaped(x[i]));
    }
}

/// `a / b` in a kernel: the language's integer division, which the built-in `div` shares.
#[kernel]
pub(super) fn int_div(a: &[i32], b: &[i32], out: &mut [i32]) {
    let i = global_x();
    if i < a.len() {
        out[i] = a[i] / b[i];
    }
}

/// Rounds whose number each block reads from memory: thread 0 stores it in a shared array,
/// `uniform_load` gives it to the whole block, and the loop around the barriers is uniform.
/// Each round adds its right-hand neighbour's value to each element of a ring of 64.
#[kernel]
pub(super) fn counted_rounds(counts: &[u32], out: &mut [u32]) {
    let count = shared::<u32, 1>();
    let ring = shared::<u32, 64>();
    let t = thread_x();
    if t == 0 {
        count[0] = counts[block_x()];
    }
    ring[t] = t as u32;
    let n = uniform_load(&count[0]);
    for _round in 0..n as usize {
        let v = ring[(t + 1) % 64];
        barrier();
        ring[t] += v;
        barrier();
    }
    out[block_x() * 64 + t] = ring[t];
}

/// Thread coordinates in three dimensions.
#[kernel]
pub(super) fn coords(out: &mut [u32]) {
    let (x, y, z) = (global_x(), global_y(), global_z());
    let w = grid_dim_x() * block_dim_x();
    let h = grid_dim_y() * block_dim_y();
    let i = (z * h + y) * w + x;
    out[i] = (x + 10 * y + 100 * z) as u32;
}

/// Expressions of constants whose values exist only at run time by WGSL's rules: infinite
/// floats, integer division and remainder by zero, an overflow. (A NaN would be one too, but
/// WGSL lets a Vulkan driver assume no NaN: `nan != nan` is false on lavapipe.) WGSL
/// evaluates such an expression when the shader is created and refuses it; the kernel must
/// still compile everywhere and give the values Rust's wrapping arithmetic (with the
/// language's `x / 0 == 0` and `x % 0 == 0`) and IEEE floats give.
#[kernel]
pub(super) fn constants(x: &[i32], out: &mut [f32], ints: &mut [i32]) {
    let i = global_x();
    if i < x.len() {
        let z = 0i32;
        let m = 2147483647i32;
        out[i * 3] = 1.0f32 / 0.0;
        out[i * 3 + 1] = -1.0f32 / 0.0;
        out[i * 3 + 2] = 3.0e38f32 * 10.0;
        ints[i * 4] = x[i] / 0;
        ints[i * 4 + 1] = x[i] % z;
        ints[i * 4 + 2] = m + 1;
        ints[i * 4 + 3] = 7 / z + (5 % 0);
    }
}

/// Every subgroup collective and lane query, in blocks of 100 threads (a partial last
/// subgroup at every size that divides 32), with shuffles from lanes that are and are not
/// there; `info` records where each thread is.
#[kernel]
pub(super) fn subgroups(a: &[i32], f: &[f32], out: &mut [i32], fout: &mut [f32], info: &mut [u32]) {
    let i = global_x();
    let t = thread_x();
    let x = if i < a.len() { a[i] } else { 0 };
    let v = f[i];
    let sum = subgroup_add(x);
    let lo = subgroup_min(x);
    let hi = subgroup_max(x);
    let inc = subgroup_inclusive_add(x);
    let exc = subgroup_exclusive_add(x);
    let sh = subgroup_shuffle(x, (t * 7 + 3) % 40);
    let sx = subgroup_shuffle_xor(x, 5);
    let su = subgroup_shuffle_up(x, 3);
    let sd = subgroup_shuffle_down(x, 2);
    let any = subgroup_any(x > 900);
    let all = subgroup_all(x > -990);
    let fsum = subgroup_add(v);
    let fmin = subgroup_min(v);
    let fmax = subgroup_max(v);
    let fscan = subgroup_inclusive_add(v);
    let o = i * 11;
    out[o] = sum;
    out[o + 1] = lo;
    out[o + 2] = hi;
    out[o + 3] = inc;
    out[o + 4] = exc;
    out[o + 5] = sh;
    out[o + 6] = sx;
    out[o + 7] = su;
    out[o + 8] = sd;
    out[o + 9] = any as i32;
    out[o + 10] = all as i32;
    fout[i * 4] = fsum;
    fout[i * 4 + 1] = fmin;
    fout[i * 4 + 2] = fmax;
    fout[i * 4 + 3] = fscan;
    info[i * 4] = subgroup_size() as u32;
    info[i * 4 + 1] = subgroup_lane() as u32;
    info[i * 4 + 2] = subgroup_id() as u32;
    info[i * 4 + 3] = num_subgroups() as u32;
}

/// What [`subgroups`] computes with subgroups of `size` lanes, blocks of `block` threads.
pub(super) fn subgroups_ref(
    a: &[i32],
    f: &[f32],
    size: usize,
    block: usize,
) -> (Vec<i32>, Vec<f32>, Vec<u32>) {
    let n = f.len();
    let (mut out, mut fout, mut info) = (vec![0i32; n * 11], vec![0f32; n * 4], vec![0u32; n * 4]);
    let x = |i: usize| a.get(i).copied().unwrap_or(0);
    for i in 0..n {
        let t = i % block;
        let (lane, w) = (t % size, t / size);
        let base = i - lane;
        let lanes = size.min(block - w * size);
        let xs: Vec<i32> = (0..lanes).map(|l| x(base + l)).collect();
        let vs = &f[base..base + lanes];
        let pick = |src: Option<usize>| match src {
            Some(s) if s < lanes => xs[s],
            _ => xs[lane],
        };
        let min_nan = |m: &dyn Fn(f32, f32) -> bool| {
            vs.iter().copied().fold(
                f32::NAN,
                |acc, v| if acc.is_nan() || m(v, acc) { v } else { acc },
            )
        };
        let o = &mut out[i * 11..i * 11 + 11];
        o[0] = xs.iter().fold(0i32, |s, v| s.wrapping_add(*v));
        o[1] = *xs.iter().min().unwrap();
        o[2] = *xs.iter().max().unwrap();
        o[3] = xs[..=lane].iter().fold(0i32, |s, v| s.wrapping_add(*v));
        o[4] = xs[..lane].iter().fold(0i32, |s, v| s.wrapping_add(*v));
        o[5] = pick(Some((t * 7 + 3) % 40));
        o[6] = pick(Some(lane ^ 5));
        o[7] = pick(lane.checked_sub(3));
        o[8] = pick(Some(lane + 2));
        o[9] = xs.iter().any(|&v| v > 900) as i32;
        o[10] = xs.iter().all(|&v| v > -990) as i32;
        fout[i * 4] = vs.iter().sum();
        fout[i * 4 + 1] = min_nan(&|v, acc| v < acc);
        fout[i * 4 + 2] = min_nan(&|v, acc| v > acc);
        fout[i * 4 + 3] = vs[..=lane].iter().sum();
        info[i * 4..i * 4 + 4].copy_from_slice(&[
            size as u32,
            lane as u32,
            w as u32,
            block.div_ceil(size) as u32,
        ]);
    }
    (out, fout, info)
}

/// A block's elements reversed through a shared tile of `B` elements (the block size) and
/// scaled by `K`, or negated too with `NEG`: three compile-time parameters.
#[kernel]
pub(super) fn tile_reverse<const B: usize, const K: i32, const NEG: bool>(
    x: &[i32],
    out: &mut [i32],
) {
    let tile = shared::<i32, B>();
    let t = thread_x();
    let i = global_x();
    tile[t] = if i < x.len() { x[i] * K } else { 0 };
    barrier();
    if i < out.len() {
        let v = tile[B - 1 - t] + B as i32;
        out[i] = if NEG { -v } else { v };
    }
}

pub(super) fn tile_reverse_ref(x: &[i32], b: usize, k: i32, neg: bool) -> Vec<i32> {
    (0..x.len())
        .map(|i| {
            let j = i - i % b + (b - 1 - i % b);
            let v = x
                .get(j)
                .map_or(0, |v| v.wrapping_mul(k))
                .wrapping_add(b as i32);
            if neg {
                v.wrapping_neg()
            } else {
                v
            }
        })
        .collect()
}

/// Generic over its element type and a compile-time constant.
#[kernel]
pub(super) fn scale_by<T: Float, const N: u32>(x: &mut [T]) {
    let i = global_x();
    if i < x.len() {
        x[i] = x[i] * (N as T) + (N / 2) as T;
    }
}

crate::backend_tests! {
    fn kernel_constant_expressions_compile_and_give_run_time_values(ctx) {
        let x: Vec<i32> = vec![9, -4, i32::MIN];
        let k = ctx.kernel(constants())?;
        let dx = ctx.alloc_upload(&x)?;
        let (mut out, mut ints) = (ctx.alloc_zeros::<f32>(9)?, ctx.alloc_zeros::<i32>(12)?);
        ctx.launch(&k, LaunchConfig::for_elems(x.len()), (&dx, &mut out, &mut ints))?;
        let want: Vec<f32> = (0..3).flat_map(|_| [f32::INFINITY, f32::NEG_INFINITY, f32::INFINITY]).collect();
        assert_eq!(out.download()?, want);
        let want: Vec<i32> = x.iter().flat_map(|_| [0, 0, i32::MIN, 0]).collect();
        assert_eq!(ints.download()?, want);
        Ok(())
    }

    fn kernel_integer_arithmetic_wraps_like_the_cpu(ctx) {
        let a: Vec<i32> = vec![7, -7, i32::MAX, i32::MIN, 0, 12345, -1, 100, i32::MIN, 3];
        let b: Vec<i32> = vec![2, 0, 1, -1, 5, -77, 31, 33, 0, i32::MAX];
        let k = ctx.kernel(int_ops())?;
        let (da, db) = (ctx.alloc_upload(&a)?, ctx.alloc_upload(&b)?);
        let mut out = ctx.alloc_zeros::<i32>(a.len() * 8)?;
        ctx.launch(&k, LaunchConfig::for_elems(a.len()), (&da, &db, &mut out))?;
        assert_eq!(out.download()?, int_ops_ref(&a, &b));
        Ok(())
    }

    fn kernel_integer_division_is_the_built_in_div(ctx) {
        // By zero: 0 (NumPy's integer division gives 0 too); `MIN / -1` wraps to MIN; the
        // rest truncates toward zero.
        let a: Vec<i32> = vec![7, -7, 0, i32::MIN, i32::MIN, 5, -9, i32::MAX, 3];
        let b: Vec<i32> = vec![0, 0, 0, -1, 0, 2, 4, -1, 7];
        let want = vec![0, 0, 0, i32::MIN, 0, 2, -2, -i32::MAX, 0];
        // The macro names the loaded kernel's type: `int_div` -> `IntDivKernel`.
        let k: IntDivKernel = ctx.kernel(int_div())?;
        let (da, db) = (ctx.alloc_upload(&a)?, ctx.alloc_upload(&b)?);
        let mut out = ctx.alloc_zeros::<i32>(a.len())?;
        ctx.launch(&k, LaunchConfig::for_elems(a.len()), (&da, &db, &mut out))?;
        assert_eq!(out.download()?, want, "the kernel's `a / b`");
        let mut built_in = ctx.alloc_zeros::<i32>(a.len())?;
        ctx.div(&da, &db, &mut built_in)?;
        assert_eq!(built_in.download()?, want, "the built-in `div`");
        Ok(())
    }

    fn kernel_uniform_load_bounds_a_loop_of_barriers_by_a_value_from_memory(ctx) {
        let counts = [0u32, 1, 3, 7, 2];
        let k = ctx.kernel(counted_rounds())?;
        let dc = ctx.alloc_upload(&counts)?;
        let mut out = ctx.alloc_zeros::<u32>(counts.len() * 64)?;
        ctx.launch(&k, LaunchConfig::linear(counts.len() as u32, 64), (&dc, &mut out))?;
        let mut want = Vec::new();
        for &n in &counts {
            let mut ring: Vec<u32> = (0..64).collect();
            for _ in 0..n {
                ring = (0..64).map(|i| ring[i].wrapping_add(ring[(i + 1) % 64])).collect();
            }
            want.extend(ring);
        }
        assert_eq!(out.download()?, want);
        Ok(())
    }

    fn kernel_mul_hi_is_the_high_word_of_the_product(ctx) {
        let edges = [0u32, 1, 2, 0xffff, 0x1_0000, 0x1_0001, 0x7fff_ffff, 0x8000_0000, u32::MAX];
        let mut a: Vec<u32> = Vec::new();
        let mut b: Vec<u32> = Vec::new();
        for &x in &edges {
            for &y in &edges {
                a.push(x);
                b.push(y);
            }
        }
        for i in 0..4096u32 {
            a.push(i.wrapping_mul(2654435761) ^ (i << 7));
            b.push(i.wrapping_mul(0xD251_1F53).rotate_left(i % 32));
        }
        let k = ctx.kernel(mul_hi_words())?;
        let (da, db) = (ctx.alloc_upload(&a)?, ctx.alloc_upload(&b)?);
        let mut out = ctx.alloc_zeros::<u32>(a.len())?;
        ctx.launch(&k, LaunchConfig::for_elems(a.len()), (&da, &db, &mut out))?;
        let want: Vec<u32> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| ((u64::from(x) * u64::from(y)) >> 32) as u32)
            .collect();
        assert_eq!(out.download()?, want);
        Ok(())
    }

    fn kernel_casts_and_if_values_agree(ctx) {
        let a: Vec<u32> = (0..1000u32).map(|i| i.wrapping_mul(2654435761)).collect();
        let k = ctx.kernel(casts())?;
        let da = ctx.alloc_upload(&a)?;
        let (mut out, mut bits) = (ctx.alloc_zeros::<f32>(a.len())?, ctx.alloc_zeros::<u32>(a.len())?);
        ctx.launch(&k, LaunchConfig::for_elems(a.len()), (&da, &mut out, &mut bits))?;
        let (want_out, want_bits) = casts_ref(&a);
        assert_eq!(out.download()?, want_out);
        assert_eq!(bits.download()?, want_bits);
        Ok(())
    }

    fn kernel_loops_break_continue_and_return(ctx) {
        let n: Vec<u32> = (0..200u32).map(|i| i * 7 % 97).collect();
        let k = ctx.kernel(loops())?;
        let dn = ctx.alloc_upload(&n)?;
        // More threads than elements: the extra ones return early.
        let mut out = ctx.alloc_zeros::<u32>(n.len())?;
        ctx.launch(&k, LaunchConfig::linear(4, 64), (&dn, &mut out))?;
        assert_eq!(out.download()?, loops_ref(&n));
        Ok(())
    }

    fn kernel_math_methods_agree_within_ulps(ctx) {
        let x: Vec<f32> = (0..512).map(|i| (i as f32 - 256.0) / 37.0).collect();
        let k = ctx.kernel(math())?;
        let dx = ctx.alloc_upload(&x)?;
        let mut out = ctx.alloc_zeros::<f32>(x.len() * 8)?;
        ctx.launch(&k, LaunchConfig::for_elems(x.len()), (&dx, &mut out))?;
        let got = out.download()?;
        let want = math_ref(&x);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // Absolute near zero (sin + cos, floor - ceil cancel), relative elsewhere.
            let tol = 4e-6f32.max(w.abs() * 2e-5);
            assert!((g - w).abs() <= tol, "math[{i}] (x = {}, fn {}): {g} vs {w}", x[i / 8], i % 8);
        }
        Ok(())
    }

    fn kernel_of_every_element_type_matches_the_cpu_twin(ctx) {
        let Some(cpu) = crate::common::cpu() else { return Ok(()) };
        let have = ctx.info().op_dtypes.clone();
        macro_rules! case {
            ($t:ty) => {
                case!($t, |v: i64| v as $t)
            };
            ($t:ty, $from:expr) => {{
                let dtype = <$t as gpukit::Element>::DTYPE;
                // Small and large values of both signs (wrapped into the type), and divisors
                // that include 0 and -1.
                let a: Vec<$t> = (0..200i64).map(|i| $from((i * 37 % 255) - 128 + i * i * 1000)).collect();
                let b: Vec<$t> = (0..200i64).map(|i| $from((i * 13 % 11) - 5)).collect();
                let run = |ctx: &gpukit::Context| -> gpukit::Result<Vec<$t>> {
                    let k = ctx.kernel(every_type::<$t>())?;
                    let (da, db) = (ctx.alloc_upload(&a)?, ctx.alloc_upload(&b)?);
                    let mut out = ctx.alloc_zeros::<$t>(a.len() * 6)?;
                    ctx.launch(&k, LaunchConfig::linear(4, 64), (&da, &db, &mut out))?;
                    out.download()
                };
                match run(ctx) {
                    // A Vulkan adapter without the type's feature: the kernel says which.
                    Err(gpukit::Error::KernelUnavailable { hint, .. }) if !have.contains(&dtype) => {
                        assert!(hint.contains("adapter lacks"), "{hint}");
                    }
                    got => {
                        let (got, want) = (got?, run(&cpu)?);
                        // Debug text: bit for bit but for NaN payloads, the signs of zeros kept.
                        assert_eq!(format!("{got:?}"), format!("{want:?}"), "{dtype}");
                    }
                }
            }};
        }
        case!(f32);
        case!(f64);
        case!(i32);
        case!(u32);
        case!(i64);
        case!(u64);
        case!(u8);
        case!(i8);
        // Computed in f32 and rounded to 16 bits on every backend (large values overflow to
        // infinities, and their differences to NaN, alike).
        #[cfg(feature = "half")]
        {
            case!(gpukit::half::f16, |v: i64| gpukit::half::f16::from_f32(v as f32));
            case!(gpukit::half::bf16, |v: i64| gpukit::half::bf16::from_f32(v as f32));
        }
        Ok(())
    }

    fn kernel_min_max_take_the_first_of_equals_and_drop_nan(ctx) {
        let special = [f32::NAN, 0.0, -0.0, 1.0, -1.0, f32::INFINITY, f32::NEG_INFINITY, 0.25];
        let (a, b): (Vec<f32>, Vec<f32>) =
            special.iter().flat_map(|&a| special.iter().map(move |&b| (a, b))).unzip();
        let k = ctx.kernel(min_max_ln_1p())?;
        let (da, db) = (ctx.alloc_upload(&a)?, ctx.alloc_upload(&b)?);
        let mut out = ctx.alloc_zeros::<f32>(a.len() * 3)?;
        ctx.launch(&k, LaunchConfig::for_elems(a.len()), (&da, &db, &mut out))?;
        let got = out.download()?;
        let want = min_max_ln_1p_ref(&a, &b);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let (x, y) = (a[i / 3], b[i / 3]);
            if i % 3 < 2 {
                // Bit for bit: the sign of a zero, and a NaN only where both are NaN.
                assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{} of {x} and {y}: {g} vs {w}", ["min", "max"][i % 3]);
            } else {
                // ln(1 + 1e-6 x) for |x| <= 1 is about 1e-6 x: 2 ulps relative, where the
                // rounding of 1 + 1e-6 x alone is off by several percent.
                let tol = w.abs() * 2.5e-7;
                assert!((g - w).abs() <= tol || (g.is_nan() && w.is_nan()) || g == w, "ln_1p(1e-6 * {x}): {g} vs {w}");
            }
        }
        Ok(())
    }

    fn kernel_atomics_from_every_thread(ctx) {
        let x: Vec<i32> = (0..3000).map(|i: i32| (i.wrapping_mul(7919) % 2001) - 1000).collect();
        let k = ctx.kernel(atomics())?;
        let dx = ctx.alloc_upload(&x)?;
        let mut counts = ctx.alloc_zeros::<u32>(5)?;
        let mut ext = ctx.alloc_upload(&[i32::MAX, i32::MIN, 0])?;
        let mut winner = ctx.alloc_zeros::<u32>(1)?;
        let mut total = ctx.alloc_zeros::<f32>(1)?;
        ctx.launch(&k, LaunchConfig::for_elems(x.len()), (&dx, &mut counts, &mut ext, &mut winner, &mut total))?;
        let mut want = [0u32; 5];
        for &v in &x {
            want[(v as u32 % 4) as usize] += 1;
        }
        // Exactly one thread saw ext[2] == 0 (the first exchange); every other saw 7.
        assert_eq!(counts.download()?, want);
        let ext = ext.download()?;
        assert_eq!(ext[..2], [*x.iter().min().unwrap(), *x.iter().max().unwrap()]);
        assert_eq!(ext[2], 7);
        let w = winner.download()?[0];
        assert!((1..=x.len() as u32).contains(&w), "one thread's id wins: {w}");
        // Multiples of 0.25 below 2^24 add exactly in any order.
        let sum: f32 = x.iter().map(|v| (v % 8) as f32 * 0.25).sum();
        assert_eq!(total.download()?[0], sum);
        Ok(())
    }

    fn kernel_shared_memory_and_barriers_in_two_dimensions(ctx) {
        let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5).collect();
        let k = ctx.kernel(block_reverse())?;
        let dx = ctx.alloc_upload(&x)?;
        let mut out = ctx.alloc_zeros::<f32>(x.len())?;
        // 16 blocks (4 x 4) of 8 x 8 threads: 1024 threads over 1000 elements.
        let cfg = LaunchConfig::new([4, 4, 1], [8, 8, 1]);
        ctx.launch(&k, cfg, (&dx, &mut out))?;
        assert_eq!(out.download()?, block_reverse_ref(&x, 64, 16));
        Ok(())
    }

    fn kernel_generic_over_the_element_type(ctx) {
        // i32, f32 and u8 everywhere; f64 where the backend has it (a Vulkan adapter's
        // SHADER_F64).
        let f64s = ctx.info().op_dtypes.contains(&gpukit::DType::F64);
        let x: Vec<i32> = (0..300).map(|i| i * 7 - 1000).collect();
        // A generic kernel's loaded type takes the element type (`Axpy1Kernel<T>`), and
        // names the parameter of a function that launches it.
        fn run(ctx: &gpukit::Context, k: &Axpy1Kernel<i32>, a: i32, x: &gpukit::GpuArray<i32>, y: &mut gpukit::GpuArray<i32>) -> gpukit::Result<()> {
            ctx.launch(k, LaunchConfig::for_elems(x.len()), (a, x, y))
        }
        let k: Axpy1Kernel<i32> = ctx.kernel(axpy1::<i32>())?;
        let dx = ctx.alloc_upload(&x)?;
        let mut dy = ctx.alloc_upload(&vec![5i32; 300])?;
        run(ctx, &k, -3i32, &dx, &mut dy)?;
        let want: Vec<i32> = x.iter().map(|&v| 5 + (-3 * v) + 1).collect();
        assert_eq!(dy.download()?, want);
        let k = ctx.kernel(axpy1::<u8>())?;
        let xs: Vec<u8> = (0..=255).collect();
        let dx = ctx.alloc_upload(&xs)?;
        let mut dy = ctx.alloc_upload(&[200u8; 256])?;
        ctx.launch(&k, LaunchConfig::for_elems(256), (3u8, &dx, &mut dy))?;
        let want: Vec<u8> = xs.iter().map(|&v| 200u8.wrapping_add(3u8.wrapping_mul(v)).wrapping_add(1)).collect();
        assert_eq!(dy.download()?, want);
        let a: Vec<f32> = (0..100).map(|i| i as f32 * 0.25).collect();
        let b: Vec<f32> = (0..100).map(|i| 50.0 - i as f32).collect();
        let k = ctx.kernel(lerp_sqrt::<f32>())?;
        let (da, db) = (ctx.alloc_upload(&a)?, ctx.alloc_upload(&b)?);
        let mut out = ctx.alloc_zeros::<f32>(100)?;
        ctx.launch(&k, LaunchConfig::for_elems(100), (&da, &db, 0.3f32, &mut out))?;
        let want: Vec<f32> = a.iter().zip(&b).map(|(&a, &b)| (a + (b - a) * 0.3).abs().sqrt()).collect();
        assert_eq!(out.download()?, want);
        // f16 and bf16: arrays and the scalar `a` of the 16-bit type, computed in f32.
        #[cfg(feature = "half")]
        {
            use gpukit::half::{bf16, f16};
            let k = ctx.kernel(axpy1::<f16>())?;
            let xs: Vec<f16> = (0..300).map(|i| f16::from_f32(i as f32 * 0.125 - 20.0)).collect();
            let dx = ctx.alloc_upload(&xs)?;
            let mut dy = ctx.alloc_upload(&vec![f16::from_f32(0.5); 300])?;
            ctx.launch(&k, LaunchConfig::for_elems(300), (f16::from_f32(-1.5), &dx, &mut dy))?;
            let want: Vec<f16> = xs.iter().map(|v| f16::from_f32(0.5 + (-1.5 * v.to_f32() + 1.0))).collect();
            assert_eq!(dy.download()?, want);
            let k = ctx.kernel(lerp_sqrt::<bf16>())?;
            let (ha, hb): (Vec<bf16>, Vec<bf16>) = a.iter().zip(&b).map(|(&a, &b)| (bf16::from_f32(a), bf16::from_f32(b))).unzip();
            let (da, db) = (ctx.alloc_upload(&ha)?, ctx.alloc_upload(&hb)?);
            let mut out = ctx.alloc_zeros::<bf16>(100)?;
            let t = bf16::from_f32(0.3);
            ctx.launch(&k, LaunchConfig::for_elems(100), (&da, &db, t, &mut out))?;
            let want: Vec<bf16> = ha.iter().zip(&hb).map(|(a, b)| {
                let (a, b, t) = (a.to_f32(), b.to_f32(), t.to_f32());
                bf16::from_f32((a + (b - a) * t).abs().sqrt())
            }).collect();
            assert_eq!(out.download()?, want);
        }
        if f64s {
            let a64: Vec<f64> = a.iter().map(|&v| f64::from(v)).collect();
            let k = ctx.kernel(lerp_sqrt::<f64>())?;
            let da = ctx.alloc_upload(&a64)?;
            let mut out = ctx.alloc_zeros::<f64>(100)?;
            ctx.launch(&k, LaunchConfig::for_elems(100), (&da, &da, 0.5f64, &mut out))?;
            let want: Vec<f64> = a64.iter().map(|v| v.abs().sqrt()).collect();
            assert_eq!(out.download()?, want);
        }
        Ok(())
    }

    fn kernel_calls_device_functions(ctx) {
        let x: Vec<f32> = (0..200).map(|i| i as f32 / 100.0 - 0.5).collect();
        let k = ctx.kernel(shape())?;
        let dx = ctx.alloc_upload(&x)?;
        let mut out = ctx.alloc_zeros::<f32>(x.len())?;
        ctx.launch(&k, LaunchConfig::for_elems(x.len()), (&dx, &mut out))?;
        // The device functions are Rust functions on the host too.
        let want: Vec<f32> = x.iter().map(|&v| shaped(v) + smoothstep(-1.0, 1.0, v)).collect();
        let got = out.download()?;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-6, "shape[{i}] (x = {}): {g} vs {w}", x[i]);
        }
        assert_eq!(shaped(0.25), gain(smoothstep(0.0, 1.0, 0.25), 2.0));
        let (a, b) = ([7, -7, i32::MAX, 4], [2, -2, 1, -9]);
        let k = ctx.kernel(means())?;
        let (da, db) = (ctx.alloc_upload(&a)?, ctx.alloc_upload(&b)?);
        let mut out = ctx.alloc_zeros::<i32>(4)?;
        ctx.launch(&k, LaunchConfig::for_elems(4), (&da, &db, &mut out))?;
        assert_eq!(out.download()?, [4, -4, i32::MIN / 2, -2]);
        let n: Vec<u32> = vec![0, 1, 2, 10, 1000];
        let k = ctx.kernel(triangles())?;
        let dn = ctx.alloc_upload(&n)?;
        let mut out = ctx.alloc_zeros::<u32>(n.len())?;
        ctx.launch(&k, LaunchConfig::for_elems(n.len()), (&dn, &mut out))?;
        assert_eq!(out.download()?, [0, 0, 1, 45, 499_500]);
        Ok(())
    }

    #[cfg(feature = "half")]
    fn kernel_with_f16_arrays_links_device_functions(ctx) {
        use gpukit::half::f16;
        let k = match (ctx.backend_name(), ctx.kernel(half_shaped())) {
            ("vulkan", Err(gpukit::Error::KernelUnavailable { hint, .. }))
                if !ctx.info().op_dtypes.contains(&gpukit::DType::F16)
                    || !ctx.info().op_dtypes.contains(&gpukit::DType::I64) =>
            {
                assert!(hint.contains("SHADER_"), "{hint}");
                return Ok(());
            }
            (_, k) => k?,
        };
        let x: Vec<f16> = (0..300).map(|i| f16::from_f32(i as f32 / 299.0)).collect();
        let dx = ctx.alloc_upload(&x)?;
        let mut dy = ctx.alloc_zeros::<f32>(x.len())?;
        ctx.launch(&k, LaunchConfig::for_elems(x.len()), (&dx, &mut dy))?;
        // The device functions run on the host too; powf is each device's own (a few ulps).
        for (g, x) in dy.download()?.iter().zip(&x) {
            let w = plus_seven(shaped(x.to_f32()));
            assert!((g - w).abs() <= 1e-5, "{x}: {g} vs {w}");
        }
        Ok(())
    }

    #[cfg(feature = "half")]
    fn kernel_f16_and_bf16_arrays_compute_in_f32(ctx) {
        use gpukit::half::{bf16, f16};
        let k = match (ctx.backend_name(), ctx.kernel(halves())) {
            ("vulkan", Err(gpukit::Error::KernelUnavailable { hint, .. }))
                if !ctx.info().op_dtypes.contains(&gpukit::DType::F16) =>
            {
                assert!(hint.contains("SHADER_F16"), "{hint}");
                return Ok(());
            }
            (_, k) => k?,
        };
        let x: Vec<f16> = (0..500).map(|i| f16::from_f32(i as f32 * 0.37 - 90.0)).collect();
        let y: Vec<bf16> = (0..500).map(|i| bf16::from_f32(i as f32 * -1.3 + 7.0)).collect();
        let (dx, mut dy) = (ctx.alloc_upload(&x)?, ctx.alloc_upload(&y)?);
        ctx.launch(&k, LaunchConfig::for_elems(500), (&dx, &mut dy, 0.75f32))?;
        let want: Vec<bf16> = x
            .iter()
            .zip(&y)
            .map(|(x, y)| bf16::from_f32(y.to_f32() + x.to_f32() * 0.75))
            .collect();
        assert_eq!(dy.download()?, want);
        Ok(())
    }

    fn kernel_thread_coordinates_in_three_dimensions(ctx) {
        let cfg = LaunchConfig::new([2, 3, 2], [4, 2, 2]);
        let (w, h, d) = (8usize, 6usize, 4usize);
        let k = ctx.kernel(coords())?;
        let mut out = ctx.alloc_zeros::<u32>(w * h * d)?;
        ctx.launch(&k, cfg, (&mut out,))?;
        let want: Vec<u32> = (0..w * h * d)
            .map(|i| ((i % w) + 10 * (i / w % h) + 100 * (i / (w * h))) as u32)
            .collect();
        assert_eq!(out.download()?, want);
        Ok(())
    }
    fn kernel_subgroup_collectives_match_the_lanes_computed_on_the_host(ctx) {
        // 3 blocks of 100 threads; the last 10 threads read no `a` (their x is 0).
        let a: Vec<i32> = (0..290i32).map(|i| (i.wrapping_mul(7919) % 2001) - 1000).collect();
        // Multiples of 0.25 (sums exact in any order) with NaNs here and there; the third
        // block's values are all NaN (every subgroup's min and max is NaN there).
        let f: Vec<f32> = (0..300usize)
            .map(|i| if i >= 200 || i % 13 == 5 { f32::NAN } else { (i as f32 % 17.0 - 8.0) * 0.25 })
            .collect();
        // The subgroup built-ins where the adapter has them, then workgroup memory (what an
        // adapter without them runs); the CPU and CUDA backends run the same code twice.
        for emulated in [false, true] {
            let spec = if emulated { subgroups().without_subgroups() } else { subgroups() };
            let k = match ctx.kernel(spec) {
                // A Vulkan adapter without subgroups says so.
                Err(gpukit::Error::KernelUnavailable { hint, .. }) if ctx.backend_name() == "vulkan" && !emulated => {
                    assert!(hint.contains("SUBGROUP"), "{hint}");
                    continue;
                }
                k => k?,
            };
            let (da, df) = (ctx.alloc_upload(&a)?, ctx.alloc_upload(&f)?);
            let mut out = ctx.alloc_zeros::<i32>(f.len() * 11)?;
            let mut fout = ctx.alloc_zeros::<f32>(f.len() * 4)?;
            let mut info = ctx.alloc_zeros::<u32>(f.len() * 4)?;
            let cfg = LaunchConfig::linear(3, 100);
            ctx.launch(&k, cfg, (&da, &df, &mut out, &mut fout, &mut info))?;
            let info = info.download()?;
            let size = info[0] as usize;
            match ctx.backend_name() {
                "vulkan" if !emulated => assert!(size.is_power_of_two() && (4..=128).contains(&size), "{size}"),
                _ => assert_eq!(size, 32, "a warp's, the twin's and the emulation's size"),
            }
            let (want, fwant, iwant) = subgroups_ref(&a, &f, size, 100);
            assert_eq!(info, iwant, "lanes and subgroups by linear index (emulated: {emulated})");
            let got = out.download()?;
            for (i, (g, w)) in got.chunks(11).zip(want.chunks(11)).enumerate() {
                assert_eq!(g, w, "thread {i} (emulated: {emulated}): add, min, max, inclusive, exclusive, shuffle, xor, up, down, any, all");
            }
            let fgot = fout.download()?;
            for (i, (g, w)) in fgot.chunks(4).zip(fwant.chunks(4)).enumerate() {
                let same = g.iter().zip(w).all(|(g, w)| g == w || (g.is_nan() && w.is_nan()));
                assert!(same, "thread {i} (emulated: {emulated}): f32 add, min, max, inclusive add: {g:?} vs {w:?}");
            }
        }
        Ok(())
    }
    fn kernel_compile_time_parameters_specialise_each_instantiation(ctx) {
        let x: Vec<i32> = (0..1000).map(|i| i * 7 - 3000).collect();
        let dx = ctx.alloc_upload(&x)?;
        let mut out = ctx.alloc_zeros::<i32>(x.len())?;
        // Two instantiations of one kernel, each in blocks of its own tile's size.
        let k = ctx.kernel(tile_reverse::<64, 3, false>())?;
        ctx.launch(&k, LaunchConfig::linear(16, 64), (&dx, &mut out))?;
        assert_eq!(out.download()?, tile_reverse_ref(&x, 64, 3, false));
        let k = ctx.kernel(tile_reverse::<128, -2, true>())?;
        ctx.launch(&k, LaunchConfig::linear(8, 128), (&dx, &mut out))?;
        assert_eq!(out.download()?, tile_reverse_ref(&x, 128, -2, true));
        // With a type parameter.
        let v: Vec<f64> = (0..100).map(|i| i as f64 * 0.5).collect();
        let mut dv = ctx.alloc_upload(&v)?;
        // A compile-time constant is no parameter of the type: `ScaleByKernel<f64>`.
        let k: ScaleByKernel<f64> = ctx.kernel(scale_by::<f64, 5>())?;
        ctx.launch(&k, LaunchConfig::for_elems(v.len()), (&mut dv,))?;
        let want: Vec<f64> = v.iter().map(|x| x * 5.0 + 2.0).collect();
        assert_eq!(dv.download()?, want);
        // A shared array's length outside 1..=65536 from a parameter: an error, never a
        // tile of no elements or of gigabytes (the GPU code fails to compile, the twin to run).
        let r = ctx.kernel(tile_reverse::<0, 1, false>()).and_then(|k| {
            ctx.launch(&k, LaunchConfig::linear(1, 1), (&dx, &mut out))?;
            ctx.sync()
        });
        let e = r.expect_err("a tile of 0 elements");
        assert!(format!("{e}").contains("65536"), "{e}");
        ctx.sync()?;
        Ok(())
    }
}
