//! Behaviours of the facade, one test body per behaviour, run on every backend.
//!
//! Each body checks a result against a reference computed on the host in plain Rust (f64
//! for floats), so that a backend that gets something wrong fails here. Arrays reach 1 << 20
//! elements only where a missing cross-stream wait must be visible.

mod common;

use gpu::{Gemm, HostUse, In, KernelSpec, LaunchConfig, Numeric, Out};

use common::close;

/// Large enough that unordered work on two streams would visibly race.
const BIG: usize = 1 << 20;

const VECTOR_ADD_SRC: &str = r#"
extern "C" __global__ void vector_add(const float* a, const float* b, float* out,
                                      unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}"#;

const SAXPY_SRC: &str = r#"
extern "C" __global__ void saxpy(unsigned long long n, float alpha, const float* x, float* y) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * x[i] + y[i];
}"#;

const SCALARS_SRC: &str = r#"
extern "C" __global__ void scalars(int a, unsigned char b, double c, signed char d,
                                   double* out, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = (double)a + (double)b + c + (double)d + (double)i;
}"#;

type VectorAdd = (In<f32>, In<f32>, Out<f32>, u64);
type Saxpy = (u64, f32, In<f32>, Out<f32>);
type Scalars = (i32, u8, f64, i8, Out<f64>, u64);

fn vector_add_spec() -> KernelSpec<VectorAdd> {
    KernelSpec::<VectorAdd>::cuda(VECTOR_ADD_SRC, "vector_add").cpu(|i, (a, b, out, n)| {
        if (i as u64) < *n {
            out[i] = a[i] + b[i];
        }
    })
}

fn saxpy_spec() -> KernelSpec<Saxpy> {
    KernelSpec::<Saxpy>::cuda(SAXPY_SRC, "saxpy").cpu(|i, (n, alpha, x, y)| {
        if (i as u64) < *n {
            y[i] += *alpha * x[i];
        }
    })
}

/// A CPU-only kernel that panics at thread 3.
fn panicking_spec() -> KernelSpec<(Out<f32>,)> {
    KernelSpec::<(Out<f32>,)>::named("boom").cpu(|i, (out,)| {
        if i == 3 {
            panic!("boom at thread 3");
        }
        if i < out.len() {
            out[i] = 1.0;
        }
    })
}

/// Prints the skip line and says whether the body should stop: behaviours only the CPU
/// backend has (a kernel that panics).
fn cpu_only(ctx: &gpu::Context, what: &str) -> bool {
    if ctx.backend_name() == "cpu" {
        return false;
    }
    println!(
        "SKIPPED: {what} is a CPU-backend behaviour ({} backend)",
        ctx.backend_name()
    );
    true
}

/// Asserts element-wise closeness of a device result to an f64 reference.
fn assert_close<T: Numeric>(got: &[T], want: &[f64], rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            close(g.to_f64(), *w, rel),
            "{what}[{i}]: got {g:?}, want {w}"
        );
    }
}

fn bits_eq<T: gpu::Element>(a: &[T], b: &[T]) -> bool {
    // Compare as bytes so NaNs and -0.0 count as themselves.
    let bytes = |x: &[T]| -> Vec<u8> {
        x.iter()
            .flat_map(|v| {
                let p = (v as *const T).cast::<u8>();
                // SAFETY: `v` is a live `T`, an `Element` (plain data without padding), so
                // its `size_of::<T>()` bytes are initialized and readable.
                unsafe { std::slice::from_raw_parts(p, std::mem::size_of::<T>()) }.to_vec()
            })
            .collect()
    };
    bytes(a) == bytes(b)
}

/// Every way of moving `data` to the device and back, and the array's sizes.
fn round_trip<T: gpu::Element>(ctx: &gpu::Context, data: &[T]) -> gpu::Result<()> {
    let n = data.len();
    let bytes = std::mem::size_of_val(data);
    let what = T::DTYPE;

    let a = ctx.alloc_upload(data)?;
    assert_eq!(a.len(), n, "{what}");
    assert_eq!(a.size_bytes(), bytes, "{what}");
    assert_eq!(a.is_empty(), n == 0, "{what}");
    assert!(bits_eq(&a.download()?, data), "{what}: alloc_upload");

    let z = ctx.alloc_zeros::<T>(n)?;
    assert_eq!(z.len(), n);
    assert!(
        bits_eq(&z.download()?, &vec![T::default(); n]),
        "{what}: zeros"
    );

    let mut b = ctx.alloc::<T>(n)?;
    assert_eq!(b.size_bytes(), bytes);
    b.upload(data)?;
    let mut back = vec![T::default(); n];
    b.download_into(&mut back)?;
    assert!(bits_eq(&back, data), "{what}: upload/download_into");

    // Device to device, on the default stream and on another one.
    let mut c = ctx.alloc_zeros::<T>(n)?;
    a.copy_to(&mut c)?;
    assert!(bits_eq(&c.download()?, data), "{what}: copy_to");
    let s = ctx.create_stream()?;
    let mut d = ctx.alloc_zeros::<T>(n)?;
    s.copy(&c, &mut d)?;
    assert!(bits_eq(&d.download()?, data), "{what}: Stream::copy");
    Ok(())
}

fn gemm_reference(g: &Gemm<f64>, a: &[f64], b: &[f64], c: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; g.m * g.n];
    for i in 0..g.m {
        for j in 0..g.n {
            let mut acc = 0.0;
            for l in 0..g.k {
                let av = if g.trans_a {
                    a[l * g.m + i]
                } else {
                    a[i * g.k + l]
                };
                let bv = if g.trans_b {
                    b[j * g.k + l]
                } else {
                    b[l * g.n + j]
                };
                acc += av * bv;
            }
            out[i * g.n + j] = g.alpha * acc + g.beta * c[i * g.n + j];
        }
    }
    out
}

/// Values of `T` (rounded from `f`) and their exact f64 values.
fn floats<T: gpu::Float>(n: usize, f: impl Fn(usize) -> f64) -> (Vec<T>, Vec<f64>) {
    let t: Vec<T> = (0..n).map(|i| T::from_f64(f(i))).collect();
    let r = t.iter().map(|v| v.to_f64()).collect();
    (t, r)
}

/// All four transposes, with alpha and beta, against the naive f64 product.
fn gemm_all<T: gpu::Float>(ctx: &gpu::Context, rel: f64) -> gpu::Result<()> {
    let (m, n, k) = (5, 7, 3);
    let (a, ar) = floats::<T>(m * k, |i| (i as f64 * 0.7).sin() * 2.0);
    let (b, br) = floats::<T>(k * n, |i| (i as f64 * 0.3).cos() - 0.25);
    let (c0, cr) = floats::<T>(m * n, |i| i as f64 * 0.5 - 4.0);
    let da = ctx.alloc_upload(&a)?;
    let db = ctx.alloc_upload(&b)?;
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        for (alpha, beta) in [(1.0, 0.0), (1.5, 0.25), (-0.5, 1.0)] {
            let g = Gemm::<T>::new(m, n, k)
                .transpose(ta, tb)
                .scaled(T::from_f64(alpha), T::from_f64(beta));
            let gr = Gemm::<f64>::new(m, n, k)
                .transpose(ta, tb)
                .scaled(alpha, beta);
            let mut dc = ctx.alloc_upload(&c0)?;
            ctx.gemm(g, &da, &db, &mut dc)?;
            let want = gemm_reference(&gr, &ar, &br, &cr);
            let what = format!(
                "gemm {} ta={ta} tb={tb} alpha={alpha} beta={beta}",
                T::DTYPE
            );
            assert_close(&dc.download()?, &want, rel, &what);
        }
    }
    // beta = 0 ignores whatever C held, NaNs included (as BLAS does).
    let mut dc = ctx.alloc_upload(&vec![T::from_f64(f64::NAN); m * n])?;
    ctx.gemm(Gemm::<T>::new(m, n, k), &da, &db, &mut dc)?;
    let want = gemm_reference(&Gemm::<f64>::new(m, n, k), &ar, &br, &vec![0.0; m * n]);
    assert_close(&dc.download()?, &want, rel, "gemm beta=0 over NaN");
    // k = 0: an empty product leaves beta * C.
    let empty = ctx.alloc_zeros::<T>(0)?;
    let mut dc = ctx.alloc_upload(&c0)?;
    let g = Gemm::<T>::new(m, n, 0).scaled(T::from_f64(2.0), T::from_f64(0.5));
    ctx.gemm(g, &empty, &empty, &mut dc)?;
    let want: Vec<f64> = cr.iter().map(|c| 0.5 * c).collect();
    assert_close(&dc.download()?, &want, rel, "gemm k=0");
    Ok(())
}

/// Every float op against an f64 reference computed from the same rounded inputs.
fn float_ops<T: gpu::Float>(ctx: &gpu::Context, rel: f64) -> gpu::Result<()> {
    let n = 1000;
    let (x, xr) = floats::<T>(n, |i| (i as f64 * 0.37).sin() * 4.0);
    let (y, yr) = floats::<T>(n, |i| 1.0 + (i as f64 * 0.11).cos().abs() * 3.0);
    let dx = ctx.alloc_upload(&x)?;
    let dy = ctx.alloc_upload(&y)?;
    let mut out = ctx.alloc_zeros::<T>(n)?;
    let name = T::DTYPE;

    type Bin = fn(f64, f64) -> f64;
    let binaries: [(&str, Bin); 4] = [
        ("add", |a, b| a + b),
        ("sub", |a, b| a - b),
        ("mul", |a, b| a * b),
        ("div", |a, b| a / b),
    ];
    for (op, f) in binaries {
        match op {
            "add" => ctx.add(&dx, &dy, &mut out)?,
            "sub" => ctx.sub(&dx, &dy, &mut out)?,
            "mul" => ctx.mul(&dx, &dy, &mut out)?,
            _ => ctx.div(&dx, &dy, &mut out)?,
        }
        let want: Vec<f64> = xr.iter().zip(&yr).map(|(&a, &b)| f(a, b)).collect();
        assert_close(&out.download()?, &want, rel, &format!("{op} {name}"));
    }

    type Un = fn(f64) -> f64;
    let unaries: [(&str, Un); 4] = [
        ("relu", |v| v.max(0.0)),
        ("sigmoid", |v| 1.0 / (1.0 + (-v).exp())),
        ("tanh", f64::tanh),
        ("exp", f64::exp),
    ];
    for (op, f) in unaries {
        match op {
            "relu" => ctx.relu(&dx, &mut out)?,
            "sigmoid" => ctx.sigmoid(&dx, &mut out)?,
            "tanh" => ctx.tanh(&dx, &mut out)?,
            _ => ctx.exp(&dx, &mut out)?,
        }
        let want: Vec<f64> = xr.iter().map(|&v| f(v)).collect();
        assert_close(&out.download()?, &want, rel, &format!("{op} {name}"));
    }

    // fill, copy, axpy, scale.
    ctx.fill(&mut out, T::from_f64(2.5))?;
    assert_close(&out.download()?, &vec![2.5; n], 0.0, "fill");
    ctx.copy(&dx, &mut out)?;
    assert_close(&out.download()?, &xr, 0.0, "copy");
    let mut dy2 = ctx.alloc_upload(&y)?;
    ctx.axpy(T::from_f64(-1.5), &dx, &mut dy2)?;
    let want: Vec<f64> = xr.iter().zip(&yr).map(|(a, b)| -1.5 * a + b).collect();
    assert_close(&dy2.download()?, &want, rel, "axpy");
    ctx.scale(T::from_f64(0.25), &mut dy2)?;
    let want: Vec<f64> = want.iter().map(|v| 0.25 * v).collect();
    assert_close(&dy2.download()?, &want, rel, "scale");

    // Reductions, returning and into a one-element array.
    let sum: f64 = xr.iter().sum();
    let max = xr.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let dot: f64 = xr.iter().zip(&yr).map(|(a, b)| a * b).sum();
    assert!(close(ctx.sum(&dx)?.to_f64(), sum, rel), "sum {name}");
    assert_eq!(ctx.max(&dx)?.to_f64(), max, "max {name}");
    assert!(close(ctx.dot(&dx, &dy)?.to_f64(), dot, rel), "dot {name}");
    let mut one = ctx.alloc_zeros::<T>(1)?;
    ctx.sum_into(&dx, &mut one)?;
    assert_close(&one.download()?, &[sum], rel, "sum_into");
    ctx.max_into(&dx, &mut one)?;
    assert_close(&one.download()?, &[max], 0.0, "max_into");
    ctx.dot_into(&dx, &dy, &mut one)?;
    assert_close(&one.download()?, &[dot], rel, "dot_into");
    Ok(())
}

/// Integer element-wise ops, reductions, axpy and scale against wrapping references.
macro_rules! int_ops {
    ($ctx:expr, $t:ty) => {{
        let ctx: &gpu::Context = $ctx;
        let x: Vec<$t> = (0..300u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 7) as $t)
            .chain([<$t>::MIN, <$t>::MAX, 0, 1])
            .collect();
        let y: Vec<$t> = (0..300u32)
            .map(|i| (i.wrapping_mul(40503).wrapping_add(17) >> 3) as $t)
            .chain([<$t>::MAX, 1, 5, 0])
            .collect();
        let n = x.len();
        let dx = ctx.alloc_upload(&x)?;
        let dy = ctx.alloc_upload(&y)?;
        let mut out = ctx.alloc_zeros::<$t>(n)?;
        let name = stringify!($t);
        ctx.add(&dx, &dy, &mut out)?;
        let want: Vec<$t> = x.iter().zip(&y).map(|(a, b)| a.wrapping_add(*b)).collect();
        assert_eq!(out.download()?, want, "add {name}");
        ctx.sub(&dx, &dy, &mut out)?;
        let want: Vec<$t> = x.iter().zip(&y).map(|(a, b)| a.wrapping_sub(*b)).collect();
        assert_eq!(out.download()?, want, "sub {name}");
        ctx.mul(&dx, &dy, &mut out)?;
        let want: Vec<$t> = x.iter().zip(&y).map(|(a, b)| a.wrapping_mul(*b)).collect();
        assert_eq!(out.download()?, want, "mul {name}");
        ctx.div(&dx, &dy, &mut out)?;
        let want: Vec<$t> = x
            .iter()
            .zip(&y)
            .map(|(a, b)| if *b == 0 { 0 } else { a.wrapping_div(*b) })
            .collect();
        assert_eq!(out.download()?, want, "div {name}");

        let sum = x.iter().fold(0 as $t, |acc, v| acc.wrapping_add(*v));
        let dot = x
            .iter()
            .zip(&y)
            .fold(0 as $t, |acc, (a, b)| acc.wrapping_add(a.wrapping_mul(*b)));
        let max = x.iter().copied().max().unwrap_or_default();
        assert_eq!(ctx.sum(&dx)?, sum, "sum {name}");
        assert_eq!(ctx.dot(&dx, &dy)?, dot, "dot {name}");
        assert_eq!(ctx.max(&dx)?, max, "max {name}");

        let alpha: $t = 3;
        let mut dy2 = ctx.alloc_upload(&y)?;
        ctx.axpy(alpha, &dx, &mut dy2)?;
        let want: Vec<$t> = x
            .iter()
            .zip(&y)
            .map(|(a, b)| alpha.wrapping_mul(*a).wrapping_add(*b))
            .collect();
        assert_eq!(dy2.download()?, want, "axpy {name}");
        ctx.scale(alpha, &mut dy2)?;
        let want: Vec<$t> = want.iter().map(|v| alpha.wrapping_mul(*v)).collect();
        assert_eq!(dy2.download()?, want, "scale {name}");
        ctx.fill(&mut dy2, <$t>::MAX)?;
        assert_eq!(dy2.download()?, vec![<$t>::MAX; n], "fill {name}");
    }};
}

backend_tests! {
    fn round_trips_every_element_type(ctx) {
        round_trip(ctx, &[0.0f32, -0.0, 1.5, -2.25, f32::MAX, f32::MIN_POSITIVE, f32::INFINITY, f32::NAN])?;
        round_trip(ctx, &[0.0f64, -1e300, 1e-300, std::f64::consts::PI, f64::NEG_INFINITY, f64::NAN])?;
        round_trip(ctx, &(-50..50).map(|i| i * 40_000_000).collect::<Vec<i32>>())?;
        round_trip(ctx, &[0u32, 1, u32::MAX, 0xdead_beef, 7])?;
        round_trip(ctx, &[i64::MIN, -1, 0, 1, i64::MAX, 0x1234_5678_9abc])?;
        round_trip(ctx, &[0u64, u64::MAX, 1 << 63, 42])?;
        round_trip(ctx, &(0..=255).collect::<Vec<u8>>())?;
        round_trip(ctx, &(-128..=127).collect::<Vec<i8>>())?;
        // Odd lengths and a length that is not a multiple of anything a backend might vector.
        round_trip(ctx, &(0..1001).map(|i| i as f32 * 0.25).collect::<Vec<_>>())?;
        Ok(())
    }

    fn zero_length_arrays(ctx) {
        round_trip::<f32>(ctx, &[])?;
        round_trip::<u8>(ctx, &[])?;
        let a = ctx.alloc::<f64>(0)?;
        assert!(a.is_empty());
        assert_eq!(a.size_bytes(), 0);
        let b = ctx.alloc_upload::<f64>(&[])?;
        let mut out = ctx.alloc_zeros::<f64>(0)?;
        ctx.add(&a, &b, &mut out)?;
        ctx.exp(&a, &mut out)?;
        ctx.fill(&mut out, 1.0)?;
        ctx.scale(2.0, &mut out)?;
        ctx.axpy(2.0, &a, &mut out)?;
        assert_eq!(out.download()?, Vec::<f64>::new());
        // Empty reductions: sum and dot are zero (max is an error, see bad_input.rs).
        assert_eq!(ctx.sum(&a)?, 0.0);
        assert_eq!(ctx.dot(&a, &b)?, 0.0);
        let mut one = ctx.alloc_upload(&[5i32])?;
        let e = ctx.alloc_zeros::<i32>(0)?;
        ctx.sum_into(&e, &mut one)?;
        assert_eq!(one.download()?, [0]);
        ctx.fill(&mut one, 5)?;
        ctx.dot_into(&e, &e, &mut one)?;
        assert_eq!(one.download()?, [0]);
        // Empty views and async copies of nothing.
        let v = ctx.alloc_upload(&[1u8, 2, 3])?;
        assert_eq!(v.slice(3..)?.download()?, Vec::<u8>::new());
        let s = ctx.create_stream()?;
        let mut e = ctx.alloc::<u8>(0)?;
        let p = s.upload(Vec::<u8>::new(), &mut e)?;
        assert!(p.wait()?.is_empty());
        let host = ctx.alloc_host::<u8>(0, HostUse::Download)?;
        let host = s.download(&e, host)?.wait()?;
        assert!(host.is_empty());
        Ok(())
    }

    fn copy_to_and_stream_copy_between_arrays_and_views(ctx) {
        let data: Vec<i64> = (0..64).map(|i| i * i - 100).collect();
        let a = ctx.alloc_upload(&data)?;
        // copy_to into a view of a larger array changes only that range.
        let mut big = ctx.alloc_upload(&vec![-1i64; 100])?;
        a.copy_to(&mut big.slice_mut(10..74)?)?;
        let mut want = vec![-1i64; 100];
        want[10..74].copy_from_slice(&data);
        assert_eq!(big.download()?, want);

        // Between two halves of one array, on the default stream and on another stream.
        let mut c = ctx.alloc_upload(&data)?;
        {
            let (left, mut right) = c.split_at_mut(32)?;
            assert_eq!((left.len(), right.len()), (32, 32));
            assert_eq!(right.offset(), 32);
            ctx.copy(&left, &mut right)?;
        }
        let mut want = data.clone();
        want.copy_within(0..32, 32);
        assert_eq!(c.download()?, want);

        let s = ctx.create_stream()?;
        {
            let (mut left, right) = c.split_at_mut(32)?;
            let mut head = left.slice_mut(0..8)?;
            s.copy(&right.as_view().slice(24..32)?, &mut head)?;
        }
        want.copy_within(56..64, 0);
        assert_eq!(c.download()?, want);

        // A view as the source of copy to another array.
        let mut d = ctx.alloc_zeros::<i64>(10)?;
        ctx.copy(&a.slice(5..15)?, &mut d)?;
        assert_eq!(d.download()?, &data[5..15]);
        Ok(())
    }

    fn views_read_and_write_only_their_range(ctx) {
        let data: Vec<i32> = (0..20).collect();
        let mut a = ctx.alloc_upload(&data)?;
        {
            let v = a.slice(5..15)?;
            assert_eq!((v.len(), v.offset()), (10, 5));
            assert_eq!(v.download()?, &data[5..15]);
            let w = v.slice(2..=4)?;
            assert_eq!((w.len(), w.offset()), (3, 7));
            assert_eq!(w.download()?, &data[7..10]);
            let x = w.slice(1..)?;
            assert_eq!(x.download()?, &data[8..10]);
            assert_eq!(a.slice(..)?.download()?, data);
            assert_eq!(a.slice(..4)?.download()?, &data[..4]);
            assert_eq!(a.slice(17..)?.download()?, &data[17..]);
            assert!(a.slice(20..)?.is_empty());
            // Ops read views too.
            assert_eq!(ctx.sum(&v)?, (5..15).sum::<i32>());
            assert_eq!(ctx.max(&w)?, 9);
        }
        let mut want = data.clone();
        {
            let mut m = a.slice_mut(3..9)?;
            ctx.fill(&mut m, -1)?;
            for v in &mut want[3..9] {
                *v = -1;
            }
            let mut inner = m.slice_mut(1..3)?; // elements 4..6
            assert_eq!(inner.offset(), 4);
            ctx.fill(&mut inner, 7)?;
            want[4..6].fill(7);
            inner.upload(&[8, 9])?;
            want[4..6].copy_from_slice(&[8, 9]);
            assert_eq!(inner.download()?, [8, 9]);
            assert_eq!(m.download()?, &want[3..9]);
        }
        assert_eq!(a.download()?, want);
        {
            let mut m = a.slice_mut(12..16)?;
            ctx.scale(10, &mut m)?;
            for v in &mut want[12..16] {
                *v *= 10;
            }
        }
        assert_eq!(a.download()?, want);
        // An op whose inputs and output are views of different arrays.
        let b = ctx.alloc_upload(&data)?;
        let mut c = ctx.alloc_zeros::<i32>(20)?;
        ctx.add(&a.slice(0..5)?, &b.slice(15..20)?, &mut c.slice_mut(10..15)?)?;
        let mut wc = vec![0; 20];
        for i in 0..5 {
            wc[10 + i] = want[i] + data[15 + i];
        }
        assert_eq!(c.download()?, wc);
        Ok(())
    }

    fn float_ops_match_f64_reference(ctx) {
        float_ops::<f32>(ctx, 1e-5)?;
        float_ops::<f64>(ctx, 1e-12)?;
        Ok(())
    }

    fn gemm_all_transposes_and_scalings(ctx) {
        gemm_all::<f32>(ctx, 1e-5)?;
        gemm_all::<f64>(ctx, 1e-12)?;
        // m = 0: nothing to do, and the call succeeds.
        let e = ctx.alloc_zeros::<f32>(0)?;
        let b = ctx.alloc_zeros::<f32>(6)?;
        let mut c = ctx.alloc_zeros::<f32>(0)?;
        ctx.gemm(Gemm::<f32>::new(0, 2, 3), &e, &b, &mut c)?;
        Ok(())
    }

    fn integer_ops_wrap_and_divide_safely(ctx) {
        int_ops!(ctx, i32);
        int_ops!(ctx, u32);
        int_ops!(ctx, i64);
        int_ops!(ctx, u64);
        int_ops!(ctx, u8);
        int_ops!(ctx, i8);
        Ok(())
    }

    fn integer_edge_cases(ctx) {
        let a = ctx.alloc_upload(&[i32::MAX, i32::MIN, i32::MIN, 7, -7, 0])?;
        let b = ctx.alloc_upload(&[1, -1, -1, 0, 2, 0])?;
        let mut out = ctx.alloc_zeros::<i32>(6)?;
        ctx.add(&a, &b, &mut out)?;
        assert_eq!(out.download()?, [i32::MIN, i32::MAX, i32::MAX, 7, -5, 0]);
        ctx.div(&a, &b, &mut out)?;
        // MIN / -1 wraps to MIN; x / 0 is 0; division truncates toward zero.
        assert_eq!(out.download()?, [i32::MAX, i32::MIN, i32::MIN, 0, -3, 0]);
        ctx.div(&a, &a, &mut out)?;
        assert_eq!(out.download()?, [1, 1, 1, 1, 1, 0], "x / x, and 0 / 0 = 0");
        let u = ctx.alloc_upload(&[255u8, 0, 200])?;
        let v = ctx.alloc_upload(&[1u8, 1, 100])?;
        let mut w = ctx.alloc_zeros::<u8>(3)?;
        ctx.add(&u, &v, &mut w)?;
        assert_eq!(w.download()?, [0, 1, 44]);
        ctx.sub(&v, &u, &mut w)?;
        assert_eq!(w.download()?, [2, 1, 156]);
        assert_eq!(ctx.sum(&u)?, 199); // 455 mod 256
        Ok(())
    }

    fn float_max_ignores_nan(ctx) {
        let a = ctx.alloc_upload(&[f32::NAN, 1.0, 3.0, f32::NAN, -2.0])?;
        assert_eq!(ctx.max(&a)?, 3.0);
        let b = ctx.alloc_upload(&[-5.0f64, f64::NAN])?;
        assert_eq!(ctx.max(&b)?, -5.0);
        let c = ctx.alloc_upload(&[f64::NEG_INFINITY, -1e308])?;
        assert_eq!(ctx.max(&c)?, -1e308);
        let d = ctx.alloc_upload(&[f32::NAN, f32::NAN])?;
        assert!(ctx.max(&d)?.is_nan());
        Ok(())
    }

    fn streams_with_priorities_sync_and_query(ctx) {
        let (least, greatest) = ctx.info().priority_range;
        assert!(greatest <= least, "greatest is numerically lower: {greatest} vs {least}");
        assert_eq!(ctx.create_stream()?.priority(), least);
        let mut x = ctx.alloc_zeros::<f32>(BIG)?;
        for p in greatest..=least {
            let s = ctx.create_stream_with_priority(p)?;
            assert_eq!(s.priority(), p);
            assert_eq!(s.context_id(), ctx.id());
            s.fill(&mut x, p as f32)?;
            s.scale(2.0, &mut x)?;
            s.sync()?;
            assert!(s.query()?, "query after sync");
            assert_eq!(x.slice(BIG - 2..)?.download()?, [2.0 * p as f32; 2]);
        }
        let a = ctx.create_stream()?;
        let b = ctx.create_stream()?;
        assert_ne!(a.id(), b.id());
        ctx.sync()?;
        assert!(ctx.query()?);
        Ok(())
    }

    fn events_sync_query_and_time_real_work(ctx) {
        let s = ctx.create_stream()?;
        let mut x = ctx.alloc_zeros::<f32>(BIG)?;
        let start = s.record_event()?;
        s.fill(&mut x, 1.0)?;
        for _ in 0..4 {
            s.scale(1.5, &mut x)?;
        }
        let end = s.record_event()?;
        assert_eq!(end.stream().id(), s.id());
        end.sync()?;
        assert!(end.query()?);
        assert!(start.query()?, "an earlier event is passed once a later one is");
        let ms = start.elapsed_ms(&end)?;
        assert!(ms >= 0.0, "elapsed {ms} ms");
        let back = end.elapsed_ms(&start)?;
        assert!(back <= 0.0 && (back + ms).abs() <= 0.01 + 1e-3 * ms, "{back} vs {ms}");
        // The work before `end` is done: the data is final without another sync.
        assert_eq!(x.slice(..3)?.download()?, [5.0625; 3]);
        s.sync()?;
        assert!(s.query()?);
        Ok(())
    }

    fn stream_wait_orders_work_across_streams(ctx) {
        let s1 = ctx.create_stream()?;
        let s2 = ctx.create_stream()?;
        let mut x = ctx.alloc_zeros::<f32>(BIG)?;
        let mut y = ctx.alloc_zeros::<f32>(BIG)?;
        s1.fill(&mut x, 3.0)?;
        for _ in 0..4 {
            s1.scale(2.0, &mut x)?;
        }
        let ev = s1.record_event()?;
        s2.wait(&ev)?;
        let after = s2.record_event()?;
        s2.copy(&x, &mut y)?;
        // s2 passed `after` only once `ev` was done.
        after.sync()?;
        assert!(ev.query()?, "s2 ran past its wait before s1 reached the event");
        s2.sync()?;
        assert!(y.download()?.iter().all(|&v| v == 48.0));
        Ok(())
    }

    fn cross_stream_read_after_write_is_ordered_automatically(ctx) {
        let s1 = ctx.create_stream()?;
        let s2 = ctx.create_stream()?;
        let mut x = ctx.alloc_zeros::<f32>(BIG)?;
        let mut y = ctx.alloc_zeros::<f32>(BIG)?;
        s1.fill(&mut x, 1.0)?;
        for _ in 0..6 {
            s1.scale(2.0, &mut x)?;
        }
        s2.copy(&x, &mut y)?; // no explicit wait
        s2.sync()?;
        let got = y.download()?;
        let bad = got.iter().filter(|&&v| v != 64.0).count();
        assert_eq!(bad, 0, "s2 read x before s1 finished writing it: {:?}", &got[..4]);
        // A kernel launch is ordered like an op.
        let k = ctx.kernel(vector_add_spec())?;
        let mut z = ctx.alloc_zeros::<f32>(BIG)?;
        s1.fill(&mut x, 1.0)?;
        for _ in 0..4 {
            s1.scale(3.0, &mut x)?;
        }
        s2.launch(&k, LaunchConfig::for_elems(BIG), (&x, &y, &mut z, BIG as u64))?;
        assert!(z.download()?.iter().all(|&v| v == 81.0 + 64.0));
        Ok(())
    }

    fn cross_stream_write_after_read_and_write_are_ordered(ctx) {
        let s1 = ctx.create_stream()?;
        let s2 = ctx.create_stream()?;
        let mut x = ctx.alloc_upload(&vec![5.0f32; BIG])?;
        let mut y = ctx.alloc_zeros::<f32>(BIG)?;
        let mut delay = ctx.alloc_zeros::<f32>(BIG)?;
        // Keep s1 busy, then have it read x; s2 overwrites x right away.
        for _ in 0..6 {
            s1.scale(1.5, &mut delay)?;
        }
        s1.copy(&x, &mut y)?;
        s2.fill(&mut x, 9.0)?;
        assert!(y.download()?.iter().all(|&v| v == 5.0), "s2 overwrote x before s1 read it");
        assert!(x.download()?.iter().all(|&v| v == 9.0));
        // Write after write: the later write wins.
        s1.fill(&mut x, 1.0)?;
        for _ in 0..6 {
            s1.scale(2.0, &mut x)?;
        }
        s2.fill(&mut x, 3.0)?;
        assert!(x.download()?.iter().all(|&v| v == 3.0), "s1's writes landed after s2's");
        // Disjoint views of one array written from two streams.
        {
            let (mut l, mut r) = x.split_at_mut(BIG / 2)?;
            s1.fill(&mut l, 7.0)?;
            s2.fill(&mut r, 8.0)?;
        }
        let got = x.download()?;
        assert!(got[..BIG / 2].iter().all(|&v| v == 7.0));
        assert!(got[BIG / 2..].iter().all(|&v| v == 8.0));
        Ok(())
    }

    fn views_written_from_two_threads_are_both_ordered(ctx) {
        // Thread 1 makes a blocking upload into the left half on s1 (queued behind a delay,
        // so it stays inside the call); meanwhile thread 2 fills the right half on s2
        // (queued behind a longer delay). A third stream then reads the whole array: it must
        // wait for both writers, whichever thread recorded its use last.
        let n = 1 << 18;
        let (s1, s2, s3) = (ctx.create_stream()?, ctx.create_stream()?, ctx.create_stream()?);
        let mut d1 = ctx.alloc_zeros::<f32>(BIG)?;
        let mut d2 = ctx.alloc_zeros::<f32>(BIG)?;
        let mut x = ctx.alloc_zeros::<f32>(2 * n)?;
        let mut y = ctx.alloc_zeros::<f32>(2 * n)?;
        for _ in 0..8 {
            s1.scale(1.0, &mut d1)?;
        }
        for _ in 0..40 {
            s2.scale(1.0, &mut d2)?;
        }
        let data = vec![1.0f32; n];
        {
            let (mut left, mut right) = x.split_at_mut(n)?;
            // A panic in either thread propagates out of `scope`.
            let (r1, r2) = std::thread::scope(|sc| {
                let t1 = sc.spawn(|| s1.upload_blocking(&data, &mut left));
                let t2 = sc.spawn(|| {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    s2.fill(&mut right, 2.0)
                });
                let wait = |t: std::thread::ScopedJoinHandle<'_, gpu::Result<()>>| {
                    t.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
                };
                (wait(t1), wait(t2))
            });
            r1?;
            r2?;
        }
        s3.copy(&x, &mut y)?;
        s3.sync()?;
        let got = y.download()?;
        assert!(got[..n].iter().all(|&v| v == 1.0), "left half");
        let stale = got[n..].iter().filter(|&&v| v != 2.0).count();
        assert_eq!(stale, 0, "s3 read the right half before s2 wrote it");
        Ok(())
    }

    fn async_copies_with_pinned_buffers(ctx) {
        let n = 10_000;
        let data: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
        let s = ctx.create_stream()?;
        for usage in [HostUse::Upload, HostUse::Download, HostUse::Both] {
            let mut host = ctx.alloc_host::<f32>(n, usage)?;
            assert_eq!((host.len(), host.usage()), (n, usage));
            assert!(!host.is_registered());
            assert_eq!(host.context_id(), ctx.id());
            host.copy_from_slice(&data);
            let mut dev = ctx.alloc_zeros::<f32>(n)?;
            let pending = s.upload(host, &mut dev)?;
            let host = pending.wait()?;
            assert_eq!(&host[..], &data[..], "{usage:?}: the buffer comes back intact");
            assert_eq!(dev.download()?, data, "{usage:?}: upload");
            s.scale(2.0, &mut dev)?;
            let back = ctx.alloc_host::<f32>(n, usage)?;
            let back = s.download(&dev, back)?.wait()?;
            let want: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
            assert_eq!(&back[..], &want[..], "{usage:?}: download");
            assert_eq!(back.into_vec()?, want);
        }
        Ok(())
    }

    fn async_copies_with_vecs_and_registered_memory(ctx) {
        let n = 5000;
        let data: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2654435761)).collect();
        let s = ctx.create_stream()?;
        let mut dev = ctx.alloc_zeros::<u32>(n)?;
        // A plain Vec moves in and comes back.
        let v = s.upload(data.clone(), &mut dev)?.wait()?;
        assert_eq!(v, data);
        let back = s.download(&dev, vec![0u32; n])?.wait()?;
        assert_eq!(back, data);
        // A registered Vec: copies both ways, then the Vec itself comes back.
        let reg = ctx.register_host(data.iter().map(|v| v ^ 1).collect::<Vec<_>>())?;
        assert!(reg.is_registered());
        assert_eq!(reg.len(), n);
        let reg = s.upload(reg, &mut dev)?.wait()?;
        assert_eq!(dev.download()?, data.iter().map(|v| v ^ 1).collect::<Vec<_>>());
        s.fill(&mut dev, 77)?;
        let reg = s.download(&dev, reg)?.wait()?;
        assert_eq!(reg.into_vec()?, vec![77; n]);
        let empty = ctx.register_host(Vec::<u32>::new())?;
        assert!(empty.into_vec()?.is_empty());
        Ok(())
    }

    fn pending_becomes_ready_and_dropping_it_completes_the_copy(ctx) {
        let s = ctx.create_stream()?;
        let data: Vec<f32> = (0..BIG).map(|i| (i % 1000) as f32).collect();
        let mut dev = ctx.alloc_zeros::<f32>(BIG)?;
        let mut delay = ctx.alloc_zeros::<f32>(BIG)?;
        let p = s.upload(data.clone(), &mut dev)?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !p.is_ready()? {
            assert!(std::time::Instant::now() < deadline, "the upload never finished");
            std::thread::yield_now();
        }
        assert_eq!(p.wait()?, data);

        // Dropped upload: the drop waits for the copy, so the stream is idle afterwards and
        // the device holds the data.
        for _ in 0..4 {
            s.scale(1.5, &mut delay)?;
        }
        let doubled: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
        let p = s.upload(doubled.clone(), &mut dev)?;
        drop(p);
        assert!(s.query()?, "dropping a Pending returned before its copy was done");
        assert_eq!(dev.download()?, doubled);

        // Dropped download: likewise.
        for _ in 0..4 {
            s.scale(1.5, &mut delay)?;
        }
        let p = s.download(&dev, vec![0.0f32; BIG])?;
        drop(p);
        assert!(s.query()?, "dropping a download Pending returned before its copy was done");
        ctx.check()?;
        Ok(())
    }

    fn pinned_pool_reuses_freed_buffers(ctx) {
        let before = ctx.host_pool_stats();
        let h = ctx.alloc_host::<f32>(1000, HostUse::Upload)?;
        let one = ctx.host_pool_stats();
        assert_eq!(one.fresh, before.fresh + 1);
        assert_eq!(one.reused, before.reused);
        drop(h);
        let kept = ctx.host_pool_stats();
        assert!(kept.retained_bytes >= before.retained_bytes + 4000, "{kept:?}");
        let h = ctx.alloc_host::<f32>(1000, HostUse::Upload)?;
        let again = ctx.host_pool_stats();
        assert_eq!(again.fresh, one.fresh, "same size again must not allocate");
        assert_eq!(again.reused, one.reused + 1);
        assert_eq!(again.retained_bytes, before.retained_bytes);
        drop(h);

        // A steady-state upload loop pins exactly once.
        let s = ctx.create_stream()?;
        let n = 1 << 16;
        let mut dev = ctx.alloc_zeros::<f32>(n)?;
        let start = ctx.host_pool_stats();
        for i in 0..10 {
            let mut host = ctx.alloc_host::<f32>(n, HostUse::Upload)?;
            host.fill(i as f32);
            let host = s.upload(host, &mut dev)?.wait()?;
            drop(host);
            s.scale(2.0, &mut dev)?;
            assert_eq!(dev.slice(n - 1..)?.download()?, [2.0 * i as f32]);
        }
        let end = ctx.host_pool_stats();
        assert_eq!(end.fresh - start.fresh, 1, "{start:?} -> {end:?}");
        assert_eq!(end.reused - start.reused, 9, "{start:?} -> {end:?}");
        Ok(())
    }

    fn dropping_an_array_with_queued_work_is_safe(ctx) {
        let s = ctx.create_stream()?;
        let mut a = ctx.alloc_zeros::<f32>(BIG)?;
        let mut b = ctx.alloc_zeros::<f32>(BIG)?;
        s.fill(&mut a, 1.0)?;
        for _ in 0..8 {
            s.scale(2.0, &mut a)?;
        }
        s.copy(&a, &mut b)?;
        for _ in 0..2 {
            s.scale(0.5, &mut a)?;
        }
        drop(a); // work on `a` is still queued on s
        s.sync()?;
        ctx.check()?;
        assert!(b.download()?.iter().all(|&v| v == 256.0));
        // Also when the queued work is on the default stream and the reader is elsewhere.
        let mut c = ctx.alloc_upload(&vec![3.0f32; BIG])?;
        s.scale(3.0, &mut c)?;
        let mut d = ctx.alloc_zeros::<f32>(BIG)?;
        ctx.copy(&c, &mut d)?;
        drop(c);
        assert!(d.download()?.iter().all(|&v| v == 9.0));
        Ok(())
    }

    fn custom_kernel_vector_add(ctx) {
        let k = ctx.kernel(vector_add_spec())?;
        assert_eq!(k.name(), "vector_add");
        let n = 1000; // not a multiple of the block size
        let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..n).map(|i| (i * i) as f32 * 0.5).collect();
        let da = ctx.alloc_upload(&a)?;
        let db = ctx.alloc_upload(&b)?;
        let mut out = ctx.alloc_zeros::<f32>(n)?;
        let s = ctx.create_stream()?;
        s.launch(&k, LaunchConfig::for_elems(n), (&da, &db, &mut out, n as u64))?;
        let want: Vec<f64> = a.iter().zip(&b).map(|(x, y)| *x as f64 + *y as f64).collect();
        assert_close(&out.download()?, &want, 1e-6, "vector_add");
        // The same kernel again, on the default stream, reading its own output.
        let mut out2 = ctx.alloc_zeros::<f32>(n)?;
        ctx.launch(&k, LaunchConfig::linear(4, 256), (&out, &db, &mut out2, n as u64))?;
        let want2: Vec<f64> = want.iter().zip(&b).map(|(x, y)| x + *y as f64).collect();
        assert_close(&out2.download()?, &want2, 1e-6, "vector_add twice");
        Ok(())
    }

    fn custom_kernel_with_scalars_and_views(ctx) {
        let k = ctx.kernel(saxpy_spec())?;
        let n = 300;
        let x: Vec<f32> = (0..n).map(|i| i as f32 - 100.0).collect();
        let y: Vec<f32> = (0..n).map(|i| 0.25 * i as f32).collect();
        let dx = ctx.alloc_upload(&x)?;
        let mut dy = ctx.alloc_upload(&y)?;
        ctx.launch(&k, LaunchConfig::for_elems(n), (n as u64, 2.5f32, &dx, &mut dy))?;
        let want: Vec<f64> = x.iter().zip(&y).map(|(a, b)| 2.5 * *a as f64 + *b as f64).collect();
        assert_close(&dy.download()?, &want, 1e-6, "saxpy");

        // On views: x[10..110] into y[150..250]; the rest of y is untouched.
        let before = dy.download()?;
        {
            let xv = dx.slice(10..110)?;
            let mut yv = dy.slice_mut(150..250)?;
            ctx.launch(&k, LaunchConfig::for_elems(100), (100u64, -1.0f32, xv, &mut yv))?;
        }
        let got = dy.download()?;
        for i in 0..n {
            let want = if (150..250).contains(&i) {
                before[i] as f64 - x[i - 140] as f64
            } else {
                before[i] as f64
            };
            assert!(close(got[i] as f64, want, 1e-6), "view saxpy [{i}]: {} vs {want}", got[i]);
        }

        // Scalars of several types reach the kernel intact.
        let spec = KernelSpec::<Scalars>::cuda(SCALARS_SRC, "scalars").cpu(
            |i, (a, b, c, d, out, n)| {
                if (i as u64) < *n {
                    out[i] = *a as f64 + *b as f64 + *c + *d as f64 + i as f64;
                }
            },
        );
        let ks = ctx.kernel(spec)?;
        let mut out = ctx.alloc_zeros::<f64>(40)?;
        ctx.launch(&ks, LaunchConfig::linear(1, 64), (-70_000i32, 200u8, 0.125f64, -3i8, &mut out, 40u64))?;
        let want: Vec<f64> = (0..40).map(|i| -70_000.0 + 200.0 + 0.125 - 3.0 + i as f64).collect();
        assert_eq!(out.download()?, want);
        Ok(())
    }

    fn panicking_cpu_kernel_fails_the_next_sync_and_the_context_survives(ctx) {
        if cpu_only(ctx, "a panicking kernel closure") {
            return Ok(());
        }
        let k = ctx.kernel(panicking_spec())?;
        let s = ctx.create_stream()?;
        let mut out = ctx.alloc_zeros::<f32>(8)?;
        s.launch(&k, LaunchConfig::for_elems(8), (&mut out,))?; // queued: Ok
        match s.sync() {
            Err(gpu::Error::KernelFailed { kernel, message }) => {
                assert_eq!(kernel, "boom");
                assert!(message.contains("boom at thread 3"), "{message}");
            }
            other => panic!("expected KernelFailed, got {other:?}"),
        }
        s.sync()?; // reported once
        s.fill(&mut out, 2.0)?;
        s.sync()?;
        assert_eq!(out.download()?, [2.0; 8]);
        let a = ctx.alloc_upload(&[1.0f32, 2.0])?;
        assert_eq!(ctx.sum(&a)?, 3.0);
        ctx.check()?;
        Ok(())
    }

    fn stream_dropped_with_a_failed_kernel_defers_the_error(ctx) {
        if cpu_only(ctx, "a panicking kernel closure") {
            return Ok(());
        }
        let k = ctx.kernel(panicking_spec())?;
        let s = ctx.create_stream()?;
        let mut out = ctx.alloc_zeros::<f32>(8)?;
        s.launch(&k, LaunchConfig::for_elems(8), (&mut out,))?;
        // The array's record of its users keeps the stream alive until it goes too.
        drop(s);
        drop(out);
        match ctx.check() {
            Err(e @ gpu::Error::Deferred { origin: "Stream drop", .. }) => {
                assert!(
                    matches!(e.root(), gpu::Error::KernelFailed { kernel, .. } if kernel == "boom"),
                    "root: {:?}",
                    e.root()
                );
            }
            other => panic!("expected a deferred KernelFailed from Stream drop, got {other:?}"),
        }
        ctx.check()?; // reported once
        let a = ctx.alloc_upload(&[4i32, 5])?;
        assert_eq!(ctx.sum(&a)?, 9);
        Ok(())
    }

    fn device_info_is_sensible(ctx) {
        let info = ctx.info();
        assert!(!info.name.trim().is_empty());
        assert!(info.total_memory > 0);
        assert!(info.limits.max_threads_per_block >= 1);
        assert!(info.limits.max_block_dim.iter().all(|&d| d >= 1));
        assert!(info.limits.max_grid_dim.iter().all(|&d| d >= 1));
        assert!(info.multiprocessors >= 1);
        let (least, greatest) = info.priority_range;
        assert!(greatest <= least);
        match ctx.backend_name() {
            "cpu" => {
                assert_eq!(info.compute_capability, None);
                assert_eq!(info.limits, gpu::LaunchLimits::CUDA_COMMON);
                assert_eq!(ctx.device_id(), 0);
            }
            "cuda" => assert!(info.compute_capability.is_some()),
            other => panic!("unknown backend {other}"),
        }
        Ok(())
    }
}
