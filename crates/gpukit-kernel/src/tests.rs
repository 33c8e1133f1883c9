//! The emitters' output for hand-built IR: what the backends' bodies and the language's
//! wrapping rules become in each target. (Kernels lowered from Rust are tested in
//! gpukit-macros; what they compute, against the CPU twin, in the facade's tests.)

use crate::ir::*;
use crate::{cuda, twin, wgsl};

fn local(i: usize, ty: Ty) -> Expr {
    Expr {
        kind: ExprKind::Local(i),
        ty,
    }
}

fn lit(text: &str, ty: Ty) -> Expr {
    Expr {
        kind: ExprKind::Lit(text.into()),
        ty,
    }
}

fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    let ty = if op.is_comparison() { Ty::Bool } else { a.ty };
    Expr {
        kind: ExprKind::Binary(op, Box::new(a), Box::new(b)),
        ty,
    }
}

fn body(ty: Ty, value: Expr) -> Body {
    Body {
        operands: ["a", "b"]
            .iter()
            .map(|n| Local {
                name: (*n).into(),
                ty,
                mutable: false,
                storage: Storage::Plain,
            })
            .collect(),
        value,
    }
}

/// `if a > 0 { a } else { b.min(a) }` over `ty`.
fn relu_or_min(ty: Ty) -> Body {
    let (a, b) = (local(0, ty), local(1, ty));
    let min = Expr {
        kind: ExprKind::Math(Math::Min, vec![b, a.clone()]),
        ty,
    };
    let value = Expr {
        kind: ExprKind::IfElse(
            Box::new(bin(BinOp::Gt, a.clone(), lit("0.0", ty))),
            Box::new(a),
            Box::new(min),
        ),
        ty,
    };
    body(ty, value)
}

#[test]
fn cuda_bodies_are_one_expression_over_the_operands() {
    let src = cuda::body(&relu_or_min(Ty::F32));
    assert_eq!(src, "((v_a > 0.0f) ? v_a : gk_min<float>(v_b, v_a))");
    // Integer division goes through the language's helper, which the module brings once.
    let div = body(
        Ty::I32,
        bin(BinOp::Div, local(0, Ty::I32), local(1, Ty::I32)),
    );
    assert_eq!(cuda::body(&div), "gk_div_i32(v_a, v_b)");
    let helpers = cuda::body_helpers(Ty::I32);
    assert!(helpers.contains("gk_div_i32(int a, int b)"), "{helpers}");
    assert!(helpers.contains("#ifndef GK_MIN_MAX"), "{helpers}");
    assert!(!cuda::body_helpers(Ty::F32).contains("gk_div"));
}

#[test]
fn wgsl_bodies_put_if_else_values_in_a_variable() {
    let (lines, value) = wgsl::body(&relu_or_min(Ty::F32));
    assert_eq!(value, "gk_t1");
    assert!(lines.contains("var gk_t1: f32;"), "{lines}");
    assert!(lines.contains("if ((v_a > 0.0f)) {"), "{lines}");
    assert!(lines.contains("gk_t1 = gk_min_f32(v_b, v_a);"), "{lines}");
    // A 64-bit float's min is the module's own, defined where the adapter has f64.
    let (lines, _) = wgsl::body(&relu_or_min(Ty::F64));
    assert!(lines.contains("gk_min_f64(v_b, v_a)"), "{lines}");
    let helpers = wgsl::body_helpers(Ty::F64);
    assert!(helpers.contains("fn gk_min_f64(") && helpers.contains("fn gk_rt_f64("));
    assert!(!wgsl::body_helpers(Ty::F32).contains("f64"));
}

/// The 8-bit integers are computed in 32 bits in WGSL and wrapped back after each
/// operation that may leave the type's range; shifts take the amount modulo 8.
#[test]
fn wgsl_wraps_8_bit_arithmetic_back_to_8_bits() {
    let (a, b) = (local(0, Ty::U8), local(1, Ty::U8));
    let (_, v) = wgsl::body(&body(Ty::U8, bin(BinOp::Add, a.clone(), b.clone())));
    assert_eq!(v, "((v_a + v_b) & 0xffu)");
    let (_, v) = wgsl::body(&body(Ty::U8, bin(BinOp::Shl, a.clone(), b.clone())));
    assert_eq!(v, "((v_a << (v_b & 7u)) & 0xffu)");
    let (_, v) = wgsl::body(&body(Ty::U8, bin(BinOp::BitAnd, a, b)));
    assert_eq!(
        v, "(v_a & v_b)",
        "a bit operation of 8-bit values stays in range"
    );
    let (a, b) = (local(0, Ty::I8), local(1, Ty::I8));
    let (_, v) = wgsl::body(&body(Ty::I8, bin(BinOp::Mul, a, b)));
    assert_eq!(v, "(((v_a * v_b) << 24u) >> 24u)");
}

/// The CPU twin's float min does not use `f32::min`: of two equal values the receiver wins,
/// as on the GPU targets.
#[test]
fn twin_min_of_floats_is_the_languages() {
    let k = Kernel {
        name: "k".into(),
        params: vec![Param {
            name: "x".into(),
            ty: Ty::F32,
            kind: ParamKind::Slice {
                mutable: true,
                array: 0,
            },
        }],
        shared: Vec::new(),
        locals: Vec::new(),
        body: vec![Stmt::Assign {
            place: Place::Index {
                arr: Arr::Param(0),
                idx: lit("0", Ty::Usize),
                proven: false,
            },
            op: None,
            value: Expr {
                kind: ExprKind::Math(Math::Min, vec![lit("0.0", Ty::F32), lit("-0.0", Ty::F32)]),
                ty: Ty::F32,
            },
        }],
        atomic: Vec::new(),
        ret: None,
        calls: Vec::new(),
        comptime: Vec::new(),
        reports: Vec::new(),
    };
    let src = twin::generate(&k);
    assert!(src.contains("is_nan()") && !src.contains(".min("), "{src}");
}

/// A kernel of one collective: `let s = op(a[0]);` over `ty`, then `a[0] = s`.
fn one_collective(op: Collective, ty: Ty) -> Kernel {
    let read = Expr {
        kind: ExprKind::Index {
            arr: Arr::Param(0),
            idx: Box::new(lit("0", Ty::Usize)),
            proven: false,
        },
        ty,
    };
    let mut k = Kernel {
        name: "k".into(),
        params: vec![Param {
            name: "a".into(),
            ty,
            kind: ParamKind::Slice {
                mutable: true,
                array: 0,
            },
        }],
        shared: Vec::new(),
        locals: vec![Local {
            name: "s".into(),
            ty,
            mutable: false,
            storage: Storage::Plain,
        }],
        body: vec![
            Stmt::Collective {
                local: 0,
                op,
                value: read,
                lane: op.takes_lane().then(|| lit("1", Ty::Usize)),
            },
            Stmt::Assign {
                place: Place::Index {
                    arr: Arr::Param(0),
                    idx: lit("0", Ty::Usize),
                    proven: false,
                },
                op: None,
                value: local(0, ty),
            },
        ],
        atomic: Vec::new(),
        ret: None,
        calls: Vec::new(),
        comptime: Vec::new(),
        reports: Vec::new(),
    };
    k.assign_storage();
    k
}

/// Reductions are warp-shuffle trees on CUDA and subgroup built-ins in WGSL; the twin keeps
/// a collective's result per thread; a kernel without collectives brings no warp helpers.
#[test]
fn collectives_are_warp_shuffles_and_subgroup_builtins() {
    let k = one_collective(Collective::Add, Ty::F32);
    assert_eq!(k.locals[0].storage, Storage::PerThread);
    let c = cuda::generate(&k, true);
    assert!(
        c.contains("__shfl_down_sync") && c.contains("gk_sg_add_f32"),
        "{c}"
    );
    let w = wgsl::generate(&k, true).unwrap();
    // A reduction reads no lane built-in, so it runs in blocks of any shape.
    assert!(
        w.contains("subgroupAdd(") && !w.contains("@builtin(subgroup_invocation_id)"),
        "{w}"
    );
    assert!(twin::generate(&k).contains("__pt_s[__w0 + __l]"));
    let c = cuda::generate(&one_collective(Collective::ExclusiveAdd, Ty::I64), true);
    assert!(
        c.contains("gk_sg_iadd_i64") && c.contains("__shfl_up_sync"),
        "{c}"
    );
    let w = wgsl::generate(&one_collective(Collective::ShuffleXor, Ty::U32), true).unwrap();
    assert!(
        w.contains("subgroupShuffle(") && w.contains("subgroupBallot(true)"),
        "{w}"
    );
    assert!(
        w.contains("@builtin(subgroup_invocation_id)") && w.contains("@builtin(subgroup_size)"),
        "{w}"
    );
    let plain = relu_or_min(Ty::F32);
    assert!(!cuda::body(&plain).contains("shfl"));
}
