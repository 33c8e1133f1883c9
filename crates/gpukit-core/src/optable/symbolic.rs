//! The op table's bodies as kernel-language expressions, for the backends that compile GPU
//! source: each reference body is run once over a symbolic value, which records the
//! operations it is given instead of computing them ([`UnaryOp::body`],
//! [`BinaryOp::body`]), as an expression of gpukit-kernel's IR over the compute type asked
//! for. The CUDA and WGSL backends render it with the kernel language's emitters, in the same
//! order of operations as the reference, so that an element-wise op is written once, in the
//! table.
//!
//! A body may use what [`Arith`] and [`Real`] offer; it branches only through
//! [`Arith::if_gt`] (a comparison of symbolic values has no answer to give: the tracer
//! refuses it, and the unit tests trace every entry). The reference's integer rules become
//! expressions where the kernel language's differ: the negation of an unsigned value wraps
//! and its absolute value is itself. (A division by zero is 0 in both.)

use std::cell::{Cell, RefCell};

use gpukit_kernel::ir::{BinOp, Body, Expr, ExprKind, Local, Math, Storage, Ty, UnOp};

use crate::element::{Arith, Real};

use super::{BinaryOp, UnaryOp};

impl UnaryOp {
    /// The op's body over the operand `x` of the compute type `ty`, traced from its
    /// reference.
    pub fn body(self, ty: Ty) -> Body {
        trace(ty, &["x"], || self.apply_real(Sym::operand(0)))
    }
}

impl BinaryOp {
    /// The op's body over the operands `a` and `b` of the compute type `ty`, traced from its
    /// reference.
    pub fn body(self, ty: Ty) -> Body {
        trace(ty, &["a", "b"], || {
            self.apply_real(Sym::operand(0), Sym::operand(1))
        })
    }
}

thread_local! {
    /// The expressions recorded by the trace in progress on this thread.
    static NODES: RefCell<Vec<Expr>> = const { RefCell::new(Vec::new()) };
    /// The compute type of the trace in progress.
    static TY: Cell<Ty> = const { Cell::new(Ty::F32) };
}

/// Runs `body` over symbolic operands named `operands`, of type `ty`, and returns the
/// expression it built.
fn trace(ty: Ty, operands: &[&str], body: impl FnOnce() -> Sym) -> Body {
    let previous = NODES.with(|n| std::mem::take(&mut *n.borrow_mut()));
    let previous_ty = TY.with(|t| t.replace(ty));
    let value = body().get();
    NODES.with(|n| *n.borrow_mut() = previous);
    TY.with(|t| t.set(previous_ty));
    Body {
        operands: operands
            .iter()
            .map(|name| Local {
                name: (*name).to_owned(),
                ty,
                mutable: false,
                storage: Storage::Plain,
            })
            .collect(),
        value,
    }
}

/// The compute type of the trace in progress.
fn ty() -> Ty {
    TY.with(Cell::get)
}

/// `v` as a literal of type `ty`, converted as the reference's `from_f64` converts it (to
/// `f32` through `f64`; integers saturate).
fn literal(v: f64, ty: Ty) -> Expr {
    let text = match ty {
        Ty::F32 => format!("{:?}", v as f32),
        Ty::F64 => format!("{v:?}"),
        Ty::I8 => (v as i8).to_string(),
        Ty::U8 => (v as u8).to_string(),
        Ty::I32 => (v as i32).to_string(),
        Ty::U32 => (v as u32).to_string(),
        Ty::I64 => (v as i64).to_string(),
        _ => (v as u64).to_string(),
    };
    Expr {
        kind: ExprKind::Lit(text),
        ty,
    }
}

fn binary(op: BinOp, a: Expr, b: Expr) -> Expr {
    let ty = if op.is_comparison() { Ty::Bool } else { a.ty };
    Expr {
        kind: ExprKind::Binary(op, Box::new(a), Box::new(b)),
        ty,
    }
}

fn if_else(cond: Expr, then: Expr, otherwise: Expr) -> Expr {
    let ty = then.ty;
    Expr {
        kind: ExprKind::IfElse(Box::new(cond), Box::new(then), Box::new(otherwise)),
        ty,
    }
}

fn math(m: Math, args: Vec<Expr>) -> Expr {
    let ty = args[0].ty;
    Expr {
        kind: ExprKind::Math(m, args),
        ty,
    }
}

/// A value of a traced body: a constant, or an expression recorded on this thread.
#[derive(Debug, Clone, Copy)]
enum Sym {
    Const(f64),
    Node(usize),
}

impl Sym {
    fn operand(i: usize) -> Sym {
        Sym::push(Expr {
            kind: ExprKind::Local(i),
            ty: ty(),
        })
    }

    fn push(e: Expr) -> Sym {
        NODES.with(|n| {
            let mut n = n.borrow_mut();
            n.push(e);
            Sym::Node(n.len() - 1)
        })
    }

    fn get(self) -> Expr {
        match self {
            Sym::Const(v) => literal(v, ty()),
            Sym::Node(i) => NODES.with(|n| n.borrow()[i].clone()),
        }
    }

    fn binary(self, op: BinOp, rhs: Sym) -> Sym {
        Sym::push(binary(op, self.get(), rhs.get()))
    }

    fn math(self, m: Math, rest: &[Sym]) -> Sym {
        let mut args = vec![self.get()];
        args.extend(rest.iter().map(|s| s.get()));
        Sym::push(math(m, args))
    }
}

/// What the tracer says when a body compares symbolic values directly.
const NO_COMPARISON: &str = "an op table body compares values directly; branch with \
                             `Arith::if_gt` so that the body can be traced";

impl PartialEq for Sym {
    fn eq(&self, _: &Sym) -> bool {
        panic!("{NO_COMPARISON}")
    }
}

impl PartialOrd for Sym {
    fn partial_cmp(&self, _: &Sym) -> Option<std::cmp::Ordering> {
        panic!("{NO_COMPARISON}")
    }
}

impl Arith for Sym {
    const ZERO: Sym = Sym::Const(0.0);
    const ONE: Sym = Sym::Const(1.0);
    fn add(self, rhs: Sym) -> Sym {
        self.binary(BinOp::Add, rhs)
    }
    fn sub(self, rhs: Sym) -> Sym {
        self.binary(BinOp::Sub, rhs)
    }
    fn mul(self, rhs: Sym) -> Sym {
        self.binary(BinOp::Mul, rhs)
    }
    fn div(self, rhs: Sym) -> Sym {
        // The kernel language's integer division is the reference's: `x / 0 == 0`.
        self.binary(BinOp::Div, rhs)
    }
    fn neg(self) -> Sym {
        let t = ty();
        if t.is_int() && !t.is_signed() {
            return Sym::ZERO.binary(BinOp::Sub, self);
        }
        let a = self.get();
        Sym::push(Expr {
            kind: ExprKind::Unary(UnOp::Neg, Box::new(a)),
            ty: t,
        })
    }
    fn abs(self) -> Sym {
        let t = ty();
        if t.is_int() && !t.is_signed() {
            return self;
        }
        self.math(Math::Abs, &[])
    }
    fn is_nan(self) -> bool {
        panic!("{NO_COMPARISON}")
    }
    fn min(self, rhs: Sym) -> Sym {
        self.math(Math::Min, &[rhs])
    }
    fn max(self, rhs: Sym) -> Sym {
        self.math(Math::Max, &[rhs])
    }
    fn if_gt(self, rhs: Sym, then: Sym, otherwise: Sym) -> Sym {
        let cond = binary(BinOp::Gt, self.get(), rhs.get());
        Sym::push(if_else(cond, then.get(), otherwise.get()))
    }
}

impl Real for Sym {
    fn from_f64(v: f64) -> Sym {
        Sym::Const(v)
    }
    fn to_f64(self) -> f64 {
        panic!("an op table body converts a traced value to f64; it cannot be traced")
    }
    fn sqrt(self) -> Sym {
        self.math(Math::Sqrt, &[])
    }
    fn exp(self) -> Sym {
        self.math(Math::Exp, &[])
    }
    fn ln(self) -> Sym {
        self.math(Math::Ln, &[])
    }
    fn ln_1p(self) -> Sym {
        self.math(Math::Ln1p, &[])
    }
    fn tanh(self) -> Sym {
        self.math(Math::Tanh, &[])
    }
    fn powf(self, e: Sym) -> Sym {
        self.math(Math::Powf, &[e])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every entry traces, and its expression computes what its reference does, bit for
    /// bit, over values of every kind (so the GPU code rendered from it is the reference's).
    /// A body that compares or converts traced values cannot be traced: the tracer stops
    /// with a message saying what to use instead, rather than tracing one branch.
    /// What the expression computes in `C` with the reference's functions, `operands`
    /// giving each operand's value: what the emitters' code computes.
    fn eval<C: Real>(e: &Expr, operands: &[C]) -> C {
        match &e.kind {
            ExprKind::Lit(text) => C::from_f64(text.parse().expect("a number")),
            ExprKind::Local(i) => operands[*i],
            ExprKind::Unary(UnOp::Neg, a) => eval(a, operands).neg(),
            ExprKind::Binary(op, a, b) => {
                let (a, b) = (eval(a, operands), eval(b, operands));
                match op {
                    BinOp::Add => a.add(b),
                    BinOp::Sub => a.sub(b),
                    BinOp::Mul => a.mul(b),
                    BinOp::Div => a.div(b),
                    other => panic!("{other:?} is not a value"),
                }
            }
            ExprKind::IfElse(c, a, b) => {
                let ExprKind::Binary(BinOp::Gt, l, r) = &c.kind else {
                    panic!("a float body branches on `>` only: {c:?}")
                };
                eval(l, operands).if_gt(eval(r, operands), eval(a, operands), eval(b, operands))
            }
            ExprKind::Math(m, args) => {
                let v: Vec<C> = args.iter().map(|a| eval(a, operands)).collect();
                match m {
                    Math::Abs => v[0].abs(),
                    Math::Min => v[0].min(v[1]),
                    Math::Max => v[0].max(v[1]),
                    Math::Sqrt => v[0].sqrt(),
                    Math::Exp => v[0].exp(),
                    Math::Ln => v[0].ln(),
                    Math::Ln1p => v[0].ln_1p(),
                    Math::Tanh => v[0].tanh(),
                    Math::Powf => v[0].powf(v[1]),
                    other => panic!("the tracer records no {other:?}"),
                }
            }
            other => panic!("the tracer records no {other:?}"),
        }
    }

    fn trace_x(body: impl FnOnce(Sym) -> Sym) -> Body {
        trace(Ty::F32, &["x"], || body(Sym::operand(0)))
    }

    #[test]
    #[should_panic(expected = "compares values directly")]
    fn a_body_that_tests_equality_is_refused() {
        trace_x(|x| if x == Sym::ONE { x } else { Sym::ONE });
    }

    #[test]
    #[should_panic(expected = "compares values directly")]
    fn a_body_that_orders_values_is_refused() {
        trace_x(|x| if x < Sym::ONE { x } else { Sym::ONE });
    }

    #[test]
    #[should_panic(expected = "compares values directly")]
    fn a_body_that_tests_for_nan_is_refused() {
        trace_x(|x| if x.is_nan() { x } else { Sym::ONE });
    }

    #[test]
    #[should_panic(expected = "converts a traced value to f64")]
    fn a_body_that_leaves_the_trace_is_refused() {
        trace_x(|x| Sym::from_f64(x.to_f64() + 1.0));
    }

    #[test]
    fn every_body_traces_to_its_reference() {
        let values: Vec<f64> = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -2.5,
            3.0,
            -3.0,
            7.25,
            -40.0,
            1e-30,
            -1e-30,
            1e30,
            88.0,
            -104.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ]
        .to_vec();
        let same = |a: f64, b: f64| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        for &op in UnaryOp::ALL {
            let (e64, e32) = (op.body(Ty::F64).value, op.body(Ty::F32).value);
            for &x in &values {
                let want = op.apply_real(x);
                let got = eval(&e64, &[x]);
                assert!(same(got, want), "{op:?}({x}): {got} vs {want}: {e64:?}");
                let (want, got) = (op.apply_real(x as f32), eval(&e32, &[x as f32]));
                assert!(same(got.into(), want.into()), "{op:?}({x}) in f32");
            }
        }
        for &op in BinaryOp::ALL {
            let e = op.body(Ty::F64).value;
            for &a in &values {
                for &b in &values {
                    let want = op.apply_real(a, b);
                    let got = eval(&e, &[a, b]);
                    assert!(same(got, want), "{op:?}({a}, {b}): {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn bodies_trace_to_the_operations_they_call() {
        let text = |e: &Expr| format!("{:?}", e.kind);
        let x = Expr {
            kind: ExprKind::Local(0),
            ty: Ty::F32,
        };
        let square = UnaryOp::Square.body(Ty::F32).value;
        assert_eq!(
            text(&square),
            text(&binary(BinOp::Mul, x.clone(), x.clone()))
        );
        let zero = literal(0.0, Ty::F32);
        let relu = UnaryOp::Relu.body(Ty::F32).value;
        let want = if_else(binary(BinOp::Gt, x.clone(), zero.clone()), x, zero);
        assert_eq!(text(&relu), text(&want));
        let pow = BinaryOp::Pow.body(Ty::F64);
        assert!(matches!(pow.value.kind, ExprKind::Math(Math::Powf, _)));
        assert_eq!(pow.value.ty, Ty::F64);
        assert_eq!(pow.operands.len(), 2);
    }

    /// The integer rules of the reference that the kernel language does not share become
    /// expressions: an unsigned value's negation wraps and its absolute value is itself. A
    /// division is the language's own, whose `x / 0` is the reference's 0.
    #[test]
    fn integer_bodies_spell_out_the_references_rules() {
        let div = BinaryOp::Div.body(Ty::I32).value;
        assert!(
            matches!(&div.kind, ExprKind::Binary(BinOp::Div, ..)),
            "{div:?}"
        );
        let neg = UnaryOp::Neg.body(Ty::U32).value;
        assert!(
            matches!(neg.kind, ExprKind::Binary(BinOp::Sub, ..)),
            "{neg:?}"
        );
        let abs = UnaryOp::Abs.body(Ty::U8).value;
        assert!(matches!(abs.kind, ExprKind::Local(0)), "{abs:?}");
        let abs = UnaryOp::Abs.body(Ty::I8).value;
        assert!(matches!(abs.kind, ExprKind::Math(Math::Abs, _)), "{abs:?}");
    }
}
