//! The op table's bodies as expressions, for the backends that compile GPU source: each
//! reference body is run once over a symbolic value, which records the operations it is
//! given instead of computing them ([`UnaryOp::expr`], [`BinaryOp::expr`]). The CUDA and
//! WGSL backends render the recorded [`OpExpr`] in their language, in the same order of
//! operations as the reference, so that an element-wise op is written once, in the table.
//!
//! A body may use what [`Arith`] and [`Real`] offer; it branches only through
//! [`Arith::if_gt`] (a comparison of symbolic values has no answer to give: the tracer
//! refuses it, and the unit tests trace every entry).

use std::cell::RefCell;

use crate::element::{Arith, Real};

use super::{BinaryOp, UnaryOp};

/// A function of one value in an op's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fn1 {
    /// `-x` (wrapping for integers).
    Neg,
    /// `|x|` (wrapping for integers).
    Abs,
    /// Square root.
    Sqrt,
    /// `e^x`.
    Exp,
    /// `ln(x)`.
    Ln,
    /// `ln(1 + x)`.
    Ln1p,
    /// `tanh(x)`.
    Tanh,
}

/// A function of two values in an op's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fn2 {
    /// `a + b` (wrapping for integers).
    Add,
    /// `a - b` (wrapping for integers).
    Sub,
    /// `a * b` (wrapping for integers).
    Mul,
    /// `a / b` (integers: 0 for a division by zero, `MIN / -1 == MIN`).
    Div,
    /// The smaller; a NaN loses to a number.
    Min,
    /// The larger; a NaN loses to a number.
    Max,
    /// `a^b` (C's `pow`).
    Powf,
}

/// An element-wise op's body as an expression over its operands, in the compute type.
#[derive(Debug, Clone, PartialEq)]
pub enum OpExpr {
    /// An operand: `x` of a unary op, `a` or `b` of a binary one.
    Operand(&'static str),
    /// A constant, as the body wrote it (rounded to the compute type where it is used).
    Const(f64),
    /// A function of one value.
    Call1(Fn1, Box<OpExpr>),
    /// A function of two values.
    Call2(Fn2, Box<OpExpr>, Box<OpExpr>),
    /// `then` where `lhs > rhs`, else `otherwise` (a NaN takes `otherwise`).
    IfGt {
        /// Compared ...
        lhs: Box<OpExpr>,
        /// ... with this.
        rhs: Box<OpExpr>,
        /// The value where `lhs > rhs`.
        then: Box<OpExpr>,
        /// The value otherwise.
        otherwise: Box<OpExpr>,
    },
}

impl UnaryOp {
    /// The op's body as an expression over the operand `x`, traced from its reference.
    pub fn expr(self) -> OpExpr {
        trace(|| self.apply_real(Sym::operand("x")))
    }
}

impl BinaryOp {
    /// The op's body as an expression over the operands `a` and `b`, traced from its
    /// reference.
    pub fn expr(self) -> OpExpr {
        trace(|| self.apply_real(Sym::operand("a"), Sym::operand("b")))
    }
}

thread_local! {
    /// The expressions recorded by the trace in progress on this thread.
    static NODES: RefCell<Vec<OpExpr>> = const { RefCell::new(Vec::new()) };
}

/// Runs `body` over symbolic values and returns the expression it built.
fn trace(body: impl FnOnce() -> Sym) -> OpExpr {
    let previous = NODES.with(|n| std::mem::take(&mut *n.borrow_mut()));
    let result = body().get();
    NODES.with(|n| *n.borrow_mut() = previous);
    result
}

/// A value of a traced body: a constant, or an expression recorded on this thread.
#[derive(Debug, Clone, Copy)]
enum Sym {
    Const(f64),
    Node(usize),
}

impl Sym {
    fn operand(name: &'static str) -> Sym {
        Sym::push(OpExpr::Operand(name))
    }

    fn push(e: OpExpr) -> Sym {
        NODES.with(|n| {
            let mut n = n.borrow_mut();
            n.push(e);
            Sym::Node(n.len() - 1)
        })
    }

    fn get(self) -> OpExpr {
        match self {
            Sym::Const(v) => OpExpr::Const(v),
            Sym::Node(i) => NODES.with(|n| n.borrow()[i].clone()),
        }
    }

    fn call1(self, f: Fn1) -> Sym {
        Sym::push(OpExpr::Call1(f, Box::new(self.get())))
    }

    fn call2(self, f: Fn2, rhs: Sym) -> Sym {
        Sym::push(OpExpr::Call2(f, Box::new(self.get()), Box::new(rhs.get())))
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
        self.call2(Fn2::Add, rhs)
    }
    fn sub(self, rhs: Sym) -> Sym {
        self.call2(Fn2::Sub, rhs)
    }
    fn mul(self, rhs: Sym) -> Sym {
        self.call2(Fn2::Mul, rhs)
    }
    fn div(self, rhs: Sym) -> Sym {
        self.call2(Fn2::Div, rhs)
    }
    fn neg(self) -> Sym {
        self.call1(Fn1::Neg)
    }
    fn abs(self) -> Sym {
        self.call1(Fn1::Abs)
    }
    fn is_nan(self) -> bool {
        panic!("{NO_COMPARISON}")
    }
    fn min(self, rhs: Sym) -> Sym {
        self.call2(Fn2::Min, rhs)
    }
    fn max(self, rhs: Sym) -> Sym {
        self.call2(Fn2::Max, rhs)
    }
    fn if_gt(self, rhs: Sym, then: Sym, otherwise: Sym) -> Sym {
        Sym::push(OpExpr::IfGt {
            lhs: Box::new(self.get()),
            rhs: Box::new(rhs.get()),
            then: Box::new(then.get()),
            otherwise: Box::new(otherwise.get()),
        })
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
        self.call1(Fn1::Sqrt)
    }
    fn exp(self) -> Sym {
        self.call1(Fn1::Exp)
    }
    fn ln(self) -> Sym {
        self.call1(Fn1::Ln)
    }
    fn ln_1p(self) -> Sym {
        self.call1(Fn1::Ln1p)
    }
    fn tanh(self) -> Sym {
        self.call1(Fn1::Tanh)
    }
    fn powf(self, e: Sym) -> Sym {
        self.call2(Fn2::Powf, e)
    }
}

impl OpExpr {
    /// Evaluates the expression in `C` with the reference's functions (what the traced body
    /// computes), `operand` giving each operand's value.
    pub fn eval<C: Real>(&self, operand: &impl Fn(&str) -> C) -> C {
        match self {
            OpExpr::Operand(name) => operand(name),
            OpExpr::Const(v) => C::from_f64(*v),
            OpExpr::Call1(f, a) => {
                let a = a.eval(operand);
                match f {
                    Fn1::Neg => a.neg(),
                    Fn1::Abs => a.abs(),
                    Fn1::Sqrt => a.sqrt(),
                    Fn1::Exp => a.exp(),
                    Fn1::Ln => a.ln(),
                    Fn1::Ln1p => a.ln_1p(),
                    Fn1::Tanh => a.tanh(),
                }
            }
            OpExpr::Call2(f, a, b) => {
                let (a, b) = (a.eval(operand), b.eval(operand));
                match f {
                    Fn2::Add => a.add(b),
                    Fn2::Sub => a.sub(b),
                    Fn2::Mul => a.mul(b),
                    Fn2::Div => a.div(b),
                    Fn2::Min => a.min(b),
                    Fn2::Max => a.max(b),
                    Fn2::Powf => a.powf(b),
                }
            }
            OpExpr::IfGt {
                lhs,
                rhs,
                then,
                otherwise,
            } => lhs.eval(operand).if_gt(
                rhs.eval(operand),
                then.eval(operand),
                otherwise.eval(operand),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every entry traces, and its expression computes what its reference does, bit for
    /// bit, over values of every kind (so the GPU code rendered from it is the reference's).
    /// A body that compares or converts traced values cannot be traced: the tracer stops
    /// with a message saying what to use instead, rather than tracing one branch.
    #[test]
    #[should_panic(expected = "compares values directly")]
    fn a_body_that_tests_equality_is_refused() {
        trace(|| {
            let x = Sym::operand("x");
            if x == Sym::ONE {
                x
            } else {
                Sym::ONE
            }
        });
    }

    #[test]
    #[should_panic(expected = "compares values directly")]
    fn a_body_that_orders_values_is_refused() {
        trace(|| {
            let x = Sym::operand("x");
            if x < Sym::ONE {
                x
            } else {
                Sym::ONE
            }
        });
    }

    #[test]
    #[should_panic(expected = "compares values directly")]
    fn a_body_that_tests_for_nan_is_refused() {
        trace(|| {
            let x = Sym::operand("x");
            if x.is_nan() {
                x
            } else {
                Sym::ONE
            }
        });
    }

    #[test]
    #[should_panic(expected = "converts a traced value to f64")]
    fn a_body_that_leaves_the_trace_is_refused() {
        trace(|| Sym::from_f64(Sym::operand("x").to_f64() + 1.0));
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
            let e = op.expr();
            for &x in &values {
                let want = op.apply_real(x);
                let got = e.eval(&|_| x);
                assert!(same(got, want), "{op:?}({x}): {got} vs {want}: {e:?}");
                let (want, got) = (op.apply_real(x as f32), e.eval(&|_| x as f32));
                assert!(same(got.into(), want.into()), "{op:?}({x}) in f32");
            }
        }
        for &op in BinaryOp::ALL {
            let e = op.expr();
            for &a in &values {
                for &b in &values {
                    let want = op.apply_real(a, b);
                    let got = e.eval(&|n| if n == "a" { a } else { b });
                    assert!(same(got, want), "{op:?}({a}, {b}): {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn bodies_trace_to_the_operations_they_call() {
        let x = || Box::new(OpExpr::Operand("x"));
        assert_eq!(UnaryOp::Square.expr(), OpExpr::Call2(Fn2::Mul, x(), x()));
        assert_eq!(
            UnaryOp::Relu.expr(),
            OpExpr::IfGt {
                lhs: x(),
                rhs: Box::new(OpExpr::Const(0.0)),
                then: x(),
                otherwise: Box::new(OpExpr::Const(0.0)),
            }
        );
        assert_eq!(
            BinaryOp::Pow.expr(),
            OpExpr::Call2(
                Fn2::Powf,
                Box::new(OpExpr::Operand("a")),
                Box::new(OpExpr::Operand("b"))
            )
        );
    }
}
