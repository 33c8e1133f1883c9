//! Which array accesses are in bounds whatever the inputs: the checked code leaves their
//! checks out ([`Kernel::prove_bounds`]).
//!
//! The proof follows the guards the code already has. Facts hold of values that cannot
//! change (locals never assigned after their `let`, loop variables, thread coordinates):
//!
//! - inside `if a < b { .. }` (and `a <= b`, `b > a`, `b >= a`, joined by `&&`), and after
//!   `if a >= b { return; }` (or `break`, `continue`) for the rest of its block;
//! - inside `for v in s..e`: `s <= v < e`;
//! - `let n = x.len()`, or `.min(..)` of lengths: `n` is at most each of those lengths.
//!
//! An index is proven when it is a value below its slice's length by those facts, or, for
//! a shared array of a constant size, when its range (numbers, computed without wrapping:
//! any operation that could wrap on some target gives no range) lies inside the array.
//! `thread_*()` is below 1024 (64 on z), CUDA's and every Vulkan device's limit, which a
//! launch checks.

use std::collections::HashMap;

use crate::ir::*;

/// A value facts can be about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Local(usize),
    Coord(Coord, usize),
}

/// What is known at a point of the code.
#[derive(Debug, Clone, Default)]
struct Facts {
    /// Inclusive numeric bounds.
    range: HashMap<Key, (i128, i128)>,
    /// The arrays whose length the value is below.
    below: HashMap<Key, Vec<Arr>>,
    /// The arrays whose length the value is at most.
    upto: HashMap<Key, Vec<Arr>>,
}

impl Kernel {
    /// Marks the accesses (reads and writes; atomics keep their checks) whose index is in
    /// bounds whatever the inputs, by the facts the module docs list.
    pub fn prove_bounds(&mut self) {
        let mut body = std::mem::take(&mut self.body);
        Prover { k: self }.stmts(&mut body, &mut Facts::default());
        self.body = body;
    }
}

struct Prover<'k> {
    k: &'k Kernel,
}

/// The values a type holds; a `usize` is 32 bits in WGSL, so a result above `u32::MAX` may
/// have wrapped there.
fn type_range(t: Ty) -> (i128, i128) {
    match t {
        Ty::I8 => (i8::MIN.into(), i8::MAX.into()),
        Ty::U8 => (0, u8::MAX.into()),
        Ty::I32 => (i32::MIN.into(), i32::MAX.into()),
        Ty::U32 | Ty::Usize => (0, u32::MAX.into()),
        Ty::I64 => (i64::MIN.into(), i64::MAX.into()),
        Ty::U64 => (0, u64::MAX.into()),
        _ => (i128::MIN, i128::MAX),
    }
}

/// Nothing known of a value: wider than any type, so that no proof that needs a bound
/// succeeds on it.
const UNKNOWN: (i128, i128) = (i128::MIN / 4, i128::MAX / 4);

/// `r` where it lies inside the type (no operation on the way wrapped), else unknown.
fn fit(t: Ty, r: (i128, i128)) -> (i128, i128) {
    let (lo, hi) = type_range(t);
    if r.0 >= lo && r.1 <= hi && r.0 <= r.1 {
        r
    } else {
        UNKNOWN
    }
}

/// Whether the statements always leave their block (the last one returns, breaks or
/// continues).
fn exits(stmts: &[Stmt]) -> bool {
    matches!(
        stmts.last(),
        Some(Stmt::Return(_) | Stmt::Break | Stmt::Continue)
    )
}

impl Prover<'_> {
    fn stmts(&self, stmts: &mut [Stmt], facts: &mut Facts) {
        for s in stmts.iter_mut() {
            self.stmt(s, facts);
        }
    }

    fn stmt(&self, s: &mut Stmt, facts: &mut Facts) {
        match s {
            Stmt::Let { local, init } => {
                self.expr(init, facts);
                if !self.k.locals[*local].mutable {
                    let key = Key::Local(*local);
                    let r = self.range(init, facts);
                    facts.range.insert(key, r);
                    let upto = self.lengths(init, facts);
                    if !upto.is_empty() {
                        facts.upto.insert(key, upto);
                    }
                    let below = self.below_of(init, facts);
                    if !below.is_empty() {
                        facts.below.insert(key, below);
                    }
                }
            }
            Stmt::Assign { place, value, .. } => {
                self.expr(value, facts);
                if let Place::Index { arr, idx, proven } = place {
                    self.expr(idx, facts);
                    *proven = self.proves(*arr, idx, facts);
                }
            }
            Stmt::Expr(e) | Stmt::Return(Some(e)) => self.expr(e, facts),
            Stmt::Report { index, len, .. } => {
                self.expr(index, facts);
                self.expr(len, facts);
            }
            Stmt::Collective { value, lane, .. } => {
                self.expr(value, facts);
                if let Some(l) = lane {
                    self.expr(l, facts);
                }
            }
            Stmt::Block(b) | Stmt::Loop(b) => self.stmts(b, &mut facts.clone()),
            Stmt::If { cond, then, els } => {
                self.expr(cond, facts);
                let mut inside = facts.clone();
                self.assume(cond, true, &mut inside);
                self.stmts(then, &mut inside);
                let mut other = facts.clone();
                self.assume(cond, false, &mut other);
                self.stmts(els, &mut other);
                // What the branch that goes on knows holds after the `if`.
                match (exits(then), exits(els)) {
                    (true, false) => self.assume(cond, false, facts),
                    (false, true) => self.assume(cond, true, facts),
                    _ => {}
                }
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                self.expr(start, facts);
                self.expr(end, facts);
                if let Some(st) = step {
                    self.expr(st, facts);
                }
                let mut inside = facts.clone();
                let key = Key::Local(*var);
                let (s, e) = (self.range(start, facts), self.range(end, facts));
                let t = self.k.locals[*var].ty;
                // `s <= v < e` (an unknown bound gives an unknown range).
                inside.range.insert(key, fit(t, (s.0, (e.1 - 1).max(s.0))));
                let mut below = self.lengths(end, facts);
                below.extend(self.below_of(end, facts));
                if !below.is_empty() {
                    inside.below.insert(key, below);
                }
                self.stmts(body, &mut inside);
            }
            Stmt::While { cond, body } => {
                self.expr(cond, facts);
                self.stmts(body, &mut facts.clone());
            }
            Stmt::Break | Stmt::Continue | Stmt::Return(None) | Stmt::Barrier => {}
        }
    }

    /// Proves the reads in `e` (and its subexpressions) that the facts allow.
    fn expr(&self, e: &mut Expr, facts: &Facts) {
        match &mut e.kind {
            ExprKind::Index { arr, idx, proven } => {
                self.expr(idx, facts);
                *proven = self.proves(*arr, idx, facts);
            }
            ExprKind::Unary(_, a) | ExprKind::Cast(a) | ExprKind::RoundOdd(a) => {
                self.expr(a, facts)
            }
            ExprKind::Binary(op, a, b) => {
                self.expr(a, facts);
                // `a && b` evaluates `b` only where `a` holds.
                if *op == BinOp::And {
                    let mut inside = facts.clone();
                    self.assume(a, true, &mut inside);
                    self.expr(b, &inside);
                } else if *op == BinOp::Or {
                    let mut inside = facts.clone();
                    self.assume(a, false, &mut inside);
                    self.expr(b, &inside);
                } else {
                    self.expr(b, facts);
                }
            }
            ExprKind::IfElse(c, a, b) => {
                self.expr(c, facts);
                let mut inside = facts.clone();
                self.assume(c, true, &mut inside);
                self.expr(a, &inside);
                let mut other = facts.clone();
                self.assume(c, false, &mut other);
                self.expr(b, &other);
            }
            ExprKind::Math(_, args) | ExprKind::Call(_, args) => {
                for a in args {
                    self.expr(a, facts);
                }
            }
            ExprKind::Atomic { idx, args, .. } => {
                self.expr(idx, facts);
                for a in args {
                    self.expr(a, facts);
                }
            }
            ExprKind::Lit(_)
            | ExprKind::Local(_)
            | ExprKind::Param(_)
            | ExprKind::Len(_)
            | ExprKind::Coord(..)
            | ExprKind::Lane(_)
            | ExprKind::Comptime(_) => {}
        }
    }

    /// Whether `idx` is in bounds of `arr` by the facts.
    fn proves(&self, arr: Arr, idx: &Expr, facts: &Facts) -> bool {
        if self.below_of(idx, facts).contains(&arr) {
            return true;
        }
        match arr {
            Arr::Shared(i) => match self.k.shared[i].len {
                Extent::Fixed(n) => {
                    let (lo, hi) = self.range(idx, facts);
                    lo >= 0 && hi < i128::from(n)
                }
                Extent::Comptime(_) => false,
            },
            Arr::Param(_) => false,
        }
    }

    /// The value `e` stands for, when facts can be about it.
    fn key(&self, e: &Expr) -> Option<Key> {
        match &e.kind {
            ExprKind::Local(l) if !self.k.locals[*l].mutable => Some(Key::Local(*l)),
            ExprKind::Coord(c, axis) if matches!(c, Coord::Global | Coord::Thread) => {
                Some(Key::Coord(*c, *axis))
            }
            _ => None,
        }
    }

    /// The arrays whose length `e` is below.
    fn below_of(&self, e: &Expr, facts: &Facts) -> Vec<Arr> {
        self.key(e)
            .and_then(|k| facts.below.get(&k).cloned())
            .unwrap_or_default()
    }

    /// The arrays whose length `e` is at most: a length, a value known to be at most one, or
    /// the least of such values.
    fn lengths(&self, e: &Expr, facts: &Facts) -> Vec<Arr> {
        match &e.kind {
            ExprKind::Len(a) => vec![*a],
            ExprKind::Math(Math::Min, args) if args.len() == 2 => {
                let mut v = self.lengths(&args[0], facts);
                v.extend(self.lengths(&args[1], facts));
                v
            }
            _ => self
                .key(e)
                .and_then(|k| facts.upto.get(&k).cloned())
                .unwrap_or_default(),
        }
    }

    /// Adds to `facts` what `cond` being `holds` tells.
    fn assume(&self, cond: &Expr, holds: bool, facts: &mut Facts) {
        match &cond.kind {
            ExprKind::Unary(UnOp::Not, a) => self.assume(a, !holds, facts),
            ExprKind::Binary(BinOp::And, a, b) if holds => {
                self.assume(a, true, facts);
                self.assume(b, true, facts);
            }
            ExprKind::Binary(BinOp::Or, a, b) if !holds => {
                self.assume(a, false, facts);
                self.assume(b, false, facts);
            }
            ExprKind::Binary(op, a, b) if a.ty.is_int() => {
                // As `x < y` (strict) or `x <= y`.
                let (x, y, strict) = match (op, holds) {
                    (BinOp::Lt, true) | (BinOp::Ge, false) => (a, b, true),
                    (BinOp::Le, true) | (BinOp::Gt, false) => (a, b, false),
                    (BinOp::Gt, true) | (BinOp::Le, false) => (b, a, true),
                    (BinOp::Ge, true) | (BinOp::Lt, false) => (b, a, false),
                    _ => return,
                };
                self.less(x, y, strict, facts);
            }
            _ => {}
        }
    }

    /// Adds `x < y` (`strict`) or `x <= y`.
    fn less(&self, x: &Expr, y: &Expr, strict: bool, facts: &mut Facts) {
        let (rx, ry) = (self.range(x, facts), self.range(y, facts));
        let d = i128::from(strict);
        if let Some(kx) = self.key(x) {
            let hi = rx.1.min(ry.1.saturating_sub(d));
            facts.range.insert(kx, (rx.0, hi.max(rx.0)));
            if strict {
                let mut below = self.lengths(y, facts);
                below.extend(self.below_of(y, facts));
                if !below.is_empty() {
                    facts.below.entry(kx).or_default().extend(below);
                }
            } else {
                let below = self.below_of(y, facts);
                if !below.is_empty() {
                    facts.below.entry(kx).or_default().extend(below);
                }
                let upto = self.lengths(y, facts);
                if !upto.is_empty() {
                    facts.upto.entry(kx).or_default().extend(upto);
                }
            }
        }
        if let Some(ky) = self.key(y) {
            let lo = ry.0.max(rx.0.saturating_add(d));
            facts.range.insert(ky, (lo.min(ry.1), ry.1));
        }
    }

    /// The values `e` may take, as numbers without wrapping (unknown where it may wrap).
    fn range(&self, e: &Expr, facts: &Facts) -> (i128, i128) {
        let t = e.ty;
        if !t.is_int() {
            return UNKNOWN;
        }
        if let Some(r) = self.key(e).and_then(|k| facts.range.get(&k)) {
            return *r;
        }
        match &e.kind {
            ExprKind::Lit(text) => match text.replace('_', "").parse::<i128>() {
                Ok(v) => fit(t, (v, v)),
                Err(_) => UNKNOWN,
            },
            ExprKind::Coord(Coord::Thread, axis) => (0, if *axis == 2 { 63 } else { 1023 }),
            ExprKind::Coord(Coord::BlockDim, axis) => (1, if *axis == 2 { 64 } else { 1024 }),
            // Any value of its type (a signed argument may be negative); a `usize` (a
            // length, a coordinate) may pass `u32::MAX` on a 64-bit target, so its upper
            // bound, as a 64-bit value's, is unknown.
            ExprKind::Coord(..) | ExprKind::Len(_) | ExprKind::Param(_) => {
                let (lo, hi) = type_range(t);
                let wide = matches!(t, Ty::Usize | Ty::U64 | Ty::I64);
                (lo, if wide { UNKNOWN.1 } else { hi })
            }
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (self.range(a, facts), self.range(b, facts));
                let r = match op {
                    BinOp::Add => (x.0 + y.0, x.1 + y.1),
                    BinOp::Sub => (x.0 - y.1, x.1 - y.0),
                    BinOp::Mul => {
                        let small = |v: i128| v.unsigned_abs() < 1 << 62;
                        if ![x.0, x.1, y.0, y.1].into_iter().all(small) {
                            return UNKNOWN;
                        }
                        let c = [x.0 * y.0, x.0 * y.1, x.1 * y.0, x.1 * y.1];
                        match (c.iter().min(), c.iter().max()) {
                            (Some(l), Some(h)) => (*l, *h),
                            _ => return UNKNOWN,
                        }
                    }
                    // Division by zero gives zero.
                    BinOp::Div if x.0 >= 0 && y.0 >= 0 => (0, x.1),
                    BinOp::Rem if x.0 >= 0 && y.0 >= 0 => (0, x.1.min((y.1 - 1).max(0))),
                    BinOp::Shr if x.0 >= 0 => (0, x.1),
                    BinOp::BitAnd if x.0 >= 0 && y.0 >= 0 => (0, x.1.min(y.1)),
                    _ => return UNKNOWN,
                };
                if r.0.abs() >= i128::MAX / 8 || r.1.abs() >= i128::MAX / 8 {
                    return UNKNOWN;
                }
                fit(t, r)
            }
            ExprKind::Math(Math::Min, args) if args.len() == 2 => {
                let (x, y) = (self.range(&args[0], facts), self.range(&args[1], facts));
                fit(t, (x.0.min(y.0), x.1.min(y.1)))
            }
            ExprKind::Math(Math::Max, args) if args.len() == 2 => {
                let (x, y) = (self.range(&args[0], facts), self.range(&args[1], facts));
                fit(t, (x.0.max(y.0), x.1.max(y.1)))
            }
            ExprKind::Cast(a) if a.ty.is_int() => fit(t, self.range(a, facts)),
            ExprKind::IfElse(_, a, b) => {
                let (x, y) = (self.range(a, facts), self.range(b, facts));
                fit(t, (x.0.min(y.0), x.1.max(y.1)))
            }
            _ => UNKNOWN,
        }
    }
}
