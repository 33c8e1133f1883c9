//! The kernel's CPU twin, as Rust source: a whole launch, block by block.
//!
//! A kernel without `barrier()` runs each block's threads one after another. A kernel with
//! barriers is split at them (as MCUDA and POCL compile GPU kernels for CPUs): the code
//! between two barriers runs for every thread of the block before any thread passes the
//! barrier, so the block's threads really meet there. Locals that live across a barrier
//! are kept per thread; the conditions and bounds of the `if`s and loops that contain a
//! barrier are evaluated by every thread and must agree (as CUDA and WGSL require), which
//! the twin checks: a disagreement fails the launch with `KernelFailed` rather than
//! deadlocking or guessing.

use std::fmt::Write;

use crate::ir::*;

/// The kernel's CPU twin: Rust source of a function that runs a whole launch, generic over
/// `const __RC: bool` (whether it tells the launch's race checker of its accesses) and the
/// kernel's compile-time parameters.
pub fn generate(k: &Kernel) -> String {
    let mut g = Gen {
        k,
        out: String::new(),
        tmp: 0,
    };
    let tuple: Vec<String> = k
        .params
        .iter()
        .map(|p| match p.kind {
            ParamKind::Slice { mutable: true, .. } => format!("&mut [{}]", p.ty.rust_path()),
            ParamKind::Slice { mutable: false, .. } => format!("&[{}]", p.ty.rust_path()),
            ParamKind::Scalar => p.ty.rust_path().to_owned(),
        })
        .collect();
    let _ = writeln!(
        g.out,
        "#[allow(unused, unused_mut, unused_variables, unused_labels, unused_parens, unused_braces, clippy::all)]\n\
         fn __twin<const __RC: bool, {}>(__cfg: &::gpukit::core::LaunchConfig, __args: &mut ({},), __f: &::gpukit::core::KernelFaults<'_>) -> ::core::result::Result<(), ::std::string::String> {{",
        k.comptime
            .iter()
            .map(|c| format!("const {}: {}", c.name, c.ty.rust()))
            .collect::<Vec<_>>()
            .join(", "),
        tuple.join(", ")
    );
    let binds: Vec<String> = (0..k.params.len()).map(|i| format!("__p{i}")).collect();
    let _ = writeln!(g.out, "let ({},) = __args;", binds.join(", "));
    // Instantiated twice: with `__RC` false (the checker's calls compiled out) and true.
    g.out.push_str(
        "let __rc: ::core::option::Option<&::gpukit::core::RaceCheck> = if __RC { __f.race() } else { ::core::option::Option::None };\n",
    );
    for (i, p) in k.params.iter().enumerate() {
        let t = p.ty.rust_path();
        let _ = match p.kind {
            ParamKind::Slice { mutable: true, .. } => {
                writeln!(g.out, "let {}: &mut [{t}] = &mut **__p{i};", p.name)
            }
            ParamKind::Slice { mutable: false, .. } => {
                writeln!(g.out, "let {}: &[{t}] = *__p{i};", p.name)
            }
            ParamKind::Scalar if p.ty.is_half() => {
                writeln!(g.out, "let {}: f32 = (*__p{i}).to_f32();", p.name)
            }
            ParamKind::Scalar => writeln!(g.out, "let {}: {t} = *__p{i};", p.name),
        };
    }
    g.out.push_str(
        "let [__gx, __gy, __gz] = __cfg.grid.map(|v| v as usize);\n\
         let [__bdx, __bdy, __bdz] = __cfg.block.map(|v| v as usize);\n\
         let __nthreads = __bdx * __bdy * __bdz;\n",
    );
    for s in &k.shared {
        let len = match s.len {
            Extent::Fixed(n) => n.to_string(),
            Extent::Comptime(i) => {
                // Checked before it is allocated: the GPU targets refuse to compile it.
                let name = &k.comptime[i].name;
                let _ = writeln!(
                    g.out,
                    "if !(1..=65536).contains(&({name} as u64)) {{ return ::core::result::Result::Err(::std::format!(\"the shared array `{}` holds 1 to 65536 elements, not {name} = {{}}\", {name})); }}",
                    s.name
                );
                format!("({name} as usize)")
            }
        };
        let _ = writeln!(
            g.out,
            "let mut {}: ::std::vec::Vec<{t}> = ::std::vec![<{t}>::default(); {len}];",
            s.name,
            t = s.ty.rust()
        );
    }
    for l in &k.locals {
        if l.storage == Storage::PerThread {
            let _ = writeln!(
                g.out,
                "let mut __pt_{}: ::std::vec::Vec<{t}> = ::std::vec![<{t}>::default(); __nthreads];",
                l.name,
                t = l.ty.rust()
            );
        }
    }
    g.out.push_str(
        "for __bz in 0..__gz { for __by in 0..__gy { for __bx in 0..__gx {\n\
         if let ::core::option::Option::Some(__r) = __rc { __r.block((__bz * __gy + __by) * __gx + __bx); }\n",
    );
    g.block_level(&k.body);
    g.out.push_str("}}}\n::core::result::Result::Ok(())\n}\n");
    g.out
}

/// A device function as the Rust function it is on the host and in CPU twins: its body with
/// the GPU's integer semantics (the signature is the caller's to write).
pub fn device_body(k: &Kernel) -> String {
    let mut g = Gen {
        k,
        out: String::new(),
        tmp: 0,
    };
    g.stmts(&k.body);
    g.out
}

const THREADS: &str = "for __tz in 0..__bdz { for __ty in 0..__bdy { for __tx in 0..__bdx {\n\
                       let __tid = (__tz * __bdy + __ty) * __bdx + __tx;\n";

struct Gen<'k> {
    k: &'k Kernel,
    out: String,
    tmp: usize,
}

fn zero(t: Ty) -> String {
    format!("<{}>::default()", t.rust())
}

impl Gen<'_> {
    fn fresh(&mut self) -> String {
        self.tmp += 1;
        format!("__u{}", self.tmp)
    }

    /// Statements of the block's code: runs of barrier-free statements become loops over
    /// the block's threads; the statements that contain barriers are split further.
    fn block_level(&mut self, stmts: &[Stmt]) {
        let mut run: Vec<&Stmt> = Vec::new();
        for s in stmts {
            if !s.has_barrier() {
                run.push(s);
                continue;
            }
            self.flush(&mut run);
            match s {
                Stmt::Barrier => self.out.push_str(
                    "if let ::core::option::Option::Some(__r) = __rc { __r.barrier(); }\n",
                ),
                Stmt::Block(b) => {
                    self.out.push_str("{\n");
                    self.block_level(b);
                    self.out.push_str("}\n");
                }
                Stmt::If { cond, then, els } => {
                    let c = self.uniform(cond);
                    let _ = writeln!(self.out, "if {c} {{");
                    self.block_level(then);
                    self.out.push_str("} else {\n");
                    self.block_level(els);
                    self.out.push_str("}\n");
                }
                Stmt::For {
                    var,
                    start,
                    end,
                    step,
                    body,
                } => {
                    let l = &self.k.locals[*var];
                    let (name, t) = (l.name.clone(), l.ty.rust());
                    let s0 = self.uniform(start);
                    let e0 = self.uniform(end);
                    let st = match step {
                        Some(s) => self.uniform(s),
                        None => "1usize".into(),
                    };
                    let kv = self.fresh();
                    let _ = writeln!(
                        self.out,
                        "let mut {kv}: {t} = {s0};\nwhile {kv} < {e0} {{\nlet {name}: {t} = {kv};"
                    );
                    self.block_level(body);
                    let _ = writeln!(
                        self.out,
                        "if (({e0} as i128) - ({kv} as i128)) as u128 <= {st} as u128 {{ break; }}\n\
                         {kv} = (({kv} as i128) + ({st} as i128)) as {t};\n}}"
                    );
                }
                Stmt::While { cond, body } => {
                    self.out.push_str("loop {\n");
                    let c = self.uniform(cond);
                    let _ = writeln!(self.out, "if !{c} {{ break; }}");
                    self.block_level(body);
                    self.out.push_str("}\n");
                }
                Stmt::Collective {
                    local,
                    op,
                    value,
                    lane,
                } => self.collective(*local, *op, value, lane.as_ref()),
                // The lowering refuses barriers anywhere else.
                _ => {}
            }
        }
        self.flush(&mut run);
    }

    /// One run of barrier-free statements, for every thread of the block. The per-thread
    /// locals it uses are copied into plain locals first and back after, so that the
    /// thread's code works on registers, as a GPU thread's does.
    fn flush(&mut self, run: &mut Vec<&Stmt>) {
        if run.is_empty() {
            return;
        }
        let mut used = Vec::new();
        for s in run.iter() {
            per_thread_locals(self.k, std::slice::from_ref(*s), &mut used);
        }
        self.out.push_str(THREADS);
        for &l in &used {
            let local = &self.k.locals[l];
            let _ = writeln!(
                self.out,
                "let mut {n}: {t} = __pt_{n}[__tid];",
                n = local.name,
                t = local.ty.rust()
            );
        }
        self.out.push_str("'__thread: {\n");
        for s in run.drain(..) {
            self.stmt(s);
        }
        self.out.push_str("}\n");
        for &l in &used {
            let name = &self.k.locals[l].name;
            let _ = writeln!(self.out, "__pt_{name}[__tid] = {name};");
        }
        self.out.push_str("}}}\n");
    }

    /// Evaluates `e` in every thread of the block, checks that all agree, and binds the
    /// value to a fresh name (returned).
    fn uniform(&mut self, e: &Expr) -> String {
        let name = self.fresh();
        let t = e.ty.rust();
        let v = self.expr(e);
        let mut used = Vec::new();
        expr_locals(self.k, e, &mut used);
        let loads = self.loads(&used);
        let _ = writeln!(
            self.out,
            "let {name}: {t} = {{\nlet mut __seen: ::core::option::Option<{t}> = ::core::option::Option::None;\n{THREADS}{loads}\
             let __x: {t} = {v};\n\
             match __seen {{ ::core::option::Option::None => __seen = ::core::option::Option::Some(__x), ::core::option::Option::Some(__p) if __p == __x => {{}}, ::core::option::Option::Some(__p) => return ::core::result::Result::Err(::std::format!(\"the threads of block ({{__bx}}, {{__by}}, {{__bz}}) disagree on the condition or bound of an `if` or loop that contains `barrier()` or a subgroup collective ({{:?}} and {{:?}}): every thread of a block must reach the same barriers and collectives\", __p, __x)), }}\n\
             }}}}}}\n__seen.unwrap_or_default()\n}};"
        );
        name
    }

    /// A collective: every thread of the block evaluates its value (and lane), then each
    /// subgroup's lanes get their results.
    fn collective(&mut self, local: usize, op: Collective, value: &Expr, lane: Option<&Expr>) {
        let t = value.ty.rust();
        let name = self.k.locals[local].name.clone();
        let v = self.expr(value);
        let lv = lane.map(|l| self.expr(l));
        let mut used = Vec::new();
        expr_locals(self.k, value, &mut used);
        if let Some(l) = lane {
            expr_locals(self.k, l, &mut used);
        }
        let loads = self.loads(&used);
        let _ = writeln!(
            self.out,
            "{{\nlet mut __cv: ::std::vec::Vec<{t}> = ::std::vec![<{t}>::default(); __nthreads];\n\
             let mut __cl: ::std::vec::Vec<usize> = ::std::vec![0usize; __nthreads];\n\
             {THREADS}{loads}__cv[__tid] = {v};\n__cl[__tid] = {};\n}}}}}}",
            lv.as_deref().unwrap_or("0usize")
        );
        let fold = |f: &str| {
            format!(
                "let mut __a: {t} = __cv[__w0];\nfor __j in 1..__n {{ let (__x, __y): ({t}, {t}) = (__a, __cv[__w0 + __j]); __a = {f}; }}\n"
            )
        };
        let (pre, each) = match op {
            Collective::Add => (
                fold(&binary(BinOp::Add, value.ty, "__x", "__y")),
                "__a".to_string(),
            ),
            Collective::Min | Collective::Max if value.ty.is_float() => {
                let cmp = if op == Collective::Min { "<" } else { ">" };
                (
                    fold(&format!(
                        "if __y {cmp} __x || (__x.is_nan() && !__y.is_nan()) {{ __y }} else {{ __x }}"
                    )),
                    "__a".to_string(),
                )
            }
            Collective::Min => (fold("__x.min(__y)"), "__a".to_string()),
            Collective::Max => (fold("__x.max(__y)"), "__a".to_string()),
            Collective::Any => (
                String::new(),
                "__cv[__w0..__w0 + __n].iter().any(|&__b| __b)".to_string(),
            ),
            Collective::All => (
                String::new(),
                "__cv[__w0..__w0 + __n].iter().all(|&__b| __b)".to_string(),
            ),
            // From lane 0's value on, in lane order (0 on lane 0 for the exclusive sum).
            Collective::InclusiveAdd | Collective::ExclusiveAdd => {
                let add = binary(BinOp::Add, value.ty, "__s", "__cv[__w0 + __j]");
                let sum = |upto: &str| {
                    format!("{{ let mut __s: {t} = __cv[__w0]; for __j in 1..{upto} {{ __s = {add}; }} __s }}")
                };
                let each = if op == Collective::InclusiveAdd {
                    sum("=__l")
                } else {
                    format!("if __l == 0 {{ <{t}>::default() }} else {}", sum("__l"))
                };
                (String::new(), each)
            }
            _ => {
                let src = match op {
                    Collective::Shuffle => "__cl[__w0 + __l]",
                    Collective::ShuffleXor => "__l ^ __cl[__w0 + __l]",
                    Collective::ShuffleUp => {
                        "if __cl[__w0 + __l] <= __l { __l - __cl[__w0 + __l] } else { __n }"
                    }
                    _ => "__l.checked_add(__cl[__w0 + __l]).unwrap_or(__n)",
                };
                (
                    String::new(),
                    format!("{{ let __s: usize = {src}; if __s < __n {{ __cv[__w0 + __s] }} else {{ __cv[__w0 + __l] }} }}"),
                )
            }
        };
        let _ = writeln!(
            self.out,
            "let mut __w0 = 0usize;\nwhile __w0 < __nthreads {{\nlet __n = (__nthreads - __w0).min({TWIN_SUBGROUP});\n{pre}\
             for __l in 0..__n {{ __pt_{name}[__w0 + __l] = {each}; }}\n__w0 += {TWIN_SUBGROUP};\n}}\n}}"
        );
    }

    /// What the race checker is told of the current thread's access of kind `kind` (an
    /// `Access` variant) to element `__i` of `arr`, of length `len`, when the launch runs
    /// under one.
    fn race(&self, arr: Arr, kind: &str, len: &str) -> String {
        format!(
            "if let ::core::option::Option::Some(__r) = __rc {{ __r.access({}, {}, __i, {len}, __tid, ::gpukit::core::__Access::{kind}); }} ",
            self.k.arr_number(arr),
            matches!(arr, Arr::Shared(_)),
        )
    }

    /// The current thread's values of the per-thread locals `used`, bound to their names.
    fn loads(&self, used: &[usize]) -> String {
        used.iter()
            .map(|&l| {
                let n = &self.k.locals[l].name;
                format!(
                    "let {n}: {} = __pt_{n}[__tid];\n",
                    self.k.locals[l].ty.rust()
                )
            })
            .collect()
    }

    /// A local by name: per-thread ones are loaded at the start of each run (`flush`).
    fn local(&self, l: usize) -> String {
        self.k.locals[l].name.clone()
    }

    fn stmts(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    /// A statement of one thread's code.
    fn stmt(&mut self, s: &Stmt) {
        match s {
            Stmt::Let { local, init } => {
                let l = &self.k.locals[*local];
                let v = self.expr(init);
                match l.storage {
                    // Loaded at the start of the run (see `flush`).
                    Storage::PerThread => {
                        let _ = writeln!(self.out, "{} = {v};", l.name);
                    }
                    _ => {
                        let m = if l.mutable { "mut " } else { "" };
                        let _ = writeln!(self.out, "let {m}{}: {} = {v};", l.name, l.ty.rust());
                    }
                }
            }
            Stmt::Assign { place, op, value } => match place {
                Place::Local(l) => {
                    let ty = self.k.locals[*l].ty;
                    let name = self.local(*l);
                    let v = self.expr(value);
                    match op {
                        Some(op) => {
                            let vty = if matches!(op, BinOp::Shl | BinOp::Shr) {
                                Ty::U32
                            } else {
                                ty
                            };
                            let stored = binary(*op, ty, &name, "__v");
                            let _ = writeln!(
                                self.out,
                                "{{ let __v: {} = {v}; {name} = {stored}; }}",
                                vty.rust()
                            );
                        }
                        None => {
                            let _ = writeln!(self.out, "{name} = {v};");
                        }
                    }
                }
                Place::Index { arr, idx, .. } => {
                    let ty = self.k.arr_ty(*arr);
                    let vty = if matches!(op, Some(BinOp::Shl | BinOp::Shr)) {
                        Ty::U32
                    } else {
                        ty.compute()
                    };
                    let v = self.expr(value);
                    let i = self.expr(idx);
                    let a = self.k.arr_name(*arr).to_owned();
                    // An f16 or bf16 element is read as an f32 and rounded back.
                    let old = if ty.is_half() { "__p.to_f32()" } else { "*__p" };
                    let stored = match op {
                        Some(op) => binary(*op, ty.compute(), old, "__v"),
                        None => "__v".into(),
                    };
                    let stored = if ty.is_half() {
                        format!("{}::from_f32({stored})", ty.rust_path())
                    } else {
                        stored
                    };
                    let mut race = String::new();
                    if op.is_some() {
                        race.push_str(&self.race(*arr, "Read", "__n"));
                    }
                    race.push_str(&self.race(*arr, "Write", "__n"));
                    let _ = writeln!(
                        self.out,
                        "{{ let __v: {} = {v}; let __i: usize = {i}; let __n = {a}.len(); match {a}.get_mut(__i) {{ ::core::option::Option::Some(__p) => {{ {race}*__p = {stored}; }} ::core::option::Option::None => __f.fault({}, __i as u64, __n as u64), }} }}",
                        vty.rust(),
                        self.k.arr_number(*arr)
                    );
                }
            },
            Stmt::Expr(e) => {
                let v = self.expr(e);
                let _ = writeln!(self.out, "let _ = {v};");
            }
            Stmt::Block(b) => {
                self.out.push_str("{\n");
                self.stmts(b);
                self.out.push_str("}\n");
            }
            Stmt::If { cond, then, els } => {
                let c = self.expr(cond);
                let _ = writeln!(self.out, "if {c} {{");
                self.stmts(then);
                self.out.push_str("} else {\n");
                self.stmts(els);
                self.out.push_str("}\n");
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                let l = &self.k.locals[*var];
                let name = l.name.clone();
                let (s0, e0) = (self.expr(start), self.expr(end));
                match step {
                    Some(step) => {
                        let step = self.expr(step);
                        let _ = writeln!(self.out, "for {name} in ({s0}..{e0}).step_by({step}) {{");
                    }
                    None => {
                        let _ = writeln!(self.out, "for {name} in {s0}..{e0} {{");
                    }
                }
                self.stmts(body);
                self.out.push_str("}\n");
            }
            Stmt::While { cond, body } => {
                let c = self.expr(cond);
                let _ = writeln!(self.out, "while {c} {{");
                self.stmts(body);
                self.out.push_str("}\n");
            }
            Stmt::Loop(body) => {
                self.out.push_str("loop {\n");
                self.stmts(body);
                self.out.push_str("}\n");
            }
            Stmt::Break => self.out.push_str("break;\n"),
            Stmt::Continue => self.out.push_str("continue;\n"),
            Stmt::Return(None) => self.out.push_str("break '__thread;\n"),
            Stmt::Return(Some(e)) => {
                let v = self.expr(e);
                let _ = writeln!(self.out, "return {v};");
            }
            Stmt::Barrier => {}
            Stmt::Report { what, index, len } => {
                let (i, n) = (self.expr(index), self.expr(len));
                let _ = writeln!(
                    self.out,
                    "__f.fault({}, ({i}) as u64, ({n}) as u64);",
                    self.k.report_number(*what)
                );
            }
            // Split out by `block_level`: a collective is never part of one thread's code.
            Stmt::Collective { .. } => {}
        }
    }

    fn expr(&mut self, e: &Expr) -> String {
        match &e.kind {
            ExprKind::Lit(t) if e.ty == Ty::Bool => t.clone(),
            ExprKind::Lit(t) => format!("({t}{})", e.ty.rust()),
            ExprKind::Local(l) => self.local(*l),
            ExprKind::Param(p) => self.k.params[*p].name.clone(),
            ExprKind::Index { arr, idx, .. } => {
                let i = self.expr(idx);
                let a = self.k.arr_name(*arr);
                let race = self.race(*arr, "Read", &format!("{a}.len()"));
                format!(
                    "{{ let __i: usize = {i}; match {a}.get(__i) {{ ::core::option::Option::Some(__v) => {{ {race}{} }}, ::core::option::Option::None => {{ __f.fault({}, __i as u64, {a}.len() as u64); {} }} }} }}",
                    if self.k.arr_ty(*arr).is_half() { "__v.to_f32()" } else { "*__v" },
                    self.k.arr_number(*arr),
                    zero(e.ty)
                )
            }
            ExprKind::Len(a) => format!("{}.len()", self.k.arr_name(*a)),
            ExprKind::Unary(op, a) => {
                let v = self.expr(a);
                match (op, a.ty) {
                    (UnOp::Neg, t) if t.is_float() => format!("(-{v})"),
                    (UnOp::Neg, _) => format!("({v}).wrapping_neg()"),
                    (UnOp::Not, _) => format!("(!{v})"),
                }
            }
            ExprKind::Binary(op, l, r) => {
                let (a, b) = (self.expr(l), self.expr(r));
                binary(*op, l.ty, &a, &b)
            }
            ExprKind::Cast(a) => {
                let v = self.expr(a);
                format!("(({v}) as {})", e.ty.rust())
            }
            ExprKind::RoundOdd(a) => {
                let v = self.expr(a);
                match a.ty {
                    Ty::I64 | Ty::U64 | Ty::Usize => {
                        format!("::gpukit::core::__odd_f32_int(({v}) as i128)")
                    }
                    // Exact as f64.
                    _ => format!("::gpukit::core::__odd_f32(({v}) as f64)"),
                }
            }
            ExprKind::Math(m, args) => {
                let vs: Vec<String> = args.iter().map(|a| self.expr(a)).collect();
                if *m == Math::Abs && e.ty.is_int() {
                    return format!("({}).wrapping_abs()", vs[0]);
                }
                if *m == Math::MulHi {
                    return format!(
                        "(((u64::from({}) * u64::from({})) >> 32) as u32)",
                        vs[0], vs[1]
                    );
                }
                if matches!(m, Math::Min | Math::Max) && e.ty.is_float() {
                    // Not `f32::min`: of two equal values (0.0 and -0.0) the receiver wins, as
                    // on every target.
                    let cmp = if *m == Math::Min { "<" } else { ">" };
                    return format!(
                        "{{ let (__ma, __mb): ({t}, {t}) = ({}, {}); if __mb {cmp} __ma || (__ma.is_nan() && !__mb.is_nan()) {{ __mb }} else {{ __ma }} }}",
                        vs[0],
                        vs[1],
                        t = e.ty.rust()
                    );
                }
                format!("({}).{}({})", vs[0], m.rust(), vs[1..].join(", "))
            }
            ExprKind::Coord(c, axis) => {
                let a = ["x", "y", "z"][*axis];
                let (g, b, t) = (
                    ["__gx", "__gy", "__gz"][*axis],
                    ["__bdx", "__bdy", "__bdz"][*axis],
                    ["__tx", "__ty", "__tz"][*axis],
                );
                let bi = ["__bx", "__by", "__bz"][*axis];
                let _ = a;
                match c {
                    Coord::Global => format!("({bi} * {b} + {t})"),
                    Coord::Thread => t.to_owned(),
                    Coord::Block => bi.to_owned(),
                    Coord::BlockDim => b.to_owned(),
                    Coord::GridDim => g.to_owned(),
                }
            }
            ExprKind::IfElse(c, a, b) => {
                let (c, a, b) = (self.expr(c), self.expr(a), self.expr(b));
                format!("(if {c} {{ {a} }} else {{ {b} }})")
            }
            ExprKind::Comptime(i) => self.k.comptime[*i].name.clone(),
            ExprKind::Lane(q) => match q {
                Lane::Size => format!("{TWIN_SUBGROUP}usize"),
                Lane::Lane => format!("(__tid % {TWIN_SUBGROUP})"),
                Lane::Id => format!("(__tid / {TWIN_SUBGROUP})"),
                Lane::Count => format!("__nthreads.div_ceil({TWIN_SUBGROUP})"),
            },
            ExprKind::Call(callee, args) => {
                let vs: Vec<String> = args.iter().map(|a| self.expr(a)).collect();
                format!("{}({})", self.k.calls[*callee].path, vs.join(", "))
            }
            ExprKind::Atomic { op, arr, idx, args } => {
                let i = self.expr(idx);
                let vs: Vec<String> = args.iter().map(|a| self.expr(a)).collect();
                let a = self.k.arr_name(*arr).to_owned();
                let t = e.ty;
                let new = match op {
                    AtomicOp::Add if t.is_float() => "__old + __a".to_string(),
                    AtomicOp::Add => "__old.wrapping_add(__a)".to_string(),
                    AtomicOp::Min => "__old.min(__a)".to_string(),
                    AtomicOp::Max => "__old.max(__a)".to_string(),
                    AtomicOp::Exchange => "__a".to_string(),
                    AtomicOp::Cas => "if __old == __a { __b } else { __old }".to_string(),
                };
                let b = vs
                    .get(1)
                    .map(|b| format!("let __b: {} = {b};", t.rust()))
                    .unwrap_or_default();
                let race = self.race(*arr, "Atomic", "__n");
                format!(
                    "{{ let __a: {ty} = {}; {b} let __i: usize = {i}; let __n = {a}.len(); match {a}.get_mut(__i) {{ ::core::option::Option::Some(__p) => {{ {race}let __old: {ty} = *__p; *__p = {new}; __old }} ::core::option::Option::None => {{ __f.fault({}, __i as u64, __n as u64); {} }} }} }}",
                    vs[0],
                    self.k.arr_number(*arr),
                    zero(t),
                    ty = t.rust(),
                )
            }
        }
    }
}

/// `a op b` with the language's integer semantics: wrapping arithmetic, division by zero
/// gives 0 (remainder 0), shifts take the amount modulo the width.
fn binary(op: BinOp, t: Ty, a: &str, b: &str) -> String {
    let sym = op.symbol();
    if op.is_comparison() || matches!(op, BinOp::And | BinOp::Or) || t.is_float() || t == Ty::Bool {
        return format!("({a} {sym} {b})");
    }
    match op {
        BinOp::Add => format!("({a}).wrapping_add({b})"),
        BinOp::Sub => format!("({a}).wrapping_sub({b})"),
        BinOp::Mul => format!("({a}).wrapping_mul({b})"),
        BinOp::Div => format!(
            "{{ let (__x, __y): ({t}, {t}) = ({a}, {b}); if __y == 0 {{ 0 }} else {{ __x.wrapping_div(__y) }} }}",
            t = t.rust()
        ),
        BinOp::Rem => format!(
            "{{ let (__x, __y): ({t}, {t}) = ({a}, {b}); if __y == 0 {{ 0 }} else {{ __x.wrapping_rem(__y) }} }}",
            t = t.rust()
        ),
        BinOp::Shl => format!("({a}).wrapping_shl({b})"),
        BinOp::Shr => format!("({a}).wrapping_shr({b})"),
        _ => format!("({a} {sym} {b})"),
    }
}

/// The per-thread locals that `stmts` use (declare, read or assign), in order.
fn per_thread_locals(k: &Kernel, stmts: &[Stmt], out: &mut Vec<usize>) {
    walk(stmts, &mut |v| {
        let l = match v {
            Visit::Stmt(Stmt::Let { local, .. }) => *local,
            Visit::Stmt(Stmt::Assign {
                place: Place::Local(l),
                ..
            }) => *l,
            Visit::Expr(Expr {
                kind: ExprKind::Local(l),
                ..
            }) => *l,
            _ => return,
        };
        if k.locals[l].storage == Storage::PerThread && !out.contains(&l) {
            out.push(l);
        }
    });
}

/// The per-thread locals that `e` reads, added to `out`.
fn expr_locals(k: &Kernel, e: &Expr, out: &mut Vec<usize>) {
    walk_expr(e, &mut |v| {
        if let Visit::Expr(Expr {
            kind: ExprKind::Local(l),
            ..
        }) = v
        {
            if k.locals[*l].storage == Storage::PerThread && !out.contains(l) {
                out.push(*l);
            }
        }
    });
}
