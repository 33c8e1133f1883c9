//! The kernel language's errors: each construct outside it is refused with a message that
//! says what is supported, at the construct's span.

use super::*;

fn lower_src(src: &str) -> Result<Kernel> {
    let f: syn::ItemFn = syn::parse_str(src).expect("parses as a function");
    lower_as(&f, false, false)
}

#[track_caller]
fn refused(src: &str, needle: &str) {
    match lower_src(src) {
        Ok(_) => panic!("accepted: {src}"),
        Err(e) => assert!(
            e.to_string().contains(needle),
            "{src}\n  gave: {e}\n  want: {needle}"
        ),
    }
}

#[test]
fn a_plain_kernel_is_accepted() {
    let k = lower_src(
        "fn saxpy(a: f32, x: &[f32], y: &mut [f32]) { let i = global_x(); if i < y.len() { y[i] = a * x[i] + y[i]; } }",
    )
    .unwrap();
    assert_eq!(k.params.len(), 3);
    assert!(!k.body.iter().any(Stmt::has_barrier));
}

#[test]
fn unsupported_constructs_are_refused_with_what_is_supported() {
    refused(
        "fn k(x: &mut [f32]) { let v = vec![1.0]; }",
        "macros are not supported",
    );
    refused(
        "fn k(x: &mut [f32]) { x[0] = (|v| v)(1.0); }",
        "only the kernel intrinsics",
    );
    refused("fn k(x: &mut [f32]) { foo(x[0]); }", "has no effect");
    refused(
        "fn k(x: &mut [f32]) { x[0] = x.iter().sum(); }",
        "no method `sum`",
    );
    // Each refusal names the construct and says what to write instead.
    refused(
        "fn k(x: &mut [f32]) { match 1 { _ => {} } }",
        "`match` is not supported in a #[kernel]: write `if`/`else if`/`else`",
    );
    refused(
        "fn k(x: &mut [f32]) { let v = match 1 { _ => 2.0 }; x[0] = v; }",
        "`let v = if c { a } else { b };`",
    );
    refused(
        "fn k(x: &mut [f32]) { let f = |v: f32| v * 2.0; }",
        "a closure is not supported in a #[kernel]: write a device function",
    );
    refused(
        "fn k(x: &mut [f32]) { let a = [1.0f32, 2.0]; }",
        "an array literal is not supported in a #[kernel]: use a shared array",
    );
    refused(
        "fn k(x: &mut [f32]) { let n = \"text\"; }",
        "only numbers and bools are literals",
    );
    refused(
        "fn k(x: &mut [f32]) { x[0] = unsafe { 1.0 }; }",
        "an `unsafe` block is not supported in a #[kernel]: a kernel's code needs none",
    );
    // The list of what expressions may use names the `if` value.
    refused(
        "fn k(x: &mut [f32]) { x[0] = (1.0, 2.0); }",
        "an `if`/`else` as the whole value of a `let` or an assignment",
    );
    refused(
        "fn k(x: &mut [f32]) { for i in 0..=3 { } }",
        "`a..=b` is not supported",
    );
    refused(
        "fn k(x: &mut [f32]) { 'a: loop { break 'a; } }",
        "loop labels are not supported",
    );
    refused(
        "fn k(x: &mut [f32]) { let [a, b] = [1, 2]; }",
        "a `let` binds one name",
    );
    refused(
        "fn k(x: &mut [f32]) { let (a, b) = x; }",
        "takes a tuple of values",
    );
    refused("fn k(x: &mut [f32]) { let a: f32; }", "needs a value");
    refused(
        "fn k(x: &mut [f32]) { struct S; }",
        "items are not supported",
    );
    refused("fn k(x: &mut [f32]) { x[0] = *x; }", "dereference");
}

#[test]
fn signatures_outside_the_language_are_refused() {
    refused("fn k<T>(x: &mut [T]) {}", "one type parameter");
    refused("unsafe fn k(x: &mut [f32]) {}", "safe by construction");
    refused("fn k(x: &mut [f32]) -> f32 { 0.0 }", "returns nothing");
    refused("fn k(x: &mut Vec<f32>) {}", "a slice");
    refused("fn k(x: &mut [String]) {}", "element type must be one of");
    refused("fn k(x: bool) {}", "a scalar parameter");
    refused(
        "fn k(x: &mut [f16]) { let v: f16 = x[0]; }",
        "storage types",
    );
    refused(
        "fn k(x: &mut [f16]) { let t = shared::<f16, 8>(); }",
        "storage types",
    );
    refused(
        "fn k(x: &mut [f16]) { atomic_add(&mut x[0], 1.0); }",
        "works on i32, u32, f32, i64, u64 and f64",
    );
    refused("fn k() {}", "at least one parameter");
    refused("fn select(x: &mut [f32]) {}", "WGSL built-in");
    refused(
        "fn k(a: &[f32], b: &[f32], c: &[f32], d: &[f32], e: &[f32], f: &[f32], g: &[f32], h: &[f32], i: &[f32], j: u32, l: u32, m: u32, n: u32) {}",
        "at most 12 parameters",
    );
    refused("fn k(__x: &mut [f32]) {}", "kept for the generated code");
}

#[test]
fn type_errors_name_both_types() {
    refused(
        "fn k(x: &mut [f32], n: u32) { x[n] = 1.0; }",
        "an index is a `usize`, found u32",
    );
    refused(
        "fn k(x: &mut [f32], n: i32) { x[0] = n; }",
        "expected f32, found i32",
    );
    refused(
        "fn k(x: &mut [f32], n: i32) { x[0] = x[0] + n; }",
        "found f32 and i32",
    );
    refused("fn k(x: &mut [f32]) { x[0] = 1; }", "write `1.0`");
    refused(
        "fn k(x: &mut [u32]) { let a = -x[0]; }",
        "cannot negate a u32",
    );
    refused(
        "fn k(x: &mut [i32]) { let a = x[0].mul_hi(3); }",
        "`mul_hi` is for u32 (found i32)",
    );
    refused(
        "fn k(x: &mut [f32]) { let a = x[0].mul_hi(3.0); }",
        "`mul_hi` is for u32 (found f32)",
    );
    refused(
        "fn k(x: &mut [u32]) { let a = x[0].sqrt(); }",
        "is for f32 and f64",
    );
    refused("fn k(x: &[f32]) { x[0] = 1.0; }", "is read-only");
    refused(
        "fn k(x: &mut [f32]) { let a = 1.0f32; a = 2.0; }",
        "not mutable",
    );
    refused(
        "fn k(x: &mut [f32], n: f32) { n = 1.0; }",
        "parameters cannot be assigned",
    );
    refused(
        "fn k(x: &mut [f32]) { let a = y[0]; }",
        "no array named `y`",
    );
}

#[test]
fn barriers_are_refused_where_threads_could_diverge_from_them() {
    refused(
        "fn k(x: &mut [f32]) { for i in 0..4 { if x[i] > 0.0 { break; } barrier(); } }",
        "`break` in a loop that contains `barrier()`",
    );
    refused(
        "fn k(x: &mut [f32]) { if x[0] > 0.0 { return; } barrier(); }",
        "`return` in a kernel that calls `barrier()`",
    );
    refused(
        "fn k(x: &mut [f32]) { loop { barrier(); } }",
        "could never end",
    );
    refused(
        "fn k(x: &mut [f32]) { let a = 1.0 + barrier(); }",
        "a statement of its own",
    );
}

/// A barrier or collective only where every thread of the block gets to it: the control flow
/// around it must depend on values the whole block shares.
#[test]
fn barriers_and_collectives_are_refused_in_control_flow_that_varies_over_the_block() {
    let varies = "whose condition may differ between the threads of a block";
    for src in [
        // A thread coordinate, directly or through a local.
        "fn k(x: &mut [f32]) { if thread_x() < 16 { barrier(); } }",
        "fn k(x: &mut [f32]) { let t = thread_x(); if t < 16 { barrier(); } }",
        "fn k(x: &mut [f32]) { if global_x() < x.len() { barrier(); } }",
        "fn k(x: &mut [f32]) { if subgroup_lane() == 0 { barrier(); } }",
        // A value read from memory.
        "fn k(x: &mut [f32]) { if x[0] > 0.0 { barrier(); } }",
        "fn k(x: &mut [u32]) { let old = atomic_add(&mut x[0], 1); if old == 0 { barrier(); } }",
        // In the `else`, or an `else if`.
        "fn k(x: &mut [f32]) { if thread_x() < 4 { x[0] = 1.0; } else { barrier(); } }",
        "fn k(x: &mut [f32], n: u32) { if n > 2 { x[0] = 1.0; } else if thread_x() < 4 { barrier(); } }",
        // A local assigned in control flow that varies holds different values.
        "fn k(x: &mut [f32]) { let mut u = 0usize; if thread_x() == 0 { u = 1; } if u > 0 { barrier(); } }",
        // A loop some threads leave early ends on different turns.
        "fn k(x: &mut [f32]) { let mut k = 0usize; while k < 8 { if x[k] > 0.0 { break; } k += 1; } if k > 2 { barrier(); } }",
        // A collective's result differs between subgroups.
        "fn k(x: &mut [f32]) { let s = subgroup_add(x[0]); if s > 0.0 { barrier(); } }",
        // A subgroup collective, like a barrier.
        "fn k(x: &mut [f32]) { if global_x() < 5 { let s = subgroup_add(1.0f32); } }",
    ] {
        refused(src, varies);
    }
    refused(
        "fn k(x: &mut [f32]) { let mut j = thread_x(); while j < 64 { barrier(); j += block_dim_x(); } }",
        "inside a `while` whose condition may differ",
    );
    refused(
        "fn k(x: &mut [f32]) { for i in thread_x()..8 { barrier(); } }",
        "inside a `for` whose bounds may differ",
    );
    refused(
        "fn k(x: &mut [f32], n: u32) { for i in (0..n as usize).step_by(thread_x() + 1) { barrier(); } }",
        "whose bounds may differ",
    );
    // Uniform: kernel arguments, lengths, block coordinates and sizes, constants, what is
    // computed from them, loops over them; and a barrier after a branch that varies.
    for src in [
        "fn k(x: &mut [f32], n: u32) { if n > 4 { barrier(); } }",
        "fn k(x: &mut [f32]) { let b = block_x(); if b < x.len() && grid_dim_x() > 1 { barrier(); } }",
        "fn k(x: &mut [f32]) { for i in 0..x.len() { barrier(); } }",
        "fn k(x: &mut [f32], n: u32) { for i in (0..n as usize).step_by(16) { barrier(); } }",
        "fn k(x: &mut [f32]) { let mut s = 1usize; while s < block_dim_x() { barrier(); s *= 2; } }",
        "fn k(x: &mut [f32]) { let mut b = block_x(); while b < x.len() { barrier(); b += grid_dim_x(); } }",
        "fn k(x: &mut [f32]) { if thread_x() < 4 { x[0] = 1.0; } barrier(); }",
        "fn k(x: &mut [f32]) { let n = subgroup_size() * num_subgroups(); if n > 32 { let s = subgroup_add(x[0]); } }",
    ] {
        if let Err(e) = lower_src(src) {
            panic!("refused: {src}\n  {e}");
        }
    }
}

/// `uniform_load(&t[i])` makes a value read from shared memory the block's: it may steer a
/// barrier; it is itself reached by the whole block, at an index the whole block shares.
#[test]
fn uniform_load_shares_a_value_read_from_shared_memory() {
    let k = lower_src(
        "fn k(x: &mut [u32]) { let t = shared::<u32, 1>(); if thread_x() == 0 { t[0] = x[0]; } \
         let n = uniform_load(&t[0]); for r in 0..n as usize { barrier(); } }",
    )
    .expect("a loaded value may bound a loop with a barrier");
    let barriers = k.body.iter().filter(|s| matches!(s, Stmt::Barrier)).count();
    assert_eq!(barriers, 2, "a barrier before the load and one after");
    refused(
        "fn k(x: &mut [u32]) { let t = shared::<u32, 1>(); t[0] = x[0]; let n = t[0]; for r in 0..n as usize { barrier(); } }",
        "whose bounds may differ",
    );
    refused(
        "fn k(x: &mut [u32]) { let t = shared::<u32, 64>(); let n = uniform_load(&t[thread_x()]); }",
        "its index must be the same for every thread",
    );
    refused(
        "fn k(x: &mut [u32]) { let t = shared::<u32, 1>(); if thread_x() == 0 { let n = uniform_load(&t[0]); } }",
        "whose condition may differ",
    );
    refused(
        "fn k(x: &mut [u32]) { let n = uniform_load(&x[0]); }",
        "takes an element of a shared array",
    );
    refused(
        "fn k(x: &mut [u32]) { let t = shared::<u32, 1>(); x[0] = uniform_load(&t[0]); }",
        "the whole value of a `let` of its own",
    );
    refused(
        "fn k(x: &mut [u32]) { let t = shared::<u32, 1>(); if x[0] > 0 { return; } let n = uniform_load(&t[0]); }",
        "`return` in a kernel that calls `barrier()`",
    );
}

#[test]
fn shared_arrays_and_atomics_are_checked() {
    refused(
        "fn k(x: &mut [f32], n: u32) { let t = shared::<f32, n>(); }",
        "a shared array is",
    );
    refused(
        "fn k(x: &mut [f32]) { let t = shared::<f32, 0>(); }",
        "1 to 65536",
    );
    refused(
        "fn k(x: &mut [f64]) { atomic_exchange(&mut x[0], 1.0); }",
        "works on i32, u32 and f32",
    );
    refused(
        "fn k(x: &mut [i8]) { atomic_add(&mut x[0], 1); }",
        "works on i32, u32, f32, i64, u64 and f64",
    );
    let k = lower_src("fn k(x: &mut [f64], y: &mut [i64]) { atomic_add(&mut x[0], 1.0); atomic_add(&mut y[1], 2); }")
        .expect("64-bit atomic adds are in the language");
    assert_eq!(k.atomic.len(), 2);
    refused(
        "fn k(x: &mut [f32]) { atomic_max(&mut x[0], 1.0); }",
        "works on i32 and u32",
    );
    refused(
        "fn k(x: &mut [u32]) { atomic_add(&x[0], 1); }",
        "is `&mut a[i]`",
    );
    let k = lower_src(
        "fn k(x: &mut [u32]) { const N: usize = 4 * 8; let t = shared::<u32, { N * 2 }>(); t[0] = 1; let old = atomic_add(&mut x[0], t[0]); }",
    )
    .unwrap();
    assert_eq!(k.shared[0].len, Extent::Fixed(64));
    assert_eq!(k.atomic, vec![Arr::Param(0)]);
}

#[test]
fn locals_split_by_a_barrier_live_per_thread() {
    let k = lower_src(
        "fn k(x: &mut [f32]) { let t = shared::<f32, 64>(); let i = thread_x(); let mut acc = 0.0f32; for s in 0..4 { t[i] = x[i]; barrier(); let v = t[i]; acc += v; barrier(); } x[i] = acc; }",
    )
    .unwrap();
    let storage = |n: &str| k.locals.iter().find(|l| l.name == n).unwrap().storage;
    assert_eq!(storage("i"), Storage::PerThread);
    assert_eq!(storage("acc"), Storage::PerThread);
    assert_eq!(storage("s"), Storage::Uniform);
    assert_eq!(storage("v"), Storage::PerThread);
}

/// Regression (found by the `kernel_codegen` fuzz target): `-(-2)` folded to the literal
/// `--2`, which CUDA C and WGSL read as a decrement, so neither compiled the kernel. `-MIN`
/// wraps, so `-(-2147483648)` stays a negation (folded, it would not fit an `i32`).
#[test]
fn a_negated_negative_literal_is_its_value() {
    let k = lower_src(
        "fn k(x: &mut [i32], y: &mut [f32]) { x[0] = -(-2); x[1] = -(-(-3)); y[0] = -(-1.5f32); x[2] = -(-2147483648); }",
    )
    .unwrap();
    assert!(
        matches!(
            k.body.last(),
            Some(Stmt::Assign {
                value: Expr {
                    kind: ExprKind::Unary(UnOp::Neg, _),
                    ..
                },
                ..
            })
        ),
        "{:?}",
        k.body.last()
    );
    let lits: Vec<&str> = k
        .body
        .iter()
        .filter_map(|s| match s {
            Stmt::Assign {
                value:
                    Expr {
                        kind: ExprKind::Lit(t),
                        ..
                    },
                ..
            } => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(lits, ["2", "-3", "1.5"]);
}

#[test]
fn subgroup_collectives_follow_the_rules_of_barriers() {
    let k = lower_src(
        "fn k(x: &mut [f32]) { let i = global_x(); let s = subgroup_add(x[i]); let t = subgroup_shuffle(s, subgroup_lane() ^ 1); x[i] = t; }",
    )
    .unwrap();
    assert!(
        k.body.iter().any(Stmt::has_barrier),
        "a collective splits the twin"
    );
    refused(
        "fn k(x: &mut [f32]) { x[0] = 1.0 + subgroup_add(x[0]); }",
        "the whole value of a `let`",
    );
    refused(
        "fn k(x: &mut [f32]) { let s = subgroup_add(x[0] > 0.0); }",
        "takes an f32, f64, i32, u32, i64, u64, u8 or i8 (found bool",
    );
    refused(
        "fn k(x: &mut [f32]) { let s = subgroup_any(x[0]); }",
        "expected bool",
    );
    refused(
        "fn k(x: &mut [f32]) { let s = subgroup_shuffle(x[0]); }",
        "takes 2 argument(s)",
    );
    refused(
        "fn k(x: &mut [f32]) { let s: f64 = subgroup_add(x[0]); }",
        "expected f64",
    );
    refused(
        "fn k(x: &mut [f32]) { if x[0] > 0.0 { return; } let s = subgroup_max(x[0]); }",
        "`return` in a kernel that calls `barrier()` or a subgroup collective",
    );
    refused(
        "fn k(x: &mut [f32]) { for i in 0..4 { if x[i] > 0.0 { break; } let s = subgroup_min(x[i]); } }",
        "`break` in a loop that contains `barrier()` or a subgroup collective",
    );
    refused(
        "fn k(x: &mut [f32]) { let n = subgroup_size(1); }",
        "takes no arguments",
    );
    let device = |src: &str| {
        let f: syn::ItemFn = syn::parse_str(src).expect("parses as a function");
        lower_as(&f, false, true)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let e = device("fn d(a: f32) -> f32 { let s = subgroup_add(a); s }");
    assert!(e.contains("needs a thread"), "{e}");
    assert!(device("fn d(a: f32) -> f32 { a + subgroup_lane() as f32 }").contains("needs a thread"));
}

#[test]
fn compile_time_parameters_are_checked() {
    let k = lower_src(
        "fn k<const B: usize, const F: bool>(x: &mut [f32]) { let t = shared::<f32, B>(); t[0] = 1.0; if F { x[0] = t[B - 1]; } }",
    )
    .unwrap();
    assert_eq!(k.comptime.len(), 2);
    assert_eq!(k.shared[0].len, Extent::Comptime(0));
    refused(
        "fn k<const B: u8>(x: &mut [f32]) { }",
        "usize, u32, i32, u64, i64 or bool",
    );
    refused(
        "fn k<const B: u32>(x: &mut [f32]) { let t = shared::<f32, B>(); }",
        "a shared array is",
    );
    refused("fn k<'a>(x: &mut [f32]) { }", "at most one type parameter");
    let f: syn::ItemFn = syn::parse_str("fn d<const B: u32>(a: f32) -> f32 { a }").expect("parses");
    let e = lower_as(&f, false, true)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("no compile-time parameters"), "{e}");
}

#[test]
fn reports_name_what_they_check_and_take_usizes() {
    let k = lower_src(
        "fn k(x: &mut [u32], n: u32) { let i = global_x(); if i >= n as usize { report_out_of_bounds(\"rows\", i, n as usize); report_out_of_bounds(\"rows\", 0, 1); report_out_of_bounds(\"cols\", 1, 1); } }",
    )
    .expect("accepted");
    // Repeated names share a fault code, after the slices' (and shared arrays').
    assert_eq!(k.reports, ["rows", "cols"]);
    assert_eq!(k.array_names(), ["x", "rows", "cols"]);
    assert_eq!((k.report_number(0), k.report_number(1)), (1, 2));
    refused(
        "fn k(x: &mut [u32]) { report_out_of_bounds(rows, 0, 1); }",
        "takes a string literal",
    );
    refused(
        "fn k(x: &mut [u32]) { report_out_of_bounds(\"rows\", 0); }",
        "takes a string literal",
    );
    refused(
        "fn k(x: &mut [u32]) { report_out_of_bounds(\"rows\", x[0], 1); }",
        "usize",
    );
    refused(
        "fn k(x: &mut [u32]) { report_out_of_bounds(\"\", 0, 1); }",
        "name what the index",
    );
    let f: syn::ItemFn =
        syn::parse_str("fn d(a: u32) -> u32 { report_out_of_bounds(\"rows\", 0, 1); a }")
            .expect("parses");
    let e = lower_as(&f, false, true).expect_err("refused in a device function");
    assert!(e.to_string().contains("fault record"), "{e}");
}
