//! Behaviours of the facade, one test body per behaviour, run on every backend.
//!
//! Each body checks a result against a reference computed on the host in plain Rust (f64
//! for floats), so that a backend that gets something wrong fails here. Arrays reach 1 << 20
//! elements only where a missing cross-stream wait must be visible.

use crate::{backend_tests, common, cpu_tests};

use gpukit::cpu::reference;
use gpukit::{Gemm, HostUse, In, KernelSpec, LaunchConfig, Numeric, Out};

use common::{close, vector_add_spec};

/// Large enough that unordered work on two streams would visibly race.
const BIG: usize = 1 << 20;

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

const SAXPY_WGSL: &str = r#"
struct Args { n: vec2<u32>, alpha: f32 }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
override block_x: u32 = 256;
@compute @workgroup_size(block_x)
fn saxpy(@builtin(global_invocation_id) g: vec3<u32>) {
    if (args.n.y == 0u && g.x < args.n.x) { y[g.x] = args.alpha * x[g.x] + y[g.x]; }
}"#;

const SCALARS_WGSL: &str = r#"
struct Args { a: i32, b: u32, c: f64, d: u32, n: vec2<u32> }
var<immediate> args: Args;
@group(0) @binding(0) var<storage, read_write> out: array<f64>;
override block_x: u32 = 64;
@compute @workgroup_size(block_x)
fn scalars(@builtin(global_invocation_id) g: vec3<u32>) {
    let d = i32(args.d << 24u) >> 24u;
    if (args.n.y == 0u && g.x < args.n.x) {
        out[g.x] = f64(args.a) + f64(args.b) + args.c + f64(d) + f64(g.x);
    }
}"#;

type Saxpy = (u64, f32, In<f32>, Out<f32>);
type Scalars = (i32, u8, f64, i8, Out<f64>, u64);

fn saxpy_spec() -> KernelSpec<Saxpy> {
    // SAFETY: `saxpy` takes (unsigned long long, float, const float*, float*), `Saxpy` in
    // order and type, and touches only indices below `n`.
    let spec = unsafe { KernelSpec::<Saxpy>::cuda(SAXPY_SRC, "saxpy") };
    // SAFETY: the WGSL reads `n` and `alpha` from the immediates and binds x (read) and y
    // (written) in order, touching indices below `n` only.
    let spec = unsafe { spec.wgsl(SAXPY_WGSL) };
    spec.cpu(|t, (n, alpha, x, y)| {
        let i = t.x();
        if (i as u64) < *n {
            y[i] += *alpha * x[i];
        }
    })
}

/// A CPU-only kernel that panics at thread 3.
fn panicking_spec() -> KernelSpec<(Out<f32>,)> {
    KernelSpec::<(Out<f32>,)>::named("boom").cpu(|t, (out,)| {
        let i = t.x();
        if i == 3 {
            panic!("boom at thread 3");
        }
        if i < out.len() {
            out[i] = 1.0;
        }
    })
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

fn bits_eq<T: gpukit::Element>(a: &[T], b: &[T]) -> bool {
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
fn round_trip<T: gpukit::Element>(ctx: &gpukit::Context, data: &[T]) -> gpukit::Result<()> {
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

/// Values of `T` (rounded from `f`) and their exact f64 values.
fn floats<T: gpukit::Float>(n: usize, f: impl Fn(usize) -> f64) -> (Vec<T>, Vec<f64>) {
    let t: Vec<T> = (0..n).map(|i| T::from_f64(f(i))).collect();
    let r = t.iter().map(|v| v.to_f64()).collect();
    (t, r)
}

/// All four transposes, with alpha and beta, against the naive f64 product.
fn gemm_all<T: gpukit::Float>(ctx: &gpukit::Context, rel: f64) -> gpukit::Result<()> {
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
            let want =
                reference::gemm(&gr, &ar, &br, &cr).expect("the reference gets whole matrices");
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
    let want = reference::gemm(&Gemm::<f64>::new(m, n, k), &ar, &br, &[])
        .expect("the reference gets whole matrices");
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
fn float_ops<T: gpukit::Float>(ctx: &gpukit::Context, rel: f64) -> gpukit::Result<()> {
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
        if op != "relu" && common::lacks_math(ctx, T::DTYPE) {
            common::assert_unsupported(ctx.exp(&dx, &mut out), &format!("{op} {name}"));
            continue;
        }
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
        let ctx: &gpukit::Context = $ctx;
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

// After the helpers and macros above, which textual macro scoping makes visible to them.
mod arrays;
// CUDA-only behaviours need the CUDA backend compiled in (the `cuda` feature).
#[cfg(feature = "cuda")]
mod cuda;
mod kernels;
mod ops;
mod streams;
mod transfers;
