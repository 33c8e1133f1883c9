//! Which accesses the lowering proves in bounds (`Kernel::prove_bounds`): those the code
//! guards, and no other.

use super::*;

/// Each access of the kernel `src`, in order: the array's name, `w` for a write, and
/// whether it is proven.
fn accesses(src: &str) -> Vec<(String, bool, bool)> {
    let f: syn::ItemFn = syn::parse_str(src).expect("parses as a function");
    let k = lower_as(&f, false, false).expect("lowers");
    let mut out = Vec::new();
    gpukit_kernel::ir::walk(&k.body, &mut |v| match v {
        gpukit_kernel::ir::Visit::Stmt(Stmt::Assign {
            place: Place::Index { arr, proven, .. },
            ..
        }) => out.push((k.arr_name(*arr).to_owned(), true, *proven)),
        gpukit_kernel::ir::Visit::Expr(Expr {
            kind: ExprKind::Index { arr, proven, .. },
            ..
        }) => out.push((k.arr_name(*arr).to_owned(), false, *proven)),
        _ => {}
    });
    out
}

/// The names of the proven accesses (`x` read, `y=` written) and of the others.
fn split(src: &str) -> (Vec<String>, Vec<String>) {
    let mut proven = Vec::new();
    let mut checked = Vec::new();
    for (name, write, p) in accesses(src) {
        let name = if write { format!("{name}=") } else { name };
        if p {
            proven.push(name);
        } else {
            checked.push(name);
        }
    }
    (proven, checked)
}

#[test]
fn a_guard_proves_the_arrays_it_names() {
    // saxpy as the README writes it: `y` is guarded, `x` is not.
    let (p, c) = split(
        "fn k(a: f32, x: &[f32], y: &mut [f32]) { let i = global_x(); if i < y.len() { y[i] = a * x[i] + y[i]; } }",
    );
    assert_eq!((p, c), (vec!["y=".into(), "y".into()], vec!["x".into()]));
    let (p, c) = split(
        "fn k(a: f32, x: &[f32], y: &mut [f32]) { let i = global_x(); if i < x.len() && i < y.len() { y[i] = a * x[i] + y[i]; } }",
    );
    assert_eq!(c, Vec::<String>::new(), "{p:?}");
    // The coordinate itself, and a length bound to a name, or the least of two.
    let (_, c) = split(
        "fn k(x: &[f32], y: &mut [f32]) { let n = x.len().min(y.len()); if global_x() < n { y[global_x()] = x[global_x()]; } }",
    );
    assert!(c.is_empty(), "{c:?}");
}

#[test]
fn an_early_return_and_a_loop_bound_prove_what_follows() {
    let (_, c) = split(
        "fn k(x: &mut [f32]) { let i = global_x(); if i >= x.len() { return; } x[i] = x[i] * 2.0; }",
    );
    assert!(c.is_empty(), "{c:?}");
    let (_, c) = split(
        "fn k(x: &[f32], out: &mut [f32]) { let mut s = 0.0f32; for j in 0..x.len() { s += x[j]; } out[0] = s; }",
    );
    assert_eq!(c, vec!["out=".to_string()]);
    let (_, c) = split(
        "fn k(x: &mut [f32]) { for j in (global_x()..x.len()).step_by(64) { if j < 3 { continue; } x[j] = 1.0; } }",
    );
    assert!(c.is_empty(), "{c:?}");
}

#[test]
fn what_the_guard_does_not_cover_stays_checked() {
    // Another array, another index, a value that may wrap, a local assigned again, the
    // branch that fails the guard.
    for src in [
        "fn k(x: &mut [f32], y: &[f32]) { let i = global_x(); if i < y.len() { x[i] = 0.0; } }",
        "fn k(y: &mut [f32]) { let i = global_x(); if i < y.len() { y[i + 1] = 0.0; } }",
        "fn k(y: &mut [f32]) { let i = global_x(); let j = i - 1; if i < y.len() { y[j] = 0.0; } }",
        "fn k(y: &mut [f32]) { let mut i = global_x(); if i < y.len() { i += 1; y[i] = 0.0; } }",
        "fn k(y: &mut [f32]) { let i = global_x(); if i < y.len() { } else { y[i] = 0.0; } }",
        "fn k(y: &mut [f32]) { let i = global_x(); if i <= y.len() { y[i] = 0.0; } }",
        "fn k(y: &mut [f32]) { let i = global_x(); if i < y.len() || i < 4 { y[i] = 0.0; } }",
        "fn k(y: &mut [f32], n: u32) { let i = global_x(); if i < n as usize { y[i] = 0.0; } }",
    ] {
        let (p, _) = split(src);
        assert!(p.is_empty(), "{src}: {p:?}");
    }
}

#[test]
fn a_shared_index_is_proven_by_its_range() {
    // thread_x() < 1024: a shared array of 1024 holds any, one of 256 only behind a guard.
    let (p, c) = split(
        "fn k(out: &mut [f32]) { let s = shared::<f32, 1024>(); let t = thread_x(); s[t] = 1.0; barrier(); let v = s[t]; if t < out.len() { out[t] = v; } }",
    );
    assert_eq!((p.len(), c.len()), (3, 0), "{p:?} {c:?}");
    let (p, c) = split(
        "fn k(out: &mut [f32]) { let s = shared::<f32, 256>(); let t = thread_x(); s[t] = 1.0; if t < 256 { s[t] = 2.0; } }",
    );
    assert_eq!((p, c), (vec!["s=".into()], vec!["s=".into()]));
    // A tile with a halo: (ty + dy) * 20 + tx + dx <= 19 * 20 + 19.
    let (p, c) = split(
        "fn k(out: &mut [f32]) {
            let tile = shared::<f32, 400>();
            let (tx, ty) = (thread_x(), thread_y());
            if tx < 16 && ty < 16 {
                let mut acc = 0.0f32;
                for dy in 0..5 { for dx in 0..5 { acc += tile[(ty + dy) * 20 + tx + dx]; } }
                out[0] = acc;
            }
        }",
    );
    assert_eq!((p, c), (vec!["tile".into()], vec!["out=".into()]));
    // One past the tile is not.
    let (p, _) = split(
        "fn k(out: &mut [f32]) { let tile = shared::<f32, 400>(); let t = thread_x(); if t < 16 { for d in 0..5 { out[0] = tile[(t + d) * 20 + 20]; } } }",
    );
    assert!(p.is_empty(), "{p:?}");
}

#[test]
fn a_signed_argument_may_be_negative() {
    // `p.min(10)` may be below zero: as a `usize` it wraps past the array.
    let (p, _) = split(
        "fn k(out: &mut [f32], p: i32) { let s = shared::<f32, 16>(); let j = p.min(10) as usize; s[j] = 1.0; }",
    );
    assert!(p.is_empty(), "{p:?}");
    // Clamped on both sides it is in range.
    let (p, _) = split(
        "fn k(out: &mut [f32], p: i32) { let s = shared::<f32, 16>(); let j = p.max(0).min(10) as usize; s[j] = 1.0; }",
    );
    assert_eq!(p, vec!["s=".to_string()]);
}
