//! From the Rust function to the typed kernel: every construct outside the kernel language
//! is an error at its span, saying what is supported.

use std::collections::{HashMap, HashSet};

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{Error, Result};

use gpukit_kernel::ir::*;

/// The most parameters a kernel has (gpukit's `MAX_KERNEL_ARGS`).
const MAX_PARAMS: usize = 12;

const SUPPORTED_STMTS: &str = "a kernel's body may use `let`/`let mut`, `const`, assignments \
     (also `+=` etc.), `if`/`else`, `for i in a..b` (also `(a..b).step_by(s)`), `while`, \
     `loop`, `break`, `continue`, `return`, `barrier()`, `shared::<T, N>()`, the atomics, \
     the subgroup collectives (`let s = subgroup_add(v);`), `let n = uniform_load(&t[i]);` and \
     `report_out_of_bounds(\"what\", index, len)`";

const SUPPORTED_EXPRS: &str = "expressions may use literals, locals, parameters, `a[i]`, \
     `a.len()`, arithmetic, comparisons, `&&`/`||`/`!`, bit operations, `as` casts, an \
     `if`/`else` as the whole value of a `let` or an assignment, calls of device functions \
     (`#[kernel(device)]`), the math \
     methods (abs, min, max, sqrt, exp, exp2, ln, log2, sin, cos, tanh, powf, floor, ceil, \
     mul_add, and u32's mul_hi), `T::MIN`/`T::MAX` of integer types, the thread coordinates (`global_x()`, \
     `thread_x()`, `block_x()`, `block_dim_x()`, `grid_dim_x()` and their `_y`, `_z`), the \
     subgroup queries (`subgroup_size()`, `subgroup_lane()`, `subgroup_id()`, \
     `num_subgroups()`) and `atomic_add`/`atomic_min`/`atomic_max`/`atomic_exchange`/`atomic_cas`";

/// What an expression outside the language is, and what to write instead, for the error
/// that refuses it.
fn construct(e: &syn::Expr) -> String {
    let (what, instead) = match e {
        syn::Expr::Match(_) => (
            "`match`",
            "write `if`/`else if`/`else` (also as a value: `let v = if c { a } else { b };`)",
        ),
        syn::Expr::Closure(_) => (
            "a closure",
            "write a device function, `#[kernel(device)] fn f(x: f32) -> f32`, and call it",
        ),
        syn::Expr::Array(_) | syn::Expr::Repeat(_) => (
            "an array literal",
            "use a shared array (`shared::<T, N>()`) or separate locals",
        ),
        syn::Expr::Tuple(_) => (
            "a tuple as a value",
            "bind its parts: `let (a, b) = (x, y);`",
        ),
        syn::Expr::Struct(_) => ("a struct literal", "pass its fields as parameters"),
        syn::Expr::Range(_) => ("a range outside a `for`", "use it in `for i in a..b`"),
        syn::Expr::Reference(_) => (
            "a reference",
            "index the array (`a[i]`); `&mut a[i]` is only an atomic's first argument",
        ),
        syn::Expr::Try(_) => ("`?`", "a kernel has no errors to return"),
        syn::Expr::Async(_) | syn::Expr::Await(_) => {
            ("`async`/`.await`", "a kernel runs to its end")
        }
        syn::Expr::Unsafe(_) => ("an `unsafe` block", "a kernel's code needs none"),
        syn::Expr::Field(_) => ("a field access", "pass the value as a parameter"),
        syn::Expr::Block(_) | syn::Expr::Loop(_) | syn::Expr::While(_) | syn::Expr::ForLoop(_) => (
            "a block or loop as a value",
            "assign inside it, to a `let mut` declared before",
        ),
        _ => ("this expression", ""),
    };
    if instead.is_empty() {
        format!("{what} is not supported in a #[kernel]")
    } else {
        format!("{what} is not supported in a #[kernel]: {instead}")
    }
}

/// What a kernel does with f16 and bf16.
const HALF_VALUES: &str = "f16 and bf16 are storage types in a kernel: an element read from an \
     array of them (or a scalar parameter of them) is an f32, and an f32 written to one is \
     rounded to it (as the built-in ops compute them); they are parameters, not locals or \
     shared arrays";

/// Names the generated code keeps for itself (or that a target reserves).
const RESERVED: &[&str] = &["barrier", "shared", "args", "block_x", "block_y", "block_z"];

/// WGSL's built-in functions, types and keywords that are Rust identifiers: a kernel's name
/// is its WGSL entry point's, which must not be one of them.
const WGSL_NAMES: &[&str] = &[
    "abs",
    "acos",
    "acosh",
    "alias",
    "all",
    "any",
    "array",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "atomic",
    "bitcast",
    "bool",
    "case",
    "ceil",
    "clamp",
    "cos",
    "cosh",
    "cross",
    "default",
    "degrees",
    "determinant",
    "diagnostic",
    "discard",
    "distance",
    "dot",
    "enable",
    "exp",
    "exp2",
    "f16",
    "f32",
    "floor",
    "fma",
    "fract",
    "frexp",
    "i32",
    "ldexp",
    "length",
    "log",
    "log2",
    "max",
    "min",
    "mix",
    "modf",
    "normalize",
    "override",
    "pow",
    "ptr",
    "radians",
    "reflect",
    "refract",
    "requires",
    "round",
    "sampler",
    "saturate",
    "select",
    "sign",
    "sin",
    "sinh",
    "smoothstep",
    "sqrt",
    "step",
    "switch",
    "tan",
    "tanh",
    "transpose",
    "trunc",
    "u32",
    "var",
    "vec2",
    "vec3",
    "vec4",
];

fn err<T>(node: impl ToTokens, msg: impl std::fmt::Display) -> Result<T> {
    Err(Error::new_spanned(node, msg))
}

fn err_at<T>(span: Span, msg: impl std::fmt::Display) -> Result<T> {
    Err(Error::new(span, msg))
}

#[derive(Clone)]
enum Binding {
    Local(usize),
    Param(usize),
    Shared(usize),
    Const(String, Ty),
    Comptime(usize, Ty),
}

struct Lowerer {
    params: Vec<Param>,
    shared: Vec<Shared>,
    locals: Vec<Local>,
    scopes: Vec<HashMap<String, Binding>>,
    used_names: HashSet<String>,
    atomic: Vec<Arr>,
    uses_barrier: bool,
    /// For each enclosing loop: whether it contains a barrier.
    loops: Vec<bool>,
    next_array: u32,
    /// Where the kernel says `return` (refused in a kernel with barriers).
    returns: Vec<Span>,
    /// An instantiation of a generic kernel: an unsuffixed integer literal may take a float
    /// type (`x + 1` for every `T`).
    generic: bool,
    /// A device function: no thread context; returns `ret`.
    device: bool,
    ret: Option<Ty>,
    calls: Vec<Callee>,
    /// What `report_out_of_bounds` calls name ([`Kernel::reports`]).
    reports: Vec<String>,
    /// Each callee's first call, where a mismatch with the function's signature is reported.
    call_spans: Vec<Span>,
    /// The control flow around a barrier or collective: the conditions (a loop's bounds)
    /// that must be uniform over the block, where they are written, and what it is (`if`,
    /// `while`, `for`); checked once the whole kernel is lowered ([`Uniformity`]).
    guards: Vec<(Vec<Expr>, Span, &'static str)>,
    /// The locals bound by `uniform_load`: uniform over the block, although read from memory.
    uniform_loads: Vec<usize>,
}

/// Lowers a `#[kernel]` function; `generic`: it is an instantiation of a generic kernel, in
/// which an unsuffixed integer literal may take a float type; `device`: it is a device
/// function (`#[kernel(device)]`: scalars in, one scalar out, no thread context).
// The entry of the tests and of the `kernel_codegen` fuzz target (the expansion needs spans).
#[cfg_attr(not(test), allow(dead_code))]
pub fn lower_as(f: &syn::ItemFn, generic: bool, device: bool) -> Result<Kernel> {
    lower_spanned(f, generic, device).map(|(k, _)| k)
}

/// [`lower_as`], with the span of each device function's first call ([`Kernel::calls`]'s
/// order).
pub fn lower_spanned(f: &syn::ItemFn, generic: bool, device: bool) -> Result<(Kernel, Vec<Span>)> {
    let sig = &f.sig;
    if let Some(t) = &sig.asyncness {
        return err(t, "a #[kernel] cannot be `async`");
    }
    if let Some(t) = &sig.unsafety {
        return err(
            t,
            "a #[kernel] is safe by construction: drop `unsafe` (every access is bounds-checked)",
        );
    }
    if let Some(t) = &sig.constness {
        return err(t, "a #[kernel] cannot be `const`");
    }
    if sig.generics.where_clause.is_some() {
        return err(&sig.generics, crate::generic::USAGE);
    }
    // Compile-time parameters: the const generics (a type parameter has been substituted
    // by the time the function is lowered).
    let mut comptime = Vec::new();
    for g in &sig.generics.params {
        let syn::GenericParam::Const(c) = g else {
            return err(g, crate::generic::USAGE);
        };
        if device {
            return err(
                c,
                "a #[kernel(device)] function has no compile-time parameters",
            );
        }
        if c.default.is_some() {
            return err(c, "a kernel's compile-time parameter has no default");
        }
        let ty = value_ty(&c.ty)?;
        if !(ty.is_int() || ty == Ty::Bool) || matches!(ty, Ty::U8 | Ty::I8) {
            return err(
                &c.ty,
                "a kernel's compile-time parameter is a usize, u32, i32, u64, i64 or bool",
            );
        }
        check_name(&c.ident)?;
        comptime.push(ComptimeParam {
            name: c.ident.to_string(),
            ty,
        });
    }
    let ret = match (&sig.output, device) {
        (syn::ReturnType::Type(_, t), false) => {
            return err(
                t,
                "a #[kernel] returns nothing: it writes its results through `&mut [T]` \
                 parameters (a `#[kernel(device)]` function returns a value)",
            );
        }
        (syn::ReturnType::Default, true) => {
            return err(
                sig,
                "a #[kernel(device)] function returns a value: `fn f(x: f32) -> f32`",
            );
        }
        (syn::ReturnType::Type(_, t), true) => Some(value_ty(t)?),
        (syn::ReturnType::Default, false) => None,
    };
    if let Some(v) = &sig.variadic {
        return err(v, "a #[kernel] cannot be variadic");
    }
    let name = sig.ident.to_string();
    check_name(&sig.ident)?;
    // (A device function's WGSL name is prefixed.)
    if !device && WGSL_NAMES.contains(&name.as_str()) {
        return err(
            &sig.ident,
            format!(
                "`{name}` is a WGSL built-in or keyword, and a kernel's name is its WGSL function's; choose another name"
            ),
        );
    }
    let mut l = Lowerer {
        params: Vec::new(),
        shared: Vec::new(),
        locals: Vec::new(),
        scopes: vec![HashMap::new()],
        used_names: HashSet::new(),
        atomic: Vec::new(),
        uses_barrier: false,
        loops: Vec::new(),
        next_array: 0,
        returns: Vec::new(),
        generic,
        device,
        ret,
        calls: Vec::new(),
        reports: Vec::new(),
        call_spans: Vec::new(),
        guards: Vec::new(),
        uniform_loads: Vec::new(),
    };
    for (i, c) in comptime.iter().enumerate() {
        l.used_names.insert(c.name.clone());
        l.bind(c.name.clone(), Binding::Comptime(i, c.ty));
    }
    if sig.inputs.len() > MAX_PARAMS {
        return err(
            &sig.inputs,
            format!(
                "a #[kernel] has at most {MAX_PARAMS} parameters ({} given)",
                sig.inputs.len()
            ),
        );
    }
    for input in &sig.inputs {
        l.param(input)?;
    }
    if sig.inputs.is_empty() && !device {
        return err(&sig.ident, "a #[kernel] takes at least one parameter");
    }
    if let (true, Some(p)) = (
        device,
        l.params.iter().find(|p| p.kind != ParamKind::Scalar),
    ) {
        return err(
            &sig.inputs,
            format!(
                "`{}`: a #[kernel(device)] function takes scalars (arrays stay in the kernel)",
                p.name
            ),
        );
    }
    let body = l.function_body(&f.block)?;
    if let (true, Some(at)) = (l.uses_barrier, l.returns.first()) {
        return err_at(
            *at,
            "`return` in a kernel that calls `barrier()` or a subgroup collective: every \
             thread of a block must reach every barrier and collective, so put the rest of the \
             work under an `if` instead",
        );
    }
    let mut k = Kernel {
        name,
        params: l.params,
        shared: l.shared,
        locals: l.locals,
        body,
        atomic: l.atomic,
        ret,
        calls: l.calls,
        comptime,
        reports: l.reports,
    };
    let uniformity = Uniformity::of(&k, &l.uniform_loads);
    if let Some((_, at, what)) = l
        .guards
        .iter()
        .find(|(conds, ..)| !conds.iter().all(|c| uniformity.uniform(c)))
    {
        if *what == "uniform_load" {
            return err_at(
                *at,
                "`uniform_load` reads one element for the whole block: its index must be the \
                 same for every thread of the block (kernel arguments, lengths, `block_*()`, \
                 constants), not depend on the thread or on memory",
            );
        }
        let cond = if *what == "for" {
            "whose bounds"
        } else {
            "whose condition"
        };
        return err_at(
            *at,
            format!(
                "`barrier()` or a subgroup collective inside a `{what}` {cond} may differ \
                 between the threads of a block (it depends on `thread_*()`, `global_*()`, \
                 `subgroup_lane()`, a value read from an array or an atomic, or a local that \
                 does): the threads that skip it never meet the others there, which hangs or \
                 corrupts the block on a GPU. Branch on what every thread of the block shares \
                 (kernel arguments, lengths, `block_*()`, constants), or move the barrier out \
                 of the branch"
            ),
        );
    }
    k.assign_storage();
    k.prove_bounds();
    Ok((k, l.call_spans))
}

fn check_name(id: &syn::Ident) -> Result<()> {
    let s = id.to_string();
    if s.starts_with("__") || s.starts_with("gk_") {
        return err(
            id,
            format!("`{s}`: names starting with `__` or `gk_` are kept for the generated code"),
        );
    }
    if RESERVED.contains(&s.as_str()) {
        return err(
            id,
            format!("`{s}` names an intrinsic or a launch parameter; choose another name"),
        );
    }
    Ok(())
}

fn elem_ty(t: &syn::Type, what: &str) -> Result<Ty> {
    if let syn::Type::Path(p) = t {
        if p.qself.is_none() {
            if let Some(id) = p.path.get_ident() {
                if let Some(ty) = Ty::from_name(&id.to_string()) {
                    if ty.is_element() {
                        return Ok(ty);
                    }
                }
            }
        }
    }
    err(
        t,
        format!("{what} must be one of f32, f64, i32, u32, i64, u64, u8, i8, f16, bf16"),
    )
}

/// A value stored into an f16 or bf16 element rounds once: `x as f32` of an `x` that f32 may
/// not hold (an f64, a 32- or 64-bit integer) becomes `x` rounded to f32 to odd, which the
/// store rounds to the 16-bit value nearest `x` (the cast and the store would round twice).
fn round_once(value: Expr) -> Expr {
    match value.kind {
        ExprKind::Cast(inner)
            if value.ty == Ty::F32
                && matches!(
                    inner.ty,
                    Ty::F64 | Ty::I32 | Ty::U32 | Ty::I64 | Ty::U64 | Ty::Usize
                ) =>
        {
            Expr {
                kind: ExprKind::RoundOdd(inner),
                ty: Ty::F32,
            }
        }
        kind => Expr { kind, ty: value.ty },
    }
}

fn value_ty(t: &syn::Type) -> Result<Ty> {
    if let syn::Type::Path(p) = t {
        if let Some(id) = p.path.get_ident() {
            if let Some(ty) = Ty::from_name(&id.to_string()) {
                if ty.is_half() {
                    return err(t, HALF_VALUES);
                }
                return Ok(ty);
            }
        }
    }
    err(
        t,
        "a kernel's values are bool, f32, f64, i8, u8, i32, u32, i64, u64 or usize",
    )
}

/// Whether `tokens` call `barrier()`, `uniform_load` or a subgroup collective anywhere (every
/// thread of a block reaches each alike).
fn mentions_barrier(tokens: TokenStream) -> bool {
    let mut prev_barrier = false;
    for t in tokens {
        match t {
            TokenTree::Ident(id) => {
                let name = id.to_string();
                prev_barrier = name == "barrier"
                    || name == "uniform_load"
                    || Collective::from_name(&name).is_some();
            }
            TokenTree::Group(g) => {
                if prev_barrier && g.delimiter() == proc_macro2::Delimiter::Parenthesis {
                    return true;
                }
                if mentions_barrier(g.stream()) {
                    return true;
                }
                prev_barrier = false;
            }
            _ => prev_barrier = false,
        }
    }
    false
}

/// Whether `e` is a literal whose type comes from its context (`1`, `2.5`, `-3`).
fn untyped_lit(e: &syn::Expr) -> bool {
    match e {
        syn::Expr::Lit(l) => match &l.lit {
            syn::Lit::Int(i) => i.suffix().is_empty(),
            syn::Lit::Float(f) => f.suffix().is_empty(),
            _ => false,
        },
        syn::Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => untyped_lit(&u.expr),
        syn::Expr::Paren(p) => untyped_lit(&p.expr),
        _ => false,
    }
}

fn coord(name: &str) -> Option<(Coord, usize)> {
    let (base, axis) = name.rsplit_once('_')?;
    let axis = match axis {
        "x" => 0,
        "y" => 1,
        "z" => 2,
        _ => return None,
    };
    let c = match base {
        "global" => Coord::Global,
        "thread" => Coord::Thread,
        "block" => Coord::Block,
        "block_dim" => Coord::BlockDim,
        "grid_dim" => Coord::GridDim,
        _ => return None,
    };
    Some((c, axis))
}

fn atomic_op(name: &str) -> Option<AtomicOp> {
    Some(match name {
        "atomic_add" => AtomicOp::Add,
        "atomic_min" => AtomicOp::Min,
        "atomic_max" => AtomicOp::Max,
        "atomic_exchange" => AtomicOp::Exchange,
        "atomic_cas" => AtomicOp::Cas,
        _ => return None,
    })
}

impl Lowerer {
    fn fresh_name(&mut self, base: &str) -> String {
        let mut name = base.to_owned();
        let mut n = 1;
        while self.used_names.contains(&name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        self.used_names.insert(name.clone());
        name
    }

    fn bind(&mut self, name: String, b: Binding) {
        self.scopes.last_mut().expect("a scope").insert(name, b);
    }

    fn lookup(&self, name: &str) -> Option<Binding> {
        self.scopes.iter().rev().find_map(|s| s.get(name).cloned())
    }

    fn param(&mut self, input: &syn::FnArg) -> Result<()> {
        let syn::FnArg::Typed(pt) = input else {
            return err(input, "a #[kernel] is a free function: no `self`");
        };
        let syn::Pat::Ident(pi) = &*pt.pat else {
            return err(&pt.pat, "a parameter is a plain name (`x: &[f32]`)");
        };
        if pi.by_ref.is_some() || pi.subpat.is_some() {
            return err(&pt.pat, "a parameter is a plain name (`x: &[f32]`)");
        }
        check_name(&pi.ident)?;
        let name = pi.ident.to_string();
        if self.used_names.contains(&name) {
            return err(&pi.ident, format!("a second parameter named `{name}`"));
        }
        let (ty, kind) = match &*pt.ty {
            syn::Type::Reference(r) => {
                if let Some(lt) = &r.lifetime {
                    return err(
                        lt,
                        "a slice parameter has no lifetime (`&[f32]`, `&mut [f32]`)",
                    );
                }
                let syn::Type::Slice(s) = &*r.elem else {
                    return err(
                        &r.elem,
                        "a reference parameter is a slice: `&[T]` (read) or `&mut [T]` (written)",
                    );
                };
                let ty = elem_ty(&s.elem, "an array's element type")?;
                let array = self.next_array;
                self.next_array += 1;
                (
                    ty,
                    ParamKind::Slice {
                        mutable: r.mutability.is_some(),
                        array,
                    },
                )
            }
            t => {
                // An f16 or bf16 scalar is an f32 in the body, as an element read is.
                let ty = elem_ty(t, "a scalar parameter (or a slice `&[T]`, `&mut [T]`)")?;
                (ty, ParamKind::Scalar)
            }
        };
        let idx = self.params.len();
        self.used_names.insert(name.clone());
        self.params.push(Param {
            name: name.clone(),
            ty,
            kind,
        });
        self.bind(name, Binding::Param(idx));
        Ok(())
    }

    fn scoped<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.scopes.push(HashMap::new());
        let r = f(self);
        self.scopes.pop();
        r
    }

    /// The function's body: a device function's tail expression is its result.
    fn function_body(&mut self, block: &syn::Block) -> Result<Vec<Stmt>> {
        let stmts = &block.stmts;
        match (self.device, stmts.split_last()) {
            (true, Some((syn::Stmt::Expr(tail, None), rest))) if !is_block_like(tail) => {
                let mut out = self.block(rest)?;
                let ret = self.ret.unwrap_or(Ty::F32);
                let v = self.value(tail, Some(ret))?;
                expect_ty(tail, ret, v.ty)?;
                out.push(Stmt::Return(Some(v)));
                Ok(out)
            }
            _ => self.block(stmts),
        }
    }

    fn block(&mut self, stmts: &[syn::Stmt]) -> Result<Vec<Stmt>> {
        let mut out = Vec::new();
        for (i, s) in stmts.iter().enumerate() {
            let last = i + 1 == stmts.len();
            self.stmt(s, last, &mut out)?;
        }
        Ok(out)
    }

    fn stmt(&mut self, s: &syn::Stmt, last: bool, out: &mut Vec<Stmt>) -> Result<()> {
        match s {
            syn::Stmt::Local(local) => self.local(local, out),
            syn::Stmt::Item(syn::Item::Const(c)) => {
                check_name(&c.ident)?;
                let ty = value_ty(&c.ty)?;
                let e = self.expr(&c.expr, Some(ty))?;
                if !is_const(&e) {
                    return err(
                        &c.expr,
                        "a `const` in a kernel is a literal or arithmetic on literals and other consts",
                    );
                }
                let text = const_text(&e);
                self.bind(c.ident.to_string(), Binding::Const(text, ty));
                Ok(())
            }
            syn::Stmt::Item(item) => err(
                item,
                format!(
                    "items are not supported inside a #[kernel] (only `const`); {SUPPORTED_STMTS}"
                ),
            ),
            syn::Stmt::Macro(m) => err(
                m,
                format!("macros are not supported inside a #[kernel]; {SUPPORTED_STMTS}"),
            ),
            syn::Stmt::Expr(e, semi) => {
                if semi.is_none() && !last && !is_block_like(e) {
                    return err(e, "expected `;`");
                }
                self.expr_stmt(e, out)
            }
        }
    }

    fn local(&mut self, local: &syn::Local, out: &mut Vec<Stmt>) -> Result<()> {
        // `let (a, b) = (x, y);`: every value first, then the names.
        if let (syn::Pat::Tuple(pt), Some(init)) = (&local.pat, &local.init) {
            let syn::Expr::Tuple(values) = &*init.expr else {
                return err(
                    &init.expr,
                    "a `let` of a tuple takes a tuple of values: `let (a, b) = (x, y);`",
                );
            };
            if values.elems.len() != pt.elems.len() || init.diverge.is_some() {
                return err(local, "a `let` of a tuple takes as many values as names");
            }
            let mut bound = Vec::new();
            for (p, v) in pt.elems.iter().zip(&values.elems) {
                let syn::Pat::Ident(pi) = p else {
                    return err(
                        p,
                        "a `let` of a tuple binds plain names: `let (a, mut b) = (x, y);`",
                    );
                };
                if pi.by_ref.is_some() || pi.subpat.is_some() {
                    return err(
                        p,
                        "a `let` of a tuple binds plain names: `let (a, mut b) = (x, y);`",
                    );
                }
                check_name(&pi.ident)?;
                bound.push((&pi.ident, pi.mutability.is_some(), self.value(v, None)?));
            }
            for (ident, mutable, value) in bound {
                self.bind_local(ident, mutable, value, out);
            }
            return Ok(());
        }
        let (ident, mutable, declared) = match &local.pat {
            syn::Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                (&pi.ident, pi.mutability.is_some(), None)
            }
            syn::Pat::Type(pt) => match &*pt.pat {
                syn::Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                    (&pi.ident, pi.mutability.is_some(), Some(&*pt.ty))
                }
                p => {
                    return err(
                        p,
                        "a `let` binds one name (`let x = ..`, `let mut x: f32 = ..`)",
                    )
                }
            },
            p => {
                return err(
                    p,
                    "a `let` binds one name (`let x = ..`, `let mut x: f32 = ..`)",
                )
            }
        };
        check_name(ident)?;
        let Some(init) = &local.init else {
            return err(
                local,
                "a kernel's `let` needs a value (`let mut acc = 0.0f32;`)",
            );
        };
        if let Some((_, e)) = &init.diverge {
            return err(e, "`let ... else` is not supported in a #[kernel]");
        }
        // `let tile = shared::<f32, 256>();`
        if let Some(shared) = self.shared_decl(&init.expr)? {
            if self.device {
                return err(
                    &init.expr,
                    "`shared` needs a thread block: a #[kernel(device)] function has none",
                );
            }
            if declared.is_some() {
                return err(
                    local,
                    "a shared array's type is in `shared::<T, N>()`; drop the annotation",
                );
            }
            let (ty, len) = shared;
            let name = self.fresh_name(&ident.to_string());
            let idx = self.shared.len();
            let array = self.next_array;
            self.next_array += 1;
            self.shared.push(Shared {
                name,
                ty,
                len,
                array,
            });
            self.bind(ident.to_string(), Binding::Shared(idx));
            return Ok(());
        }
        let declared = declared.map(value_ty).transpose()?;
        // `let s = subgroup_add(v);`, `let n = uniform_load(&t[i]);`
        if let syn::Expr::Call(c) = &*init.expr {
            if let Some(op) = call_name(c).as_deref().and_then(Collective::from_name) {
                return self.collective(c, op, ident, mutable, declared, out);
            }
            if is_call_to(c, "uniform_load") {
                return self.uniform_load(c, ident, mutable, declared, out);
            }
        }
        let value = self.value(&init.expr, declared)?;
        if let Some(d) = declared {
            if d != value.ty {
                return err(
                    &init.expr,
                    format!(
                        "expected {}, found {} (cast with `as {}`)",
                        d.rust(),
                        value.ty.rust(),
                        d.rust()
                    ),
                );
            }
        }
        self.bind_local(ident, mutable, value, out);
        Ok(())
    }

    /// `let name = uniform_load(&t[i]);`: element `i` of the shared array `t`, read by every
    /// thread of the block between two barriers, so that all get the same value (WGSL's
    /// `workgroupUniformLoad`): a value read from memory that may steer a barrier.
    fn uniform_load(
        &mut self,
        c: &syn::ExprCall,
        ident: &syn::Ident,
        mutable: bool,
        declared: Option<Ty>,
        out: &mut Vec<Stmt>,
    ) -> Result<()> {
        if self.device {
            return err(
                &c.func,
                "`uniform_load` needs a thread: a #[kernel(device)] function has none",
            );
        }
        let usage = "`uniform_load` takes an element of a shared array: \
                     `let n = uniform_load(&t[i]);` (to share a value read from a slice, store it \
                     in a shared array first: `if thread_x() == 0 { t[0] = x[j]; }`)";
        let [arg] = c.args.iter().collect::<Vec<_>>()[..] else {
            return err(c, usage);
        };
        let syn::Expr::Reference(r) = arg else {
            return err(arg, usage);
        };
        let syn::Expr::Index(ix) = &*r.expr else {
            return err(arg, usage);
        };
        let shared = match &*ix.expr {
            syn::Expr::Path(p) => match p
                .path
                .get_ident()
                .and_then(|id| self.lookup(&id.to_string()))
            {
                Some(Binding::Shared(s)) => s,
                _ => return err(&ix.expr, usage),
            },
            _ => return err(&ix.expr, usage),
        };
        let idx = self.index(&ix.index)?;
        self.guards
            .push((vec![idx.clone()], ix.index.span(), "uniform_load"));
        let value = Expr {
            ty: self.shared[shared].ty,
            kind: ExprKind::Index {
                arr: Arr::Shared(shared),
                idx: Box::new(idx),
                proven: false,
            },
        };
        if let Some(d) = declared {
            expect_ty(c, d, value.ty)?;
        }
        self.uses_barrier = true;
        // Every thread's writes before it are seen, and none after it is: all read one value.
        out.push(Stmt::Barrier);
        let local = self.locals.len();
        self.bind_local(ident, mutable, value, out);
        out.push(Stmt::Barrier);
        self.uniform_loads.push(local);
        Ok(())
    }

    /// `let name = subgroup_op(value[, lane]);`: a collective, which every thread of the
    /// block reaches, as it reaches a barrier.
    fn collective(
        &mut self,
        c: &syn::ExprCall,
        op: Collective,
        ident: &syn::Ident,
        mutable: bool,
        declared: Option<Ty>,
        out: &mut Vec<Stmt>,
    ) -> Result<()> {
        let name = op.name();
        if self.device {
            return err(
                &c.func,
                format!("`{name}` needs a thread: a #[kernel(device)] function has none"),
            );
        }
        let (want, usage) = if op.takes_lane() {
            (
                2,
                format!("`let r = {name}(value, lane);` (the lane a usize)"),
            )
        } else {
            (1, format!("`let r = {name}(value);`"))
        };
        if c.args.len() != want {
            return err(c, format!("`{name}` takes {want} argument(s): {usage}"));
        }
        let value = if op.votes() {
            let v = self.expr(&c.args[0], Some(Ty::Bool))?;
            expect_ty(&c.args[0], Ty::Bool, v.ty)?;
            v
        } else {
            let v = self.expr(&c.args[0], declared)?;
            if !matches!(
                v.ty,
                Ty::F32 | Ty::F64 | Ty::I32 | Ty::U32 | Ty::I64 | Ty::U64 | Ty::U8 | Ty::I8
            ) {
                return err(
                    &c.args[0],
                    format!(
                        "`{name}` takes an f32, f64, i32, u32, i64, u64, u8 or i8 (found {}; cast it with `as`)",
                        v.ty.rust()
                    ),
                );
            }
            v
        };
        // A u8 or i8 takes part widened to 32 bits and comes back truncated: the same
        // wrapping sums, order and lanes, with no 8-bit collective in any target.
        let narrow = match value.ty {
            Ty::U8 => Some(Ty::U32),
            Ty::I8 => Some(Ty::I32),
            _ => None,
        };
        let value = match narrow {
            Some(wide) => Expr {
                kind: ExprKind::Cast(Box::new(value)),
                ty: wide,
            },
            None => value,
        };
        if let Some(d) = declared {
            let ty = match (narrow, value.ty) {
                (Some(_), Ty::U32) => Ty::U8,
                (Some(_), Ty::I32) => Ty::I8,
                (_, t) => t,
            };
            expect_ty(c, d, ty)?;
        }
        let lane = if op.takes_lane() {
            let l = self.expr(&c.args[1], Some(Ty::Usize))?;
            expect_ty(&c.args[1], Ty::Usize, l.ty)?;
            Some(l)
        } else {
            None
        };
        self.uses_barrier = true;
        let local_name = self.fresh_name(&ident.to_string());
        let local = self.locals.len();
        self.locals.push(Local {
            name: local_name,
            ty: value.ty,
            mutable: mutable && narrow.is_none(),
            storage: Storage::PerThread,
        });
        let wide_ty = value.ty;
        out.push(Stmt::Collective {
            local,
            op,
            value,
            lane,
        });
        match narrow {
            None => self.bind(ident.to_string(), Binding::Local(local)),
            Some(_) => {
                let narrow_ty = if wide_ty == Ty::U32 { Ty::U8 } else { Ty::I8 };
                let wide = Expr {
                    kind: ExprKind::Local(local),
                    ty: wide_ty,
                };
                let value = Expr {
                    kind: ExprKind::Cast(Box::new(wide)),
                    ty: narrow_ty,
                };
                self.bind_local(ident, mutable, value, out);
            }
        }
        Ok(())
    }

    fn bind_local(&mut self, ident: &syn::Ident, mutable: bool, value: Expr, out: &mut Vec<Stmt>) {
        let name = self.fresh_name(&ident.to_string());
        let id = self.locals.len();
        self.locals.push(Local {
            name,
            ty: value.ty,
            mutable,
            storage: Storage::Plain,
        });
        self.bind(ident.to_string(), Binding::Local(id));
        out.push(Stmt::Let {
            local: id,
            init: value,
        });
    }

    /// `shared::<T, N>()`: the element type and length.
    fn shared_decl(&mut self, e: &syn::Expr) -> Result<Option<(Ty, Extent)>> {
        let syn::Expr::Call(c) = e else {
            return Ok(None);
        };
        let syn::Expr::Path(p) = &*c.func else {
            return Ok(None);
        };
        let Some(last) = p.path.segments.last() else {
            return Ok(None);
        };
        if last.ident != "shared" || p.path.segments.len() != 1 {
            return Ok(None);
        }
        let usage = "a shared array is `let tile = shared::<f32, 256>();` (the length a \
                     constant: a literal, a `const`, or `{ A * B }` of them, or a usize \
                     compile-time parameter: `shared::<f32, B>()` in `fn k<const B: usize>`)";
        if !c.args.is_empty() {
            return err(&c.args, usage);
        }
        let syn::PathArguments::AngleBracketed(ab) = &last.arguments else {
            return err(c, usage);
        };
        let args: Vec<_> = ab.args.iter().collect();
        let [syn::GenericArgument::Type(t), len] = args[..] else {
            return err(ab, usage);
        };
        let ty = elem_ty(t, "a shared array's element type")?;
        if ty.is_half() {
            return err(t, HALF_VALUES);
        }
        let len_expr: syn::Expr = match len {
            syn::GenericArgument::Const(e) => e.clone(),
            syn::GenericArgument::Type(syn::Type::Path(p)) => syn::Expr::Path(syn::ExprPath {
                attrs: vec![],
                qself: None,
                path: p.path.clone(),
            }),
            other => return err(other, usage),
        };
        let inner = match &len_expr {
            syn::Expr::Block(b) if b.block.stmts.len() == 1 => match &b.block.stmts[0] {
                syn::Stmt::Expr(e, None) => e.clone(),
                _ => return err(len, usage),
            },
            e => e.clone(),
        };
        let v = self.expr(&inner, Some(Ty::Usize))?;
        if let (ExprKind::Comptime(i), Ty::Usize) = (&v.kind, v.ty) {
            return Ok(Some((ty, Extent::Comptime(*i))));
        }
        if !is_const(&v) || v.ty != Ty::Usize {
            return err(len, usage);
        }
        let n: u64 = const_text(&v)
            .trim_end_matches("usize")
            .parse()
            .map_err(|_| Error::new_spanned(len, usage))?;
        if n == 0 || n > (1 << 16) {
            return err(len, "a shared array holds 1 to 65536 elements");
        }
        Ok(Some((ty, Extent::Fixed(n))))
    }

    fn expr_stmt(&mut self, e: &syn::Expr, out: &mut Vec<Stmt>) -> Result<()> {
        match e {
            syn::Expr::Assign(a) => {
                let place = self.place(&a.left)?;
                let want = self.place_ty(&place);
                let value = self.value(&a.right, Some(want))?;
                expect_ty(&a.right, want, value.ty)?;
                let value = match &place {
                    Place::Index { arr, .. } if self.arr_ty(*arr).is_half() => round_once(value),
                    _ => value,
                };
                out.push(Stmt::Assign {
                    place,
                    op: None,
                    value,
                });
                Ok(())
            }
            syn::Expr::Binary(b) if compound(&b.op).is_some() => {
                let op = compound(&b.op).expect("checked");
                let place = self.place(&b.left)?;
                let want = self.place_ty(&place);
                let rhs_want = if matches!(op, BinOp::Shl | BinOp::Shr) { None } else { Some(want) };
                let value = self.expr(&b.right, rhs_want)?;
                let lhs = Expr { kind: ExprKind::Lit("0".into()), ty: want };
                check_binary(&b.op, op, &lhs, &value)?;
                out.push(Stmt::Assign {
                    place,
                    op: Some(op),
                    value,
                });
                Ok(())
            }
            syn::Expr::If(i) => {
                let s = self.if_stmt(i)?;
                out.push(s);
                Ok(())
            }
            syn::Expr::ForLoop(f) => self.for_loop(f, out),
            syn::Expr::While(w) => {
                if w.label.is_some() {
                    return err(w, "loop labels are not supported in a #[kernel]");
                }
                let cond = self.expr(&w.cond, Some(Ty::Bool))?;
                expect_ty(&w.cond, Ty::Bool, cond.ty)?;
                let has = mentions_barrier(w.body.to_token_stream());
                if has {
                    self.guards.push((vec![cond.clone()], w.cond.span(), "while"));
                }
                let body = self.loop_body(&w.body, has)?;
                out.push(Stmt::While { cond, body });
                Ok(())
            }
            syn::Expr::Loop(lp) => {
                if lp.label.is_some() {
                    return err(lp, "loop labels are not supported in a #[kernel]");
                }
                if mentions_barrier(lp.body.to_token_stream()) {
                    return err(
                        lp,
                        "a `loop` that contains `barrier()` or a subgroup collective could never \
                         end (it cannot `break`): use `while` on a condition the same for the \
                         whole block",
                    );
                }
                // A `loop` with a barrier was refused above.
                let body = self.loop_body(&lp.body, false)?;
                out.push(Stmt::Loop(body));
                Ok(())
            }
            syn::Expr::Block(b) => {
                if b.label.is_some() {
                    return err(b, "block labels are not supported in a #[kernel]");
                }
                let body = self.scoped(|l| l.block(&b.block.stmts))?;
                out.push(Stmt::Block(body));
                Ok(())
            }
            syn::Expr::Break(b) => {
                if b.label.is_some() || b.expr.is_some() {
                    return err(b, "`break` takes no label or value in a #[kernel]");
                }
                self.loop_jump(b, "break")?;
                out.push(Stmt::Break);
                Ok(())
            }
            syn::Expr::Continue(c) => {
                if c.label.is_some() {
                    return err(c, "`continue` takes no label in a #[kernel]");
                }
                self.loop_jump(c, "continue")?;
                out.push(Stmt::Continue);
                Ok(())
            }
            syn::Expr::Return(r) => {
                let value = match (&r.expr, self.ret) {
                    (Some(v), None) => return err(v, "a #[kernel] returns nothing: `return;`"),
                    (None, Some(t)) => {
                        return err(r, format!("a device function returns a {}", t.rust()))
                    }
                    (Some(v), Some(t)) => {
                        let e = self.value(v, Some(t))?;
                        expect_ty(v, t, e.ty)?;
                        Some(e)
                    }
                    (None, None) => None,
                };
                self.returns.push(r.span());
                out.push(Stmt::Return(value));
                Ok(())
            }
            syn::Expr::Call(c) if is_call_to(c, "barrier") => {
                if !c.args.is_empty() {
                    return err(&c.args, "`barrier()` takes no arguments");
                }
                if self.device {
                    return err(c, "`barrier` needs a thread: a #[kernel(device)] function has none");
                }
                self.uses_barrier = true;
                out.push(Stmt::Barrier);
                Ok(())
            }
            syn::Expr::Call(c) if is_call_to(c, "report_out_of_bounds") => {
                self.report(c, out)
            }
            syn::Expr::Call(c) if call_name(c).as_deref().and_then(atomic_op).is_some() => {
                let e = self.expr(e, None)?;
                out.push(Stmt::Expr(e));
                let _ = c;
                Ok(())
            }
            syn::Expr::Paren(p) => self.expr_stmt(&p.expr, out),
            syn::Expr::Match(_) | syn::Expr::Closure(_) | syn::Expr::Unsafe(_) | syn::Expr::Async(_) => {
                err(e, format!("{}; {SUPPORTED_STMTS}", construct(e)))
            }
            other => err(
                other,
                format!(
                    "this statement has no effect or is not supported in a #[kernel]; {SUPPORTED_STMTS}"
                ),
            ),
        }
    }

    /// `report_out_of_bounds("what", index, len);`.
    fn report(&mut self, c: &syn::ExprCall, out: &mut Vec<Stmt>) -> Result<()> {
        let usage = "`report_out_of_bounds(\"what\", index, len)` takes a string literal naming \
                     what `index` is out of bounds for and two `usize`s";
        if self.device {
            return err(
                c,
                "`report_out_of_bounds` reports through the launch's fault record: a \
                 #[kernel(device)] function has none",
            );
        }
        let [what, index, len] = [0, 1, 2].map(|i| c.args.iter().nth(i));
        let (Some(what), Some(index), Some(len), 3) = (what, index, len, c.args.len()) else {
            return err(c, usage);
        };
        // A literal passed through `macro_rules!` arrives in an invisible group.
        let mut what = what;
        while let syn::Expr::Group(g) = what {
            what = &g.expr;
        }
        let syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(name),
            ..
        }) = what
        else {
            return err(what, usage);
        };
        let name = name.value();
        if name.is_empty() {
            return err(what, "name what the index is out of bounds for");
        }
        let what = match self.reports.iter().position(|r| *r == name) {
            Some(i) => i,
            None => {
                self.reports.push(name);
                self.reports.len() - 1
            }
        };
        let index_e = self.expr(index, Some(Ty::Usize))?;
        expect_ty(index, Ty::Usize, index_e.ty)?;
        let len_e = self.expr(len, Some(Ty::Usize))?;
        expect_ty(len, Ty::Usize, len_e.ty)?;
        out.push(Stmt::Report {
            what,
            index: index_e,
            len: len_e,
        });
        Ok(())
    }

    fn loop_jump(&self, node: impl ToTokens, what: &str) -> Result<()> {
        match self.loops.last() {
            None => err(node, format!("`{what}` outside a loop")),
            Some(true) => err(
                node,
                format!(
                    "`{what}` in a loop that contains `barrier()` or a subgroup collective: every \
                     thread of a block must reach the same barriers and collectives, so such a \
                     loop runs to its end (a `for` over a range, or a `while` on a condition the \
                     same for the whole block)"
                ),
            ),
            Some(false) => Ok(()),
        }
    }

    /// A loop's body; `has`: whether it contains a barrier or collective.
    fn loop_body(&mut self, body: &syn::Block, has: bool) -> Result<Vec<Stmt>> {
        self.loops.push(has);
        let r = self.scoped(|l| l.block(&body.stmts));
        self.loops.pop();
        r
    }

    fn if_stmt(&mut self, i: &syn::ExprIf) -> Result<Stmt> {
        let cond = self.expr(&i.cond, Some(Ty::Bool))?;
        expect_ty(&i.cond, Ty::Bool, cond.ty)?;
        let branches = i
            .then_branch
            .to_token_stream()
            .into_iter()
            .chain(i.else_branch.iter().flat_map(|(_, e)| e.to_token_stream()));
        if mentions_barrier(branches.collect()) {
            self.guards.push((vec![cond.clone()], i.cond.span(), "if"));
        }
        let then = self.scoped(|l| l.block(&i.then_branch.stmts))?;
        let els = match &i.else_branch {
            None => Vec::new(),
            Some((_, e)) => match &**e {
                syn::Expr::Block(b) => self.scoped(|l| l.block(&b.block.stmts))?,
                syn::Expr::If(inner) => vec![self.if_stmt(inner)?],
                other => return err(other, "expected a block or `if` after `else`"),
            },
        };
        Ok(Stmt::If { cond, then, els })
    }

    fn for_loop(&mut self, f: &syn::ExprForLoop, out: &mut Vec<Stmt>) -> Result<()> {
        if f.label.is_some() {
            return err(f, "loop labels are not supported in a #[kernel]");
        }
        let syn::Pat::Ident(pi) = &*f.pat else {
            return err(&f.pat, "a `for` binds one name: `for i in a..b`");
        };
        if pi.mutability.is_some() || pi.by_ref.is_some() || pi.subpat.is_some() {
            return err(&f.pat, "a `for` binds one name: `for i in a..b`");
        }
        check_name(&pi.ident)?;
        let usage = "a kernel's `for` runs over a range: `for i in a..b` or \
                     `for i in (a..b).step_by(s)` (`a..=b` is not supported: write `a..b + 1`)";
        let (range, step) = match &*f.expr {
            syn::Expr::Range(r) => (r, None),
            syn::Expr::MethodCall(m) if m.method == "step_by" && m.args.len() == 1 => {
                let inner = match &*m.receiver {
                    syn::Expr::Paren(p) => &*p.expr,
                    e => e,
                };
                let syn::Expr::Range(r) = inner else {
                    return err(&f.expr, usage);
                };
                let s = self.expr(&m.args[0], Some(Ty::Usize))?;
                expect_ty(&m.args[0], Ty::Usize, s.ty)?;
                if matches!(&s.kind, ExprKind::Lit(t) if t.trim_end_matches("usize") == "0") {
                    return err(&m.args[0], "`step_by(0)` never advances");
                }
                (r, Some(s))
            }
            other => return err(other, usage),
        };
        let (Some(a), Some(b), syn::RangeLimits::HalfOpen(_)) =
            (&range.start, &range.end, &range.limits)
        else {
            return err(range, usage);
        };
        // Two untyped literals count from 0usize: in a kernel a loop variable most often
        // indexes an array (Rust would infer `usize` from that use).
        let (start, end) = if untyped_lit(a) && untyped_lit(b) {
            (
                self.expr(a, Some(Ty::Usize))?,
                self.expr(b, Some(Ty::Usize))?,
            )
        } else if untyped_lit(a) {
            let end = self.expr(b, None)?;
            (self.expr(a, Some(end.ty))?, end)
        } else {
            let start = self.expr(a, None)?;
            (start.clone(), self.expr(b, Some(start.ty))?)
        };
        expect_ty(b, start.ty, end.ty)?;
        if !start.ty.is_int() {
            return err(range, "a `for` runs over integers");
        }
        let has = mentions_barrier(f.body.to_token_stream());
        if has {
            let bounds = [Some(start.clone()), Some(end.clone()), step.clone()];
            self.guards
                .push((bounds.into_iter().flatten().collect(), f.expr.span(), "for"));
        }
        self.loops.push(has);
        let r = self.scoped(|l| {
            let name = l.fresh_name(&pi.ident.to_string());
            let var = l.locals.len();
            l.locals.push(Local {
                name,
                ty: start.ty,
                mutable: false,
                storage: Storage::Plain,
            });
            l.bind(pi.ident.to_string(), Binding::Local(var));
            let body = l.block(&f.body.stmts)?;
            Ok((var, body))
        });
        self.loops.pop();
        let (var, body) = r?;
        out.push(Stmt::For {
            var,
            start,
            end,
            step,
            body,
        });
        Ok(())
    }

    fn place(&mut self, e: &syn::Expr) -> Result<Place> {
        match e {
            syn::Expr::Path(p) => {
                let Some(id) = p.path.get_ident() else {
                    return err(
                        p,
                        "assign to a local (`x = ..`) or an array element (`a[i] = ..`)",
                    );
                };
                match self.lookup(&id.to_string()) {
                    Some(Binding::Local(l)) if self.locals[l].mutable => Ok(Place::Local(l)),
                    Some(Binding::Local(_)) => err(
                        id,
                        format!("`{id}` is not mutable: declare it `let mut {id}`"),
                    ),
                    Some(Binding::Param(_)) => err(
                        id,
                        "parameters cannot be assigned: copy one into a `let mut` first",
                    ),
                    Some(_) => err(id, format!("`{id}` cannot be assigned")),
                    None => err(id, format!("no local named `{id}`")),
                }
            }
            syn::Expr::Index(ix) => {
                let arr = self.array(&ix.expr, true)?;
                let idx = self.index(&ix.index)?;
                Ok(Place::Index {
                    arr,
                    idx,
                    proven: false,
                })
            }
            syn::Expr::Paren(p) => self.place(&p.expr),
            other => err(
                other,
                "assign to a local (`x = ..`) or an array element (`a[i] = ..`)",
            ),
        }
    }

    /// The type a place holds as a value (an element of an f16 array is an f32).
    fn place_ty(&self, p: &Place) -> Ty {
        match p {
            Place::Local(l) => self.locals[*l].ty,
            Place::Index { arr, .. } => self.arr_ty(*arr).compute(),
        }
    }

    /// An array named by `e`; `write`: it must be writable.
    fn array(&mut self, e: &syn::Expr, write: bool) -> Result<Arr> {
        let syn::Expr::Path(p) = e else {
            return err(
                e,
                "index a slice parameter or a shared array by name (`a[i]`)",
            );
        };
        let Some(id) = p.path.get_ident() else {
            return err(
                p,
                "index a slice parameter or a shared array by name (`a[i]`)",
            );
        };
        match self.lookup(&id.to_string()) {
            Some(Binding::Param(i)) => match self.params[i].kind {
                ParamKind::Slice { mutable, .. } => {
                    if write && !mutable {
                        return err(
                            id,
                            format!(
                                "`{id}` is read-only: declare it `{id}: &mut [{}]` to write it",
                                self.params[i].ty.rust()
                            ),
                        );
                    }
                    Ok(Arr::Param(i))
                }
                ParamKind::Scalar => err(id, format!("`{id}` is a scalar, not an array")),
            },
            Some(Binding::Shared(i)) => Ok(Arr::Shared(i)),
            Some(_) => err(
                id,
                format!("`{id}` is not an array (a slice parameter or a shared array)"),
            ),
            None => err(id, format!("no array named `{id}`")),
        }
    }

    fn index(&mut self, e: &syn::Expr) -> Result<Expr> {
        let idx = self.expr(e, Some(Ty::Usize))?;
        if idx.ty != Ty::Usize {
            return err(
                e,
                format!(
                    "an index is a `usize`, found {} (cast it: `as usize`)",
                    idx.ty.rust()
                ),
            );
        }
        Ok(idx)
    }

    /// A value: an expression, or an `if`/`else` choosing one (the whole of a `let`'s or an
    /// assignment's value).
    fn value(&mut self, e: &syn::Expr, want: Option<Ty>) -> Result<Expr> {
        match e {
            syn::Expr::If(i) => {
                let cond = self.expr(&i.cond, Some(Ty::Bool))?;
                expect_ty(&i.cond, Ty::Bool, cond.ty)?;
                let usage =
                    "an `if` as a value is `if c { a } else { b }` (each branch one expression)";
                let then = match &i.then_branch.stmts[..] {
                    [syn::Stmt::Expr(t, None)] => t,
                    _ => return err(&i.then_branch, usage),
                };
                let Some((_, els)) = &i.else_branch else {
                    return err(i, usage);
                };
                let (then_lit, els_lit) = (
                    untyped_lit(then),
                    match &**els {
                        syn::Expr::Block(b) => {
                            matches!(&b.block.stmts[..], [syn::Stmt::Expr(t, None)] if untyped_lit(t))
                        }
                        _ => false,
                    },
                );
                let (a, b) = if then_lit && !els_lit {
                    let b = self.else_value(els, want, usage)?;
                    (self.expr(then, Some(b.ty))?, b)
                } else {
                    let a = self.expr(then, want)?;
                    let b = self.else_value(els, Some(a.ty), usage)?;
                    (a, b)
                };
                expect_ty(&**els, a.ty, b.ty)?;
                let ty = a.ty;
                Ok(Expr {
                    kind: ExprKind::IfElse(Box::new(cond), Box::new(a), Box::new(b)),
                    ty,
                })
            }
            syn::Expr::Paren(p) if matches!(&*p.expr, syn::Expr::If(_)) => {
                self.value(&p.expr, want)
            }
            e => self.expr(e, want),
        }
    }

    fn else_value(&mut self, e: &syn::Expr, want: Option<Ty>, usage: &str) -> Result<Expr> {
        match e {
            syn::Expr::Block(b) => match &b.block.stmts[..] {
                [syn::Stmt::Expr(t, None)] => self.expr(t, want),
                _ => err(b, usage),
            },
            syn::Expr::If(_) => self.value(e, want),
            other => err(other, usage),
        }
    }

    fn expr(&mut self, e: &syn::Expr, want: Option<Ty>) -> Result<Expr> {
        match e {
            syn::Expr::Lit(l) => lit(&l.lit, want, self.generic),
            syn::Expr::Paren(p) => self.expr(&p.expr, want),
            syn::Expr::Group(g) => self.expr(&g.expr, want),
            syn::Expr::Path(p) => self.path(p),
            syn::Expr::Unary(u) => {
                if matches!(u.op, syn::UnOp::Deref(_)) {
                    return err(
                        u,
                        format!(
                            "`*` (dereference) is not supported in a #[kernel]; {SUPPORTED_EXPRS}"
                        ),
                    );
                }
                let inner = self.expr(&u.expr, want)?;
                match u.op {
                    syn::UnOp::Neg(_) => {
                        if !inner.ty.is_numeric() || (inner.ty.is_int() && !inner.ty.is_signed()) {
                            return err(u, format!("cannot negate a {}", inner.ty.rust()));
                        }
                        // A negative literal stays a literal (and `i32::MIN` fits); `-(-x)`
                        // is `x` (`--x` would be a decrement in C and WGSL), except where
                        // `-MIN` wraps: that stays a negation.
                        let folded = match &inner.kind {
                            ExprKind::Lit(t) => match t.strip_prefix('-') {
                                None => Some(format!("-{t}")),
                                Some(x)
                                    if inner.ty.is_int()
                                        && x.parse::<i128>().ok()
                                            > int_limit(inner.ty, true).parse().ok() =>
                                {
                                    None
                                }
                                Some(x) => Some(x.to_string()),
                            },
                            _ => None,
                        };
                        if let Some(text) = folded {
                            return Ok(Expr {
                                kind: ExprKind::Lit(text),
                                ty: inner.ty,
                            });
                        }
                        let ty = inner.ty;
                        Ok(Expr {
                            kind: ExprKind::Unary(UnOp::Neg, Box::new(inner)),
                            ty,
                        })
                    }
                    syn::UnOp::Not(_) => {
                        if inner.ty.is_float() {
                            return err(u, "`!` is for bool and integers");
                        }
                        let ty = inner.ty;
                        Ok(Expr {
                            kind: ExprKind::Unary(UnOp::Not, Box::new(inner)),
                            ty,
                        })
                    }
                    _ => err(
                        u,
                        format!(
                            "`*` (dereference) is not supported in a #[kernel]; {SUPPORTED_EXPRS}"
                        ),
                    ),
                }
            }
            syn::Expr::Binary(b) => {
                let Some(op) = binop(&b.op) else {
                    return err(b, "an assignment (`+=` ...) is a statement, not a value");
                };
                let operand_want = if op.is_comparison() || matches!(op, BinOp::And | BinOp::Or) {
                    None
                } else {
                    want
                };
                let (l, r) = if matches!(op, BinOp::Shl | BinOp::Shr) {
                    let l = self.expr(&b.left, operand_want)?;
                    let r = self.expr(&b.right, Some(Ty::U32))?;
                    (l, r)
                } else if untyped_lit(&b.left) && !untyped_lit(&b.right) {
                    let r = self.expr(&b.right, operand_want)?;
                    let l = self.expr(&b.left, Some(r.ty))?;
                    (l, r)
                } else {
                    let l = self.expr(&b.left, operand_want)?;
                    let r = self.expr(&b.right, Some(l.ty))?;
                    (l, r)
                };
                check_binary(&b.op, op, &l, &r)?;
                let ty = if op.is_comparison() { Ty::Bool } else { l.ty };
                Ok(Expr {
                    kind: ExprKind::Binary(op, Box::new(l), Box::new(r)),
                    ty,
                })
            }
            syn::Expr::Cast(c) => {
                let to = value_ty(&c.ty)?;
                let inner = self.expr(&c.expr, None)?;
                if inner.ty == Ty::Bool && !to.is_int() && to != Ty::Bool {
                    return err(c, format!("cannot cast bool as {}", to.rust()));
                }
                if to == Ty::Bool && inner.ty != Ty::Bool {
                    return err(c, "cannot cast to bool: compare instead (`x != 0`)");
                }
                Ok(Expr {
                    kind: ExprKind::Cast(Box::new(inner)),
                    ty: to,
                })
            }
            syn::Expr::Index(ix) => {
                let arr = self.array(&ix.expr, false)?;
                let idx = self.index(&ix.index)?;
                let ty = self.arr_ty(arr).compute();
                Ok(Expr {
                    kind: ExprKind::Index {
                        arr,
                        idx: Box::new(idx),
                        proven: false,
                    },
                    ty,
                })
            }
            syn::Expr::MethodCall(m) => self.method(m, want),
            syn::Expr::Call(c) => self.call(c, want),
            syn::Expr::Macro(m) => err(
                m,
                format!("macros are not supported inside a #[kernel]; {SUPPORTED_EXPRS}"),
            ),
            syn::Expr::If(i) => err(
                i,
                "an `if` as a value is only supported as the whole value of a `let` or an \
                 assignment (`let v = if c { a } else { b };`)",
            ),
            other => err(other, format!("{}; {SUPPORTED_EXPRS}", construct(other))),
        }
    }

    fn arr_ty(&self, a: Arr) -> Ty {
        match a {
            Arr::Param(i) => self.params[i].ty,
            Arr::Shared(i) => self.shared[i].ty,
        }
    }

    fn path(&mut self, p: &syn::ExprPath) -> Result<Expr> {
        if let Some(id) = p.path.get_ident() {
            return match self.lookup(&id.to_string()) {
                Some(Binding::Local(l)) => Ok(Expr { kind: ExprKind::Local(l), ty: self.locals[l].ty }),
                Some(Binding::Param(i)) => match self.params[i].kind {
                    ParamKind::Scalar => Ok(Expr { kind: ExprKind::Param(i), ty: self.params[i].ty.compute() }),
                    ParamKind::Slice { .. } => err(
                        id,
                        format!("`{id}` is an array: index it (`{id}[i]`) or ask its length (`{id}.len()`)"),
                    ),
                },
                Some(Binding::Shared(_)) => err(id, format!("`{id}` is a shared array: index it")),
                Some(Binding::Const(text, ty)) => Ok(Expr { kind: ExprKind::Lit(text), ty }),
                Some(Binding::Comptime(i, ty)) => Ok(Expr { kind: ExprKind::Comptime(i), ty }),
                None => err(id, format!("no local, parameter or const named `{id}` in this kernel")),
            };
        }
        // `i32::MAX`, `u32::MIN`, ...
        let segs: Vec<String> = p
            .path
            .segments
            .iter()
            .map(|s| s.ident.to_string())
            .collect();
        if let [t, c] = &segs[..] {
            if let Some(ty) = Ty::from_name(t) {
                if ty.is_int() && (c == "MAX" || c == "MIN") {
                    let v = int_limit(ty, c == "MAX");
                    return Ok(Expr {
                        kind: ExprKind::Lit(v),
                        ty,
                    });
                }
            }
        }
        err(
            p,
            format!("not supported in a #[kernel]; {SUPPORTED_EXPRS}"),
        )
    }

    fn method(&mut self, m: &syn::ExprMethodCall, want: Option<Ty>) -> Result<Expr> {
        let name = m.method.to_string();
        if m.turbofish.is_some() {
            return err(m, "no turbofish on a kernel's methods");
        }
        if name == "len" {
            if !m.args.is_empty() {
                return err(&m.args, "`len()` takes no arguments");
            }
            let arr = self.array(&m.receiver, false)?;
            return Ok(Expr {
                kind: ExprKind::Len(arr),
                ty: Ty::Usize,
            });
        }
        let Some(&(_, math, arity)) = Math::ALL.iter().find(|(n, _, _)| *n == name) else {
            return err(
                &m.method,
                format!("no method `{name}` in a #[kernel]; {SUPPORTED_EXPRS}"),
            );
        };
        if m.args.len() != arity {
            return err(m, format!("`{name}` takes {arity} argument(s)"));
        }
        let recv = if untyped_lit(&m.receiver) {
            // `2.0.powf(x)`: the receiver takes the type of the argument.
            let first = match m.args.first() {
                Some(a) => Some(self.expr(a, want)?.ty),
                None => want,
            };
            self.expr(&m.receiver, first)?
        } else {
            self.expr(&m.receiver, want)?
        };
        if !recv.ty.is_numeric() || (!recv.ty.is_float() && !math.for_ints()) {
            return err(
                &m.method,
                format!(
                    "`{name}` is for {} (found {})",
                    if math.for_ints() {
                        "numbers"
                    } else {
                        "f32 and f64"
                    },
                    recv.ty.rust()
                ),
            );
        }
        if math.u32_only() && recv.ty != Ty::U32 {
            return err(
                &m.method,
                format!("`{name}` is for u32 (found {})", recv.ty.rust()),
            );
        }
        if math == Math::Abs && recv.ty.is_int() && !recv.ty.is_signed() {
            return err(&m.method, format!("{} has no `abs`", recv.ty.rust()));
        }
        let mut args = vec![recv];
        for a in &m.args {
            let v = self.expr(a, Some(args[0].ty))?;
            expect_ty(a, args[0].ty, v.ty)?;
            args.push(v);
        }
        let ty = args[0].ty;
        Ok(Expr {
            kind: ExprKind::Math(math, args),
            ty,
        })
    }

    fn call(&mut self, c: &syn::ExprCall, want: Option<Ty>) -> Result<Expr> {
        let Some(name) = call_name(c) else {
            return self.device_call(c, want);
        };
        let intrinsic = coord(&name).is_some()
            || Lane::from_name(&name).is_some()
            || Collective::from_name(&name).is_some()
            || atomic_op(&name).is_some()
            || name == "barrier"
            || name == "uniform_load"
            || name == "shared";
        if intrinsic && self.device {
            return err(
                &c.func,
                format!(
                    "`{name}` needs a thread: a #[kernel(device)] function has none (pass what \
                     it needs as arguments)"
                ),
            );
        }
        if !intrinsic {
            return self.device_call(c, want);
        }
        if let Some((coord, axis)) = coord(&name) {
            if !c.args.is_empty() {
                return err(&c.args, format!("`{name}()` takes no arguments"));
            }
            return Ok(Expr {
                kind: ExprKind::Coord(coord, axis),
                ty: Ty::Usize,
            });
        }
        if let Some(q) = Lane::from_name(&name) {
            if !c.args.is_empty() {
                return err(&c.args, format!("`{name}()` takes no arguments"));
            }
            return Ok(Expr {
                kind: ExprKind::Lane(q),
                ty: Ty::Usize,
            });
        }
        if name == "uniform_load" {
            return err(
                c,
                "`uniform_load(&t[i])` is the whole value of a `let` of its own \
                 (`let n = uniform_load(&t[i]);`): every thread of the block reaches it, as it \
                 reaches `barrier()`",
            );
        }
        if Collective::from_name(&name).is_some() {
            return err(
                c,
                format!(
                    "`{name}(..)` is the whole value of a `let` of its own (`let r = {name}(..);`): \
                     every thread of the block reaches it, as it reaches `barrier()`"
                ),
            );
        }
        if let Some(op) = atomic_op(&name) {
            let want_args = if op == AtomicOp::Cas { 3 } else { 2 };
            if c.args.len() != want_args {
                return err(
                    c,
                    format!(
                        "`{name}` takes {want_args} arguments: `{name}(&mut a[i], {})`",
                        if op == AtomicOp::Cas {
                            "current, new"
                        } else {
                            "value"
                        }
                    ),
                );
            }
            let target = &c.args[0];
            let usage = format!("the first argument of `{name}` is `&mut a[i]`");
            let syn::Expr::Reference(r) = target else {
                return err(target, usage);
            };
            if r.mutability.is_none() {
                return err(target, usage);
            }
            let syn::Expr::Index(ix) = &*r.expr else {
                return err(target, usage);
            };
            let arr = self.array(&ix.expr, true)?;
            let idx = self.index(&ix.index)?;
            let ty = self.arr_ty(arr);
            let ok = match op {
                AtomicOp::Add => {
                    matches!(
                        ty,
                        Ty::I32 | Ty::U32 | Ty::F32 | Ty::I64 | Ty::U64 | Ty::F64
                    )
                }
                AtomicOp::Exchange => matches!(ty, Ty::I32 | Ty::U32 | Ty::F32),
                AtomicOp::Min | AtomicOp::Max | AtomicOp::Cas => matches!(ty, Ty::I32 | Ty::U32),
            };
            if !ok {
                return err(
                    &ix.expr,
                    format!(
                        "`{name}` works on {} arrays (found {})",
                        match op {
                            AtomicOp::Add => "i32, u32, f32, i64, u64 and f64",
                            AtomicOp::Exchange => "i32, u32 and f32",
                            _ => "i32 and u32",
                        },
                        ty.rust()
                    ),
                );
            }
            let mut args = Vec::new();
            for a in c.args.iter().skip(1) {
                let v = self.expr(a, Some(ty))?;
                expect_ty(a, ty, v.ty)?;
                args.push(v);
            }
            if !self.atomic.contains(&arr) {
                self.atomic.push(arr);
            }
            return Ok(Expr {
                kind: ExprKind::Atomic {
                    op,
                    arr,
                    idx: Box::new(idx),
                    args,
                },
                ty,
            });
        }
        if name == "barrier" {
            return err(c, "`barrier()` is a statement of its own (`barrier();`)");
        }
        if name == "shared" {
            return err(
                c,
                "`shared::<T, N>()` declares a shared array: `let tile = shared::<f32, 256>();`",
            );
        }
        err(&c.func, format!("no intrinsic `{name}`; {SUPPORTED_EXPRS}"))
    }
}

impl Lowerer {
    /// A call of a device function (`#[kernel(device)]`): its arguments typed here, its
    /// result the type the context wants (else the first argument's); the expansion checks
    /// these against the function's signature at the call.
    fn device_call(&mut self, c: &syn::ExprCall, want: Option<Ty>) -> Result<Expr> {
        let usage = "only the kernel intrinsics and #[kernel(device)] functions (by their \
                     path, `helper(x)`) can be called";
        let syn::Expr::Path(p) = &*c.func else {
            return err(&c.func, format!("{usage}; {SUPPORTED_EXPRS}"));
        };
        if p.qself.is_some() || p.path.segments.iter().any(|s| !s.arguments.is_empty()) {
            return err(p, format!("{usage}, without generic arguments"));
        }
        let Some(last) = p.path.segments.last() else {
            return err(p, usage);
        };
        check_name(&last.ident)?;
        // An unsuffixed literal argument takes the type of the first argument that has one
        // (the compiler checks the guess against the function's signature).
        let hint = match c.args.iter().find(|a| !untyped_lit(a)) {
            Some(a) => Some(self.expr(a, None)?.ty),
            None => None,
        };
        let mut args = Vec::new();
        for a in &c.args {
            let v = self.expr(a, hint.or(want))?;
            if !v.ty.is_element() {
                return err(
                    a,
                    format!(
                        "a device function takes element types, not {} (cast it with `as`)",
                        v.ty.rust()
                    ),
                );
            }
            args.push(v);
        }
        let Some(ret) = want.or_else(|| args.first().map(|a| a.ty)) else {
            return err(
                c,
                "the result type of this call is unknown: give it one (`let v: f32 = f();`)",
            );
        };
        if !ret.is_element() {
            return err(
                c,
                format!(
                    "a device function returns an element type, not {}",
                    ret.rust()
                ),
            );
        }
        let path = p.path.to_token_stream().to_string().replace(' ', "");
        let types: Vec<Ty> = args.iter().map(|a| a.ty).collect();
        let i = match self.calls.iter().position(|k| k.path == path) {
            Some(i) => {
                let k = &self.calls[i];
                if k.args != types || k.ret != ret {
                    return err(
                        c,
                        format!(
                            "`{path}` is called here with other types than at its first call \
                             (a device function has one signature)"
                        ),
                    );
                }
                i
            }
            None => {
                self.calls.push(Callee {
                    path,
                    name: last.ident.to_string(),
                    args: types,
                    ret,
                });
                self.call_spans.push(c.span());
                self.calls.len() - 1
            }
        };
        Ok(Expr {
            kind: ExprKind::Call(i, args),
            ty: ret,
        })
    }
}

fn is_block_like(e: &syn::Expr) -> bool {
    matches!(
        e,
        syn::Expr::If(_)
            | syn::Expr::ForLoop(_)
            | syn::Expr::While(_)
            | syn::Expr::Loop(_)
            | syn::Expr::Block(_)
    )
}

fn call_name(c: &syn::ExprCall) -> Option<String> {
    match &*c.func {
        syn::Expr::Path(p) if p.qself.is_none() => {
            let seg = p.path.segments.last()?;
            (p.path.segments.len() == 1).then(|| seg.ident.to_string())
        }
        _ => None,
    }
}

fn is_call_to(c: &syn::ExprCall, name: &str) -> bool {
    call_name(c).as_deref() == Some(name)
}

fn expect_ty(node: impl ToTokens, want: Ty, got: Ty) -> Result<()> {
    if want == got {
        Ok(())
    } else {
        err(
            node,
            format!(
                "expected {}, found {} (kernels convert only with `as`: `... as {}`)",
                want.rust(),
                got.rust(),
                want.rust()
            ),
        )
    }
}

fn binop(op: &syn::BinOp) -> Option<BinOp> {
    use syn::BinOp as B;
    Some(match op {
        B::Add(_) => BinOp::Add,
        B::Sub(_) => BinOp::Sub,
        B::Mul(_) => BinOp::Mul,
        B::Div(_) => BinOp::Div,
        B::Rem(_) => BinOp::Rem,
        B::And(_) => BinOp::And,
        B::Or(_) => BinOp::Or,
        B::BitXor(_) => BinOp::BitXor,
        B::BitAnd(_) => BinOp::BitAnd,
        B::BitOr(_) => BinOp::BitOr,
        B::Shl(_) => BinOp::Shl,
        B::Shr(_) => BinOp::Shr,
        B::Eq(_) => BinOp::Eq,
        B::Lt(_) => BinOp::Lt,
        B::Le(_) => BinOp::Le,
        B::Ne(_) => BinOp::Ne,
        B::Ge(_) => BinOp::Ge,
        B::Gt(_) => BinOp::Gt,
        _ => return None,
    })
}

fn compound(op: &syn::BinOp) -> Option<BinOp> {
    use syn::BinOp as B;
    Some(match op {
        B::AddAssign(_) => BinOp::Add,
        B::SubAssign(_) => BinOp::Sub,
        B::MulAssign(_) => BinOp::Mul,
        B::DivAssign(_) => BinOp::Div,
        B::RemAssign(_) => BinOp::Rem,
        B::BitXorAssign(_) => BinOp::BitXor,
        B::BitAndAssign(_) => BinOp::BitAnd,
        B::BitOrAssign(_) => BinOp::BitOr,
        B::ShlAssign(_) => BinOp::Shl,
        B::ShrAssign(_) => BinOp::Shr,
        _ => return None,
    })
}

fn check_binary(node: &syn::BinOp, op: BinOp, l: &Expr, r: &Expr) -> Result<()> {
    let sym = op.symbol();
    match op {
        BinOp::And | BinOp::Or => {
            if l.ty != Ty::Bool || r.ty != Ty::Bool {
                return err(node, format!("`{sym}` takes two bools"));
            }
        }
        BinOp::Shl | BinOp::Shr => {
            if !l.ty.is_int() || r.ty != Ty::U32 {
                return err(node, format!("`{sym}` shifts an integer by a u32"));
            }
        }
        BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor => {
            if l.ty != r.ty || l.ty.is_float() {
                return err(
                    node,
                    format!(
                        "`{sym}` takes two integers (or two bools) of one type, found {} and {}",
                        l.ty.rust(),
                        r.ty.rust()
                    ),
                );
            }
        }
        _ if op.is_comparison() => {
            if l.ty != r.ty {
                return err(
                    node,
                    format!("`{sym}` compares values of one type, found {} and {} (convert one with `as`)", l.ty.rust(), r.ty.rust()),
                );
            }
            if l.ty == Ty::Bool && !matches!(op, BinOp::Eq | BinOp::Ne) {
                return err(node, format!("`{sym}` does not order bools"));
            }
        }
        _ => {
            if l.ty != r.ty || !l.ty.is_numeric() {
                return err(
                    node,
                    format!("`{sym}` takes two numbers of one type, found {} and {} (convert one with `as`)", l.ty.rust(), r.ty.rust()),
                );
            }
        }
    }
    Ok(())
}

fn int_limit(ty: Ty, max: bool) -> String {
    let v: i128 = match (ty, max) {
        (Ty::I8, true) => i8::MAX.into(),
        (Ty::I8, false) => i8::MIN.into(),
        (Ty::U8, true) => u8::MAX.into(),
        (Ty::I32, true) => i32::MAX.into(),
        (Ty::I32, false) => i32::MIN.into(),
        (Ty::U32, true) => u32::MAX.into(),
        (Ty::I64, true) => i64::MAX.into(),
        (Ty::I64, false) => i64::MIN.into(),
        (Ty::U64, true) => u64::MAX.into(),
        (Ty::Usize, true) => u64::MAX.into(),
        _ => 0,
    };
    v.to_string()
}

fn lit(l: &syn::Lit, want: Option<Ty>, generic: bool) -> Result<Expr> {
    match l {
        syn::Lit::Bool(b) => Ok(Expr {
            kind: ExprKind::Lit(b.value.to_string()),
            ty: Ty::Bool,
        }),
        syn::Lit::Int(i) => {
            let ty = if i.suffix().is_empty() {
                match want {
                    Some(t) if t.is_numeric() => t,
                    _ => Ty::I32,
                }
            } else {
                match Ty::from_name(i.suffix()) {
                    Some(t) if t.is_numeric() => t,
                    _ => return err(i, format!("`{}` is not a kernel type", i.suffix())),
                }
            };
            if ty.is_float() {
                // `1` where a float is expected: Rust refuses it too, but a generic kernel's
                // `x + 1` is meant for every `T`.
                if generic && i.suffix().is_empty() {
                    let v: u64 = i.base10_parse().map_err(|e| Error::new_spanned(i, e))?;
                    return Ok(Expr {
                        kind: ExprKind::Lit(format!("{:?}", v as f64)),
                        ty,
                    });
                }
                if i.suffix().is_empty() {
                    return err(
                        i,
                        format!(
                            "expected {}, found an integer: write `{}.0`",
                            ty.rust(),
                            i.base10_digits()
                        ),
                    );
                }
            }
            let v: u128 = i.base10_parse().map_err(|e| Error::new_spanned(i, e))?;
            let max = int_limit(ty, true).parse::<u128>().unwrap_or(u128::MAX);
            // A negated literal may reach one further (`-128i8`): checked as the value of
            // MIN when it is negated; a plain literal beyond MAX is refused here.
            if ty.is_int() && v > max + u128::from(ty.is_signed()) {
                return err(i, format!("{v} does not fit in {}", ty.rust()));
            }
            Ok(Expr {
                kind: ExprKind::Lit(v.to_string()),
                ty,
            })
        }
        syn::Lit::Float(f) => {
            let ty = if f.suffix().is_empty() {
                match want {
                    Some(t) if t.is_float() => t,
                    Some(t) if t.is_int() => {
                        return err(f, format!("expected {}, found a float literal", t.rust()))
                    }
                    _ => Ty::F64,
                }
            } else {
                match Ty::from_name(f.suffix()) {
                    Some(t) if t.is_float() => t,
                    _ => return err(f, format!("`{}` is not a float type", f.suffix())),
                }
            };
            let v: f64 = f.base10_parse().map_err(|e| Error::new_spanned(f, e))?;
            if !v.is_finite() || (ty == Ty::F32 && (v as f32).is_infinite()) {
                return err(f, format!("{v} is not a finite {}", ty.rust()));
            }
            let text = if ty == Ty::F32 {
                format!("{:?}", v as f32)
            } else {
                format!("{v:?}")
            };
            Ok(Expr {
                kind: ExprKind::Lit(text),
                ty,
            })
        }
        other => err(other, "only numbers and bools are literals in a #[kernel]"),
    }
}

/// Whether `e` can be computed now (a literal, or arithmetic on literals).
fn is_const(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Lit(_) => true,
        ExprKind::Binary(op, l, r) => {
            matches!(
                op,
                BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem
            ) && e.ty.is_int()
                && is_const(l)
                && is_const(r)
                && const_int(e).is_some()
        }
        _ => false,
    }
}

fn const_int(e: &Expr) -> Option<i128> {
    match &e.kind {
        ExprKind::Lit(t) => t.parse().ok(),
        ExprKind::Binary(op, l, r) => {
            let (a, b) = (const_int(l)?, const_int(r)?);
            let v = match op {
                BinOp::Add => a.checked_add(b)?,
                BinOp::Sub => a.checked_sub(b)?,
                BinOp::Mul => a.checked_mul(b)?,
                BinOp::Div => a.checked_div(b)?,
                BinOp::Rem => a.checked_rem(b)?,
                _ => return None,
            };
            let max: i128 = int_limit(e.ty, true).parse().ok()?;
            let min: i128 = int_limit(e.ty, false).parse().ok()?;
            (min..=max).contains(&v).then_some(v)
        }
        _ => None,
    }
}

/// A constant's literal text.
fn const_text(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Lit(t) => t.clone(),
        _ => const_int(e).map(|v| v.to_string()).unwrap_or_default(),
    }
}

#[cfg(test)]
mod proofs;
#[cfg(test)]
mod tests;
