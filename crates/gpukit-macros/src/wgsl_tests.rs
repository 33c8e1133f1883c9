//! The generated WGSL of kernels lowered from Rust, checked as wgpu's shader creation checks it.

use gpukit_kernel::ir::*;
use gpukit_kernel::wgsl::*;

fn kernel(src: &str) -> Kernel {
    let f: syn::ItemFn = syn::parse_str(src).expect("parses as a function");
    crate::lower::lower_as(&f, false, false).expect("lowers")
}

/// naga's parse and validation, as wgpu's shader creation runs them.
fn naga_accepts(wgsl: &str) -> Result<(), String> {
    naga_accepts_with(wgsl, naga::valid::Capabilities::IMMEDIATES)
}

/// naga's validation with the shader features gpukit-wgpu turns on where the adapter has
/// them: 64-bit floats and integers, f16 and subgroups.
fn naga_accepts_wide(wgsl: &str) -> Result<(), String> {
    naga_accepts_with(wgsl, WIDE | naga::valid::Capabilities::SUBGROUP)
}

/// The capabilities of 64-bit floats and integers and of f16, beside the immediates.
const WIDE: naga::valid::Capabilities = naga::valid::Capabilities::IMMEDIATES
    .union(naga::valid::Capabilities::FLOAT64)
    .union(naga::valid::Capabilities::SHADER_INT64)
    .union(naga::valid::Capabilities::SHADER_FLOAT16);

/// naga's parse, and its validation with `caps`.
fn naga_accepts_with(wgsl: &str, caps: naga::valid::Capabilities) -> Result<(), String> {
    let module = naga::front::wgsl::parse_str(wgsl).map_err(|e| e.emit_to_string(wgsl))?;
    naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
        .validate(&module)
        .map(drop)
        .map_err(|e| e.emit_to_string(wgsl))
}

/// Every element type has WGSL that validates, checked and unchecked: 8-bit integers packed
/// four to a word (read-only, written, and in a shared array), bf16 two to a word, f16 as
/// `f16`, the 64-bit types as themselves, with the operations whose results must wrap back
/// to 8 bits, shifts, casts to and from every type, and compound assignments to elements.
#[test]
fn every_element_type_has_wgsl_that_validates() {
    for t in ["u8", "i8", "i32", "u32", "i64", "u64", "f32", "f64"] {
        let neg = if t.starts_with('u') { "a[0]" } else { "-a[0]" };
        let ints = if t.starts_with('f') {
            String::new()
        } else {
            format!(
                "y[i] = (x << 3u32) >> 1u32; y[i] |= !x; for j in (0 as {t})..s {{ y[i] += j; }}"
            )
        };
        let src = format!(
            "fn k(a: &[{t}], y: &mut [{t}], s: {t}, f: &mut [f32]) {{
                let tile = shared::<{t}, 64>();
                let i = global_x();
                let x = a[i] * s + a[i] / s - {neg};
                tile[thread_x()] = x;
                barrier();
                y[i] = tile[63 - thread_x()].min(x).max(s);
                y[i] += x;
                y[i] *= s;
                {ints}
                f[i] = x as f32 + (f[i] as {t}) as f32 + (i as {t}) as f32 + (s as u8) as f32 + (s as i8) as f32;
            }}"
        );
        let k = kernel(&src);
        for checked in [true, false] {
            let w = generate(&k, checked).unwrap_or_else(|e| panic!("{t}: {e}"));
            if let Err(e) = naga_accepts_wide(&w) {
                panic!("{t} (checked: {checked}):\n{e}\n{w}");
            }
        }
    }
    let k = kernel(
        "fn k(x: &[f16], y: &mut [bf16], z: &mut [f16], s: f32) {
            let i = global_x();
            y[i] = x[i] * s;
            y[i] += 1.0;
            z[i] = y[i] - x[i];
        }",
    );
    for checked in [true, false] {
        let w = generate(&k, checked).expect("WGSL");
        assert!(
            w.starts_with("// Generated") && w.contains("enable f16;"),
            "{w}"
        );
        if let Err(e) = naga_accepts_wide(&w) {
            panic!("f16/bf16 (checked: {checked}):\n{e}\n{w}");
        }
    }
}

/// A math function of an f64 other than those Vulkan has in 64 bits leaves the kernel
/// without WGSL, saying why; `sqrt`, `floor`, `min` and the others it has compile.
#[test]
fn f64_math_wgsl_has_and_lacks() {
    let k = kernel("fn k(x: &mut [f64]) { let i = global_x(); x[i] = x[i].sqrt().floor().min(2.0).mul_add(3.0, 1.0); }");
    naga_accepts_wide(&generate(&k, true).expect("WGSL")).expect("validates");
    let k = kernel("fn k(x: &mut [f64]) { let i = global_x(); x[i] = x[i].exp(); }");
    let why = generate(&k, true).expect_err("no WGSL");
    assert!(why.contains("math function of an f64"), "{why}");
}

/// Regression (found by the `kernel_codegen` fuzz target): WGSL evaluates an expression
/// of constants when the shader is created, and refuses one that divides an integer by
/// zero, overflows, shifts too far, makes a float infinite or NaN, or leaves a built-in's
/// domain, so such a kernel did not compile on Vulkan at all, while Rust (and CUDA) only
/// give the value at run time; so was an integer division by a constant zero and a
/// checked store to a shared array at a constant index past its end. Each constant of
/// such an expression (and a constant divisor) now reaches it through a function, and
/// locals are variables, so nothing is evaluated early; the
/// values are the run-time ones (an integer divided by zero is 0, through the language's
/// own division).
#[test]
fn constant_expressions_wgsl_would_refuse_compile() {
    let bodies = [
        "x[0] = 1.0f32 / 0.0;",
        "x[0] = 0.0f32 / 0.0;",
        "x[0] = (-1e-7f32).powf(0.5);",
        "x[0] = (-4.0f32).sqrt() + (0.0f32).ln();",
        "x[0] = 3.0e38f32 * 10.0;",
        "let z = 0i32; x[0] = (5 / z) as f32;",
        "let z = 0i32; x[0] = (5 % z) as f32;",
        "let m = 2147483647i32; x[0] = (m + 1) as f32;",
        "let s = 40u32; x[0] = (1u32 << s) as f32;",
        "let z = 0.0f32; let q = 1.0 / z; x[0] = q;",
        "let a = -2147483648i32; let b = -1i32; x[0] = (a / b) as f32;",
        "let i = global_x() as i32; x[0] = (i / 0) as f32; x[1] = (i % (1 - 1)) as f32;",
        "let t = shared::<f32, 8>(); t[100] = 1.0; x[0] = t[200];",
    ];
    for body in bodies {
        let k = kernel(&format!("fn k(x: &mut [f32]) {{ {body} }}"));
        // Without bounds checks a constant index past a shared array is the kernel's
        // fault (`KernelSpec::unchecked`'s contract), and naga's refusal of it right.
        let modes: &[bool] = if body.contains("t[100]") {
            &[true]
        } else {
            &[true, false]
        };
        for &checked in modes {
            let w = generate(&k, checked).expect("WGSL");
            if let Err(e) = naga_accepts(&w) {
                panic!("{body} (checked: {checked}):\n{e}\n{w}");
            }
        }
    }
}

/// Regression (found by the `kernel_codegen` fuzz target): a `usize` literal above
/// `u32::MAX`, `usize::MAX` say, went into the WGSL as it is (`18446744073709551615u`),
/// which naga refuses, so the kernel did not compile on Vulkan. `usize::MAX` is
/// `u32::MAX` there; another such constant leaves the kernel without WGSL, saying why.
#[test]
fn usize_constants_fit_wgsls_32_bit_usize() {
    let k = kernel(
        "fn k(x: &mut [u32]) { let mut best = usize::MAX; let i = global_x(); \
         if i < best { best = i; } x[0] = best as u32; }",
    );
    for checked in [true, false] {
        let w = generate(&k, checked).expect("WGSL");
        assert!(w.contains("4294967295u"), "{w}");
        assert!(!w.contains("18446744073709551615"), "{w}");
    }
    let k = kernel("fn k(x: &mut [u32]) { x[0] = (global_x() + 5000000000) as u32; }");
    let why = generate(&k, true).expect_err("no WGSL");
    assert!(why.contains("u32::MAX"), "{why}");
}

/// Every collective and lane query on every type it takes validates with subgroups, and
/// only with them: a kernel without subgroup operations needs no subgroup capability.
#[test]
fn subgroup_operations_have_wgsl_that_validates() {
    for t in ["i32", "u32", "f32", "i64", "u64", "f64"] {
        let src = format!(
            "fn k(a: &[{t}], y: &mut [{t}], c: &mut [u32]) {{
                let i = global_x();
                let x = a[i];
                let s = subgroup_add(x);
                let lo = subgroup_min(x);
                let hi = subgroup_max(x);
                let inc = subgroup_inclusive_add(x);
                let exc = subgroup_exclusive_add(x);
                let b = subgroup_shuffle(x, 0);
                let r = subgroup_shuffle_xor(x, 1);
                let u = subgroup_shuffle_up(x, 1);
                let d = subgroup_shuffle_down(x, 2);
                let any = subgroup_any(x > lo);
                let all = subgroup_all(x >= lo);
                y[i] = s + lo + hi + inc + exc + b + r + u + d;
                if any && all {{ c[i] = (subgroup_size() + subgroup_lane() + subgroup_id() + num_subgroups()) as u32; }}
            }}"
        );
        let w = generate(&kernel(&src), true).unwrap_or_else(|e| panic!("{t}: {e}"));
        if let Err(e) = naga_accepts_wide(&w) {
            panic!("{t}:\n{e}\n{w}");
        }
        assert!(
            naga_accepts(&w).is_err(),
            "{t}: needs the SUBGROUP capability"
        );
        // The emulation through workgroup memory needs no subgroups.
        let plain = generate_without_subgroups(&kernel(&src), true)
            .expect("a kernel with collectives has it")
            .unwrap_or_else(|e| panic!("{t}: {e}"));
        if let Err(e) = naga_accepts_wide_without_subgroups(&plain) {
            panic!("{t} without subgroups:\n{e}\n{plain}");
        }
    }
    let none = kernel("fn k(y: &mut [f32]) { y[0] = 1.0; }");
    assert!(generate_without_subgroups(&none, true).is_none());
}

/// [`naga_accepts_wide`] without the SUBGROUP capability.
fn naga_accepts_wide_without_subgroups(wgsl: &str) -> Result<(), String> {
    naga_accepts_with(wgsl, WIDE)
}

/// A kernel's compile-time parameters become constants written into its WGSL at each
/// instantiation: the module validates with each value, and one that makes a shared array
/// empty fails validation (`const_assert`).
#[test]
fn compile_time_parameters_have_wgsl_that_validates() {
    let k = kernel(
        "fn k<const B: usize, const K: i64, const F: bool>(x: &mut [u8], y: &mut [i64]) {
            let t = shared::<u8, B>();
            let i = global_x();
            t[thread_x()] = x[i];
            barrier();
            if F { x[i] = t[B - 1 - thread_x()]; }
            y[i] = y[i] * K + B as i64;
        }",
    );
    let w = generate(&k, true).unwrap();
    let with = |b: &str, kk: &str| {
        w.replacen(
            COMPTIME_MARK,
            &comptime_definitions(
                &[("B", "usize", b), ("K", "i64", kk), ("F", "bool", "true")],
                false,
            ),
            1,
        )
    };
    for (b, kk) in [("1", "0"), ("64", "-9223372036854775808"), ("65536", "7")] {
        let src = with(b, kk);
        if let Err(e) = naga_accepts_wide(&src) {
            panic!("B = {b}, K = {kk}:\n{e}\n{src}");
        }
    }
    assert!(
        naga_accepts_wide(&with("0", "1")).is_err(),
        "an empty shared array"
    );
}

/// A kernel's module with a device function linked in validates: after the kernel's
/// `enable f16;` (a directive must come first), and with the 64-bit helper a device function
/// uses that the kernel, which has no 64-bit type, lacks.
#[test]
fn device_functions_link_after_directives_and_bring_their_helpers() {
    let device = |src: &str| {
        let f: syn::ItemFn = syn::parse_str(src).expect("parses as a function");
        let k = crate::lower::lower_as(&f, false, true).expect("lowers");
        gpukit_kernel::wgsl::device(&k).expect("has WGSL")
    };
    let d = device("fn wide(a: f32) -> f32 { a + ((3i64 * 5) / 2) as f32 }");
    assert!(d.contains("gk_rt_i64("), "{d}");
    let k = kernel("fn k(x: &[f16], y: &mut [f32]) { let i = global_x(); y[i] = wide(x[i]); }");
    let w = generate(&k, true).unwrap();
    assert!(
        w.starts_with("// Generated") && w.contains("enable f16;"),
        "{w}"
    );
    // Put in front, as the linker once did, the directive comes too late.
    assert!(naga_accepts_wide(&format!("{d}{w}")).is_err());
    let linked = link(&w, &d);
    if let Err(e) = naga_accepts_wide(&linked) {
        panic!("{e}\n{linked}");
    }
    let plain = kernel("fn k(y: &mut [f32]) { y[0] = wide(1.0); }");
    let w = generate(&plain, true).unwrap();
    assert!(
        naga_accepts_wide(&format!("{d}{w}")).is_err(),
        "gk_rt_i64 is missing"
    );
    let linked = link(&w, &d);
    if let Err(e) = naga_accepts_wide(&linked) {
        panic!("{e}\n{linked}");
    }
}
