//! Fuzz target `kernel_codegen`: random programs through `#[kernel]`'s compiler (the front
//! end, `gpukit-macros`' modules `lower` and `generic`, compiled into this target by
//! `#[path]`: a proc-macro crate exports nothing but its macros; then the emitters of
//! gpukit-kernel).
//!
//! The input is either Rust text (a first byte of `0xFF`: the hand-written seeds, the
//! README's and `examples/kernels.rs`'s kernels) or, decoded through
//! `arbitrary::Unstructured`, a program of the language's subset: up to two device functions
//! (`#[kernel(device)]`, scalars in, a scalar out, the second may call the first) and a
//! kernel, sometimes generic (`T: Float` or `T: Numeric`), with 1 to 6 slice and scalar
//! parameters of every type, and a body of `let` (typed, tuple, `if`/`else` values), `const`,
//! assignments and compound assignments to locals and elements, `if`/`else if`/`else`,
//! `for` over ranges (and `step_by`), `while`, `loop` with `break`, `continue`, `return`,
//! `barrier()`, `shared::<T, N>()`, atomics and device calls, over expressions built by type
//! (literals at the types' edges, arithmetic, comparisons, logic, bit operations and shifts,
//! casts, `T::MIN`/`T::MAX`, the math methods, `len()`, the thread coordinates, indexing).
//! About one choice in fifty is deliberately wrong (a type mismatch, an unknown name or
//! method, a macro, a closure, a reference, a misplaced `break`, ...), so rejections are
//! fuzzed as well as code generation.
//!
//! Properties: the compiler never panics; a refused function's error has a non-empty
//! message; an accepted one yields CUDA C with its entry point (`__global__ void name(`), a
//! CPU twin that is valid Rust (it tokenizes, and for one program in four `syn` parses it as
//! a function; a device function's body as a block), and either WGSL or the reason it has none. Where the program is one rustc would
//! also accept as far as the macro can tell (every device function it calls exists with the
//! signature the call assumes), the WGSL, checked and unchecked, linked after the device
//! functions it calls as `DeviceFn::link` does, parses and validates with naga (the version
//! wgpu uses, with the `IMMEDIATES` capability gpukit-wgpu requires) and has the kernel as a
//! compute entry point. That the twin and the WGSL compute the same values is not checked
//! here: the twin is Rust source that only rustc can run, and the WGSL needs a GPU; the
//! examples' tests compare them on lavapipe.
#![no_main]

use gpukit_kernel::{cuda, ir, twin, wgsl};

// The front end's own files, formatted with their crate (`rustfmt::skip`: rustfmt would look
// for `lower`'s test module beside this file).
#[allow(dead_code)]
#[rustfmt::skip]
#[path = "../../crates/gpukit-macros/src/generic.rs"]
mod generic;
#[allow(dead_code)]
#[rustfmt::skip]
#[path = "../../crates/gpukit-macros/src/lower.rs"]
mod lower;

use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};
use libfuzzer_sys::fuzz_target;

// ---------------------------------------------------------------------------------------
// Checking a program.

/// A device function as compiled: its name, signature and WGSL (or why none).
struct Device {
    name: String,
    args: Vec<ir::Ty>,
    ret: ir::Ty,
    wgsl: Result<String, &'static str>,
    calls: Vec<String>,
}

fn refused(what: &str, e: &syn::Error, src: &str) {
    let msg = e.to_string();
    assert!(!msg.trim().is_empty(), "{what}: an empty error\n{src}");
    // What the macro emits for it.
    let _ = e.to_compile_error();
}

/// `checked`: the WGSL with its bounds checks; without them (`KernelSpec::unchecked`, whose
/// contract is that every access is in bounds) a constant index naga sees is out of bounds
/// (`x[usize::MAX]`) is the program's fault, and naga's refusal of it fine.
fn validate(wgsl: &str, entry: Option<&str>, src: &str, checked: bool) {
    let module = match naga::front::wgsl::parse_str(wgsl) {
        Ok(m) => m,
        Err(e) if !checked && e.message().contains("Accessing index") => return,
        Err(e) => panic!(
            "generated WGSL does not parse:\n{}\n--- program:\n{src}\n--- WGSL:\n{wgsl}",
            e.emit_to_string(wgsl)
        ),
    };
    let mut v = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        // The shader features gpukit-wgpu turns on where the adapter has them.
        naga::valid::Capabilities::IMMEDIATES
            | naga::valid::Capabilities::FLOAT64
            | naga::valid::Capabilities::SHADER_INT64
            | naga::valid::Capabilities::SHADER_FLOAT16
            | naga::valid::Capabilities::SUBGROUP,
    );
    if let Err(e) = v.validate(&module) {
        let shown = e.emit_to_string(wgsl);
        if !checked && shown.contains("Accessing index") && shown.contains("bounds") {
            return;
        }
        panic!(
            "generated WGSL does not validate:\n{}\n--- program:\n{src}\n--- WGSL:\n{wgsl}",
            shown
        );
    }
    if let Some(name) = entry {
        assert!(
            module
                .entry_points
                .iter()
                .any(|e| e.name == name && e.stage == naga::ShaderStage::Compute),
            "no `@compute fn {name}` in the WGSL\n{wgsl}"
        );
    }
}

/// The device functions `calls` reach, each once, callees first (`DeviceFn::link`'s order);
/// `None` when one is missing or has another signature than the call assumes (rustc refuses
/// such a program).
fn linked<'d>(
    devices: &'d [Device],
    calls: &[(String, Vec<ir::Ty>, ir::Ty)],
) -> Option<Vec<&'d Device>> {
    fn visit<'d>(devices: &'d [Device], name: &str, order: &mut Vec<&'d Device>) {
        if order.iter().any(|d| d.name == name) {
            return;
        }
        if let Some(d) = devices.iter().find(|d| d.name == name) {
            for c in &d.calls {
                visit(devices, c, order);
            }
            order.push(d);
        }
    }
    let mut order = Vec::new();
    for (name, args, ret) in calls {
        let d = devices.iter().find(|d| d.name == *name)?;
        if d.args != *args || d.ret != *ret {
            return None;
        }
        visit(devices, name, &mut order);
    }
    Some(order)
}

fn callees(k: &ir::Kernel) -> Vec<(String, Vec<ir::Ty>, ir::Ty)> {
    k.calls
        .iter()
        .map(|c| (c.path.clone(), c.args.clone(), c.ret))
        .collect()
}

fn device(f: &syn::ItemFn, devices: &mut Vec<Device>, src: &str) -> bool {
    let k = match lower::lower_as(f, false, true) {
        Ok(k) => k,
        Err(e) => {
            refused("device function", &e, src);
            return false;
        }
    };
    let body = twin::device_body(&k);
    if let Err(e) = syn::parse_str::<syn::Block>(&format!("{{\n{body}\n}}")) {
        panic!("a device function's Rust is not Rust: {e}\n{body}\n--- program:\n{src}");
    }
    assert!(!cuda::device(&k).is_empty());
    // Its callees must exist, with the signature the calls assume, as rustc checks.
    let calls = callees(&k);
    if linked(devices, &calls).is_none() {
        return false;
    }
    devices.push(Device {
        name: k.name.clone(),
        args: k.params.iter().map(|p| p.ty).collect(),
        ret: k.ret.unwrap_or(ir::Ty::F32),
        wgsl: wgsl::device(&k),
        calls: calls.into_iter().map(|c| c.0).collect(),
    });
    true
}

/// One kernel (one instantiation of a generic one) through the three generators.
fn kernel(f: &syn::ItemFn, generic: bool, devices: &[Device], src: &str) {
    let k = match lower::lower_as(f, generic, false) {
        Ok(k) => k,
        Err(e) => return refused("kernel", &e, src),
    };
    for checked in [true, false] {
        let c = cuda::generate(&k, checked);
        assert!(
            c.contains(&format!("__global__ void {}(", k.name)),
            "no entry point in the CUDA C\n{c}"
        );
    }
    let twin = twin::generate(&k);
    // What the macro needs: tokens. That they parse as a function is checked for one program
    // in four (chosen by its text, so a failure reproduces): syn under AddressSanitizer takes
    // half the target's time on it.
    if let Err(e) = twin.parse::<proc_macro2::TokenStream>() {
        panic!("the CPU twin does not tokenize: {e}\n{twin}\n--- program:\n{src}");
    }
    if fnv(src) % 4 == 0 {
        if let Err(e) = syn::parse_str::<syn::ItemFn>(&twin) {
            panic!("the CPU twin is not Rust: {e}\n{twin}\n--- program:\n{src}");
        }
    }
    let Some(order) = linked(devices, &callees(&k)) else {
        return;
    };
    for checked in [true, false] {
        match wgsl::generate(&k, checked) {
            Ok(w) => {
                let mut all = String::new();
                for d in &order {
                    match &d.wgsl {
                        Ok(dw) => all.push_str(dw),
                        // No WGSL for the kernel: a device function lacks it.
                        Err(_) => return,
                    }
                }
                all.push_str(&w);
                validate(&all, Some(&k.name), src, checked);
            }
            Err(why) => assert!(!why.is_empty()),
        }
    }
}

/// FNV-1a of the text.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Checks a program: its `#[kernel]` functions in order, those with `#[kernel(device)]`
/// device functions, the others kernels.
fn check(src: &str) {
    let Ok(file) = syn::parse_file(src) else {
        return; // not Rust: rustc stops before the macro
    };
    let mut devices = Vec::new();
    for item in &file.items {
        let syn::Item::Fn(f) = item else { continue };
        let Some(attr) = f.attrs.iter().find(|a| a.path().is_ident("kernel")) else {
            continue; // plain Rust (an example's reference function)
        };
        let is_device = attr.to_token_stream().to_string().contains("device");
        let mut f = f.clone();
        f.attrs.retain(|a| !a.path().is_ident("kernel"));
        if is_device {
            if !device(&f, &mut devices, src) {
                return;
            }
            continue;
        }
        match generic::param(&f.sig) {
            Err(e) => refused("generics", &e, src),
            Ok(None) => kernel(&f, false, &devices, src),
            Ok(Some(g)) => {
                for ty in g.types {
                    match generic::substitute(&f, &g.ident, ty) {
                        Ok(fi) => kernel(&fi, true, &devices, src),
                        Err(e) => refused("instantiation", &e, src),
                    }
                }
            }
        }
    }
}

use quote::ToTokens;

// ---------------------------------------------------------------------------------------
// Generating a program.

/// The kernel language's value types: the compiler's own.
use ir::Ty as T;

/// The magnitudes of an integer type's most negative and largest values, as literals.
fn limits(t: T) -> (&'static str, &'static str) {
    match t {
        T::I8 => ("128", "127"),
        T::U8 => ("0", "255"),
        T::I32 => ("2147483648", "2147483647"),
        T::U32 => ("0", "4294967295"),
        T::I64 => ("9223372036854775808", "9223372036854775807"),
        T::U64 | T::Usize => ("0", "18446744073709551615"),
        _ => ("0", "1"),
    }
}

/// Value types, WGSL's three most often.
const VALUE_TYPES: [T; 14] = [
    T::F32,
    T::F32,
    T::F32,
    T::I32,
    T::I32,
    T::U32,
    T::U32,
    T::Usize,
    T::Bool,
    T::F64,
    T::I64,
    T::U64,
    T::I8,
    T::U8,
];
/// Element types of arrays and scalar parameters.
const ELEM_TYPES: [T; 13] = [
    T::F32,
    T::F32,
    T::F32,
    T::I32,
    T::I32,
    T::U32,
    T::U32,
    T::F64,
    T::I64,
    T::U64,
    T::I8,
    T::U8,
    T::F16,
];

const FLOAT_LITS: [&str; 12] = [
    "0.0",
    "1.0",
    "0.5",
    "2.5",
    "1.5",
    "1e10",
    "1e-7",
    "3.4028235e38",
    "1.17549435e-38",
    "1e-40",
    "100.25",
    "6.5e-3",
];

#[derive(Clone)]
struct Var {
    name: String,
    ty: T,
    mutable: bool,
}

#[derive(Clone)]
struct Array {
    name: String,
    ty: T,
    writable: bool,
    shared: bool,
}

#[derive(Clone)]
struct DevSig {
    name: String,
    args: Vec<T>,
    ret: T,
}

struct Gen<'a, 'b> {
    u: &'b mut Unstructured<'a>,
    out: String,
    indent: usize,
    arrays: Vec<Array>,
    scopes: Vec<Vec<Var>>,
    names: usize,
    loops: usize,
    /// Statements still to write.
    budget: usize,
    /// In a device function: no thread, no arrays.
    device: bool,
    /// A generic kernel: this type is written `T`.
    generic: Option<T>,
    devs: Vec<DevSig>,
    /// Only the types WGSL has (most programs), so that most accepted kernels have WGSL.
    wgsl_only: bool,
}

const HOSTILE_EXPRS: [&str; 22] = [
    "x.iter().sum()",
    "vec![1.0][0]",
    "(|v| v)(1.0)",
    "*p",
    "&q",
    "foo::bar()",
    "\"text\"",
    "'c'",
    "match 1 { _ => 0 }",
    "unknown_name",
    "global_w()",
    "barrier()",
    "shared::<f32, 4>()",
    "f32::MAX",
    "(1, 2)",
    "[1, 2][0]",
    "1u128",
    "1.5f16",
    "s0.len()",
    "atomic_add(&a0[0], 1)",
    "atomic_min(&mut a0[0])",
    "i32::MIN.abs()",
];

const HOSTILE_STMTS: [&str; 14] = [
    "break;",
    "continue;",
    "return 1;",
    "struct S;",
    "println!(\"x\");",
    "let [a, b] = [1, 2];",
    "let z: f32;",
    "'l: loop { break 'l; }",
    "for q in 0..=3 { }",
    "async { };",
    "unsafe { }",
    "let t = shared::<f32, 0>();",
    "let t = shared::<f16, 8>();",
    "fn inner() {}",
];

impl<'a, 'b> Gen<'a, 'b> {
    fn new(u: &'b mut Unstructured<'a>) -> Self {
        Gen {
            u,
            out: String::new(),
            indent: 0,
            arrays: Vec::new(),
            scopes: vec![Vec::new()],
            names: 0,
            loops: 0,
            budget: 0,
            device: false,
            generic: None,
            devs: Vec::new(),
            wgsl_only: false,
        }
    }

    /// About one choice in fifty goes wrong on purpose (never once the input is used up:
    /// `ratio` says yes then, which would recurse without end).
    fn bad(&mut self) -> ArbResult<bool> {
        Ok(self.u.int_in_range(0..=49u8)? == 49)
    }

    fn fresh(&mut self, base: &str) -> String {
        self.names += 1;
        format!("{base}{}", self.names)
    }

    fn ty_name(&self, t: T) -> &'static str {
        if self.generic == Some(t) {
            "T"
        } else {
            t.rust()
        }
    }

    fn line(&mut self, s: &str) {
        for _ in 0..self.indent {
            self.out.push_str("    ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn vars(&self, pred: impl Fn(&Var) -> bool) -> Vec<Var> {
        self.scopes
            .iter()
            .flatten()
            .filter(|v| pred(v))
            .cloned()
            .collect()
    }

    fn bind(&mut self, v: Var) {
        if let Some(s) = self.scopes.last_mut() {
            s.push(v);
        }
    }

    fn value_ty(&mut self) -> ArbResult<T> {
        let types = if self.wgsl_only {
            &VALUE_TYPES[..9]
        } else {
            &VALUE_TYPES[..]
        };
        Ok(*self.u.choose(types)?)
    }

    /// An element type (`all`: f16 too).
    fn elem_ty(&mut self, all: bool) -> ArbResult<T> {
        let types = match (self.wgsl_only, all) {
            (true, _) => &ELEM_TYPES[..7],
            (false, true) => &ELEM_TYPES[..],
            (false, false) => &ELEM_TYPES[..12],
        };
        Ok(*self.u.choose(types)?)
    }

    /// One of `types`, the first `wgsl` of which WGSL has.
    fn some_ty(&mut self, types: &[T], wgsl: usize) -> ArbResult<T> {
        let types = if self.wgsl_only {
            &types[..wgsl]
        } else {
            types
        };
        Ok(*self.u.choose(types)?)
    }

    fn lit(&mut self, t: T) -> ArbResult<String> {
        let generic = self.generic == Some(t);
        Ok(match t {
            T::Bool => (*self.u.choose(&["true", "false"])?).to_string(),
            t if t.is_float() => {
                let v = *self.u.choose(&FLOAT_LITS)?;
                let neg = if self.u.ratio(1, 4)? { "-" } else { "" };
                let suffix = if generic || self.u.arbitrary()? {
                    ""
                } else {
                    t.rust()
                };
                if neg.is_empty() {
                    format!("{v}{suffix}")
                } else {
                    format!("({neg}{v}{suffix})")
                }
            }
            t => {
                let (min, max) = limits(t);
                let (neg, v) = match self.u.int_in_range(0..=7u8)? {
                    0 => (t.is_signed(), min.to_string()),
                    1 => (false, max.to_string()),
                    2 if t.is_signed() => (true, self.u.int_in_range(1..=9u8)?.to_string()),
                    _ => (false, self.u.int_in_range(0..=9u8)?.to_string()),
                };
                let neg = neg && min != "0";
                let suffix = if generic || self.u.arbitrary()? {
                    ""
                } else {
                    t.rust()
                };
                if neg {
                    format!("(-{v}{suffix})")
                } else {
                    format!("{v}{suffix}")
                }
            }
        })
    }

    fn arrays_reading(&self, t: T) -> Vec<Array> {
        self.arrays
            .iter()
            .filter(|a| a.ty.compute() == t)
            .cloned()
            .collect()
    }

    fn index(&mut self, depth: u32) -> ArbResult<String> {
        if self.bad()? {
            return Ok((*self.u.choose(&["1u32", "-1", "1.0", "i as u32", "true"])?).to_string());
        }
        self.expr(T::Usize, depth.min(1))
    }

    fn leaf(&mut self, t: T) -> ArbResult<String> {
        let vars = self.vars(|v| v.ty == t);
        let reads = if self.device {
            Vec::new()
        } else {
            self.arrays_reading(t)
        };
        match self.u.int_in_range(0..=5u8)? {
            0 | 1 if !vars.is_empty() => Ok(self.u.choose(&vars)?.name.clone()),
            2 if !reads.is_empty() => {
                let a = self.u.choose(&reads)?.name.clone();
                let i = self.index(0)?;
                Ok(format!("{a}[{i}]"))
            }
            3 if t == T::Usize && !self.device => {
                let c = *self.u.choose(&[
                    "global_x()",
                    "global_y()",
                    "thread_x()",
                    "thread_z()",
                    "block_x()",
                    "block_dim_x()",
                    "grid_dim_y()",
                    "subgroup_lane()",
                    "num_subgroups()",
                ])?;
                Ok(c.to_string())
            }
            4 if t == T::Usize && !self.device && !self.arrays.is_empty() => {
                let a = self.u.choose(&self.arrays)?.clone();
                if a.shared {
                    Ok("1".into())
                } else {
                    Ok(format!("{}.len()", a.name))
                }
            }
            _ => self.lit(t),
        }
    }

    fn expr(&mut self, t: T, depth: u32) -> ArbResult<String> {
        if self.bad()? {
            if self.u.arbitrary()? {
                return Ok((*self.u.choose(&HOSTILE_EXPRS)?).to_string());
            }
            // A well-formed expression of another type.
            let other = self.value_ty()?;
            return self.expr(other, depth.saturating_sub(1));
        }
        if depth == 0 || self.u.ratio(1, 3)? {
            return self.leaf(t);
        }
        let d = depth - 1;
        if t == T::Bool {
            return Ok(match self.u.int_in_range(0..=4u8)? {
                0 | 1 => {
                    let o = self.value_ty()?;
                    let o = if o == T::Bool { T::I32 } else { o };
                    let op = *self.u.choose(&["<", "<=", "==", "!=", ">", ">="])?;
                    let (a, b) = (self.expr(o, d)?, self.expr(o, d)?);
                    format!("({a} {op} {b})")
                }
                2 => {
                    let op = *self.u.choose(&["&&", "||", "==", "!=", "&", "|", "^"])?;
                    let (a, b) = (self.expr(T::Bool, d)?, self.expr(T::Bool, d)?);
                    format!("({a} {op} {b})")
                }
                3 => format!("!{}", self.expr(T::Bool, d)?),
                _ => self.leaf(t)?,
            });
        }
        Ok(match self.u.int_in_range(0..=11u8)? {
            0..=2 => {
                let op = *self.u.choose(&["+", "-", "*", "/", "%"])?;
                let (a, b) = (self.expr(t, d)?, self.expr(t, d)?);
                format!("({a} {op} {b})")
            }
            3 if t.is_int() => {
                let op = *self.u.choose(&["&", "|", "^"])?;
                let (a, b) = (self.expr(t, d)?, self.expr(t, d)?);
                format!("({a} {op} {b})")
            }
            4 if t.is_int() => {
                let op = *self.u.choose(&["<<", ">>"])?;
                let (a, b) = (self.expr(t, d)?, self.expr(T::U32, d)?);
                format!("({a} {op} {b})")
            }
            5 if t.is_signed() || t.is_float() => format!("(-{})", self.expr(t, d)?),
            5 if t.is_int() => format!("(!{})", self.expr(t, d)?),
            6 => {
                let from = self.value_ty()?;
                let from = if from == T::Bool && !t.is_int() {
                    T::I32
                } else {
                    from
                };
                let inner = self.expr(from, d)?;
                format!("({inner} as {})", self.ty_name(t))
            }
            7 if t.is_float() => {
                let m = *self.u.choose(&[
                    "abs", "sqrt", "exp", "exp2", "ln", "log2", "sin", "cos", "tanh", "floor",
                    "ceil",
                ])?;
                format!("{}.{m}()", self.paren(t, d)?)
            }
            8 if t.is_float() => {
                let m = *self.u.choose(&["powf", "min", "max", "mul_add"])?;
                let recv = self.paren(t, d)?;
                let a = self.expr(t, d)?;
                if m == "mul_add" {
                    let b = self.expr(t, d)?;
                    format!("{recv}.{m}({a}, {b})")
                } else {
                    format!("{recv}.{m}({a})")
                }
            }
            8 if t.is_int() => {
                let m = *self.u.choose(&["min", "max"])?;
                let recv = self.paren(t, d)?;
                let a = self.expr(t, d)?;
                format!("{recv}.{m}({a})")
            }
            7 if t.is_signed() => format!("{}.abs()", self.paren(t, d)?),
            9 if t.is_int() && self.generic != Some(t) => {
                format!("{}::{}", t.rust(), self.u.choose(&["MIN", "MAX"])?)
            }
            10 if !self.device => {
                // An atomic's old value.
                let targets: Vec<Array> = self
                    .arrays
                    .iter()
                    .filter(|a| a.writable && a.ty == t && matches!(t, T::I32 | T::U32 | T::F32))
                    .cloned()
                    .collect();
                if targets.is_empty() {
                    self.leaf(t)?
                } else {
                    let a = self.u.choose(&targets)?.name.clone();
                    self.atomic(&a, t, d)?
                }
            }
            _ => self.leaf(t)?,
        })
    }

    /// An expression as a method's receiver.
    fn paren(&mut self, t: T, d: u32) -> ArbResult<String> {
        let e = self.expr(t, d)?;
        Ok(if e.starts_with('(') {
            e
        } else {
            format!("({e})")
        })
    }

    fn atomic(&mut self, a: &str, t: T, d: u32) -> ArbResult<String> {
        let ops: &[&str] = if t == T::F32 {
            &["atomic_add", "atomic_exchange"]
        } else {
            &[
                "atomic_add",
                "atomic_min",
                "atomic_max",
                "atomic_exchange",
                "atomic_cas",
            ]
        };
        let op = *self.u.choose(ops)?;
        let i = self.index(d)?;
        let v = self.expr(t, d)?;
        Ok(if op == "atomic_cas" {
            let w = self.expr(t, d)?;
            format!("{op}(&mut {a}[{i}], {v}, {w})")
        } else {
            format!("{op}(&mut {a}[{i}], {v})")
        })
    }

    /// A value: an expression, or an `if`/`else` choosing one.
    fn value(&mut self, t: T) -> ArbResult<String> {
        if self.u.ratio(1, 6)? {
            let c = self.expr(T::Bool, 2)?;
            let (a, b) = (self.expr(t, 2)?, self.expr(t, 2)?);
            return Ok(format!("if {c} {{ {a} }} else {{ {b} }}"));
        }
        self.expr(t, 3)
    }

    fn block(&mut self, depth: u32) -> ArbResult<()> {
        self.scopes.push(Vec::new());
        self.indent += 1;
        let n = self.u.int_in_range(0..=3)?;
        for _ in 0..n {
            self.stmt(depth)?;
        }
        self.indent -= 1;
        self.scopes.pop();
        Ok(())
    }

    fn stmt(&mut self, depth: u32) -> ArbResult<()> {
        if self.budget == 0 {
            return Ok(());
        }
        self.budget -= 1;
        if self.bad()? {
            let s = *self.u.choose(&HOSTILE_STMTS)?;
            self.line(s);
            return Ok(());
        }
        let pick = self.u.int_in_range(0..=17u8)?;
        match pick {
            0..=3 => {
                let t = self.value_ty()?;
                let mutable = self.u.ratio(1, 2)?;
                let name = self.fresh("v");
                let v = self.value(t)?;
                let m = if mutable { "mut " } else { "" };
                if self.u.arbitrary()? {
                    let tn = self.ty_name(t);
                    self.line(&format!("let {m}{name}: {tn} = {v};"));
                } else {
                    self.line(&format!("let {m}{name} = {v};"));
                }
                self.bind(Var {
                    name,
                    ty: t,
                    mutable,
                });
            }
            4 | 5 => {
                let vars = self.vars(|v| v.mutable);
                if vars.is_empty() {
                    return self.stmt(depth);
                }
                let v = self.u.choose(&vars)?.clone();
                self.assign(&v.name, v.ty)?;
            }
            6 | 7 if !self.device => {
                let targets: Vec<Array> =
                    self.arrays.iter().filter(|a| a.writable).cloned().collect();
                if targets.is_empty() {
                    return self.stmt(depth);
                }
                let a = self.u.choose(&targets)?.clone();
                let i = self.index(2)?;
                self.assign(&format!("{}[{i}]", a.name), a.ty.compute())?;
            }
            8 | 9 if depth > 0 => {
                let c = self.expr(T::Bool, 3)?;
                self.line(&format!("if {c} {{"));
                self.block(depth - 1)?;
                match self.u.int_in_range(0..=2u8)? {
                    0 => self.line("}"),
                    1 => {
                        self.line("} else {");
                        self.block(depth - 1)?;
                        self.line("}");
                    }
                    _ => {
                        let c = self.expr(T::Bool, 2)?;
                        self.line(&format!("}} else if {c} {{"));
                        self.block(depth - 1)?;
                        self.line("} else {");
                        self.block(depth - 1)?;
                        self.line("}");
                    }
                }
            }
            10 if depth > 0 => {
                let name = self.fresh("j");
                let t = self.some_ty(&[T::Usize, T::Usize, T::U32, T::I32, T::I64], 4)?;
                let (a, b) = if self.u.arbitrary()? {
                    ("0".to_string(), self.u.int_in_range(1..=8u8)?.to_string())
                } else {
                    (self.expr(t, 1)?, self.expr(t, 1)?)
                };
                let range = if t == T::Usize && self.u.ratio(1, 3)? {
                    let s = self.u.int_in_range(1..=4u8)?;
                    format!("({a}..{b}).step_by({s})")
                } else {
                    format!("{a}..{b}")
                };
                self.line(&format!("for {name} in {range} {{"));
                self.loops += 1;
                self.scopes.push(vec![Var {
                    name,
                    ty: t,
                    mutable: false,
                }]);
                self.block(depth - 1)?;
                self.scopes.pop();
                self.loops -= 1;
                self.line("}");
            }
            11 if depth > 0 => {
                let c = self.expr(T::Bool, 2)?;
                self.line(&format!("while {c} {{"));
                self.loops += 1;
                self.block(depth - 1)?;
                self.loops -= 1;
                self.line("}");
            }
            12 if depth > 0 => {
                self.line("loop {");
                self.loops += 1;
                self.block(depth - 1)?;
                let c = self.expr(T::Bool, 2)?;
                self.indent += 1;
                self.line(&format!("if {c} {{ break; }}"));
                self.indent -= 1;
                self.loops -= 1;
                self.line("}");
            }
            13 if self.loops > 0 => {
                let s = *self.u.choose(&["break;", "continue;"])?;
                self.line(s);
            }
            14 if !self.device => match self.u.int_in_range(0..=6u8)? {
                0 if depth >= 2 => self.line("barrier();"),
                6 if depth >= 2 => {
                    let t = self.some_ty(&[T::F32, T::I32, T::U32, T::F64, T::I64], 3)?;
                    let (op, lane) = *self.u.choose(&[
                        ("subgroup_add", false),
                        ("subgroup_min", false),
                        ("subgroup_max", false),
                        ("subgroup_inclusive_add", false),
                        ("subgroup_exclusive_add", false),
                        ("subgroup_shuffle", true),
                        ("subgroup_shuffle_xor", true),
                        ("subgroup_shuffle_up", true),
                        ("subgroup_shuffle_down", true),
                    ])?;
                    let v = self.expr(t, 2)?;
                    let call = if lane {
                        let l = self.expr(T::Usize, 2)?;
                        format!("{op}({v}, {l})")
                    } else {
                        format!("{op}({v})")
                    };
                    let name = self.fresh("sg");
                    self.line(&format!("let {name}: {} = {call};", self.ty_name(t)));
                    self.bind(Var {
                        name,
                        ty: t,
                        mutable: false,
                    });
                }
                1 if !self.device && self.u.ratio(1, 4)? => self.line("return;"),
                2 | 3 => {
                    let targets: Vec<Array> = self
                        .arrays
                        .iter()
                        .filter(|a| a.writable && matches!(a.ty, T::I32 | T::U32 | T::F32))
                        .cloned()
                        .collect();
                    if let Some(a) = targets.first().cloned() {
                        let call = self.atomic(&a.name, a.ty, 2)?;
                        if self.u.arbitrary()? {
                            let name = self.fresh("old");
                            self.line(&format!("let {name} = {call};"));
                            self.bind(Var {
                                name,
                                ty: a.ty,
                                mutable: false,
                            });
                        } else {
                            self.line(&format!("{call};"));
                        }
                    }
                }
                _ => {
                    let t = self.some_ty(&[T::F32, T::I32, T::U32, T::F64, T::U8], 3)?;
                    let name = self.fresh("sh");
                    let n = match self.u.int_in_range(0..=3u8)? {
                        0 => "{ 4 * 8 }".to_string(),
                        1 => "65536".to_string(),
                        _ => self.u.int_in_range(1..=256u32)?.to_string(),
                    };
                    self.line(&format!(
                        "let {name} = shared::<{}, {n}>();",
                        self.ty_name(t)
                    ));
                    self.arrays.push(Array {
                        name,
                        ty: t,
                        writable: true,
                        shared: true,
                    });
                }
            },
            15 => {
                let t = self.some_ty(&[T::Usize, T::I32, T::U32, T::I64], 3)?;
                let name = self.fresh("C");
                let (a, b) = (
                    self.u.int_in_range(0..=40u8)?,
                    self.u.int_in_range(1..=9u8)?,
                );
                let op = *self.u.choose(&["+", "-", "*", "/", "%"])?;
                self.line(&format!("const {name}: {} = {a} {op} {b};", t.rust()));
                self.bind(Var {
                    name,
                    ty: t,
                    mutable: false,
                });
            }
            16 => {
                let (t1, t2) = (self.value_ty()?, self.value_ty()?);
                let (n1, n2) = (self.fresh("p"), self.fresh("q"));
                let (e1, e2) = (self.expr(t1, 2)?, self.expr(t2, 2)?);
                self.line(&format!("let ({n1}, mut {n2}) = ({e1}, {e2});"));
                self.bind(Var {
                    name: n1,
                    ty: t1,
                    mutable: false,
                });
                self.bind(Var {
                    name: n2,
                    ty: t2,
                    mutable: true,
                });
            }
            _ if !self.devs.is_empty() && self.generic.is_none() => {
                let d = self.u.choose(&self.devs)?.clone();
                let args: Vec<String> = d
                    .args
                    .iter()
                    .map(|&t| self.expr(t, 2))
                    .collect::<ArbResult<_>>()?;
                let name = self.fresh("r");
                self.line(&format!(
                    "let {name}: {} = {}({});",
                    d.ret.rust(),
                    d.name,
                    args.join(", ")
                ));
                self.bind(Var {
                    name,
                    ty: d.ret,
                    mutable: false,
                });
            }
            _ => {
                let t = self.value_ty()?;
                let name = self.fresh("w");
                let e = self.expr(t, 3)?;
                self.line(&format!("let {name} = {e};"));
                self.bind(Var {
                    name,
                    ty: t,
                    mutable: false,
                });
            }
        }
        Ok(())
    }

    fn assign(&mut self, place: &str, t: T) -> ArbResult<()> {
        if self.u.ratio(1, 3)? && t != T::Bool {
            let ops: &[&str] = if t.is_int() {
                &["+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="]
            } else {
                &["+=", "-=", "*=", "/=", "%="]
            };
            let op = *self.u.choose(ops)?;
            let rhs_t = if op.starts_with("<<") || op.starts_with(">>") {
                T::U32
            } else {
                t
            };
            let e = self.expr(rhs_t, 3)?;
            self.line(&format!("{place} {op} {e};"));
        } else {
            let v = self.value(t)?;
            self.line(&format!("{place} = {v};"));
        }
        Ok(())
    }

    fn device_fn(&mut self, k: usize) -> ArbResult<DevSig> {
        self.device = true;
        self.scopes = vec![Vec::new()];
        let name = format!("dev{k}");
        let n = self.u.int_in_range(1..=3)?;
        let mut args = Vec::new();
        let mut params = Vec::new();
        for i in 0..n {
            let t = self.some_ty(&[T::F32, T::F32, T::I32, T::U32, T::F64, T::I64], 4)?;
            args.push(t);
            params.push(format!("a{i}: {}", t.rust()));
            self.scopes[0].push(Var {
                name: format!("a{i}"),
                ty: t,
                mutable: false,
            });
        }
        let ret = self.some_ty(&[T::F32, T::F32, T::I32, T::U32, T::F64], 4)?;
        self.line("#[kernel(device)]");
        self.line(&format!(
            "fn {name}({}) -> {} {{",
            params.join(", "),
            ret.rust()
        ));
        self.indent += 1;
        self.budget = self.u.int_in_range(0..=4)?;
        let stmts = self.budget;
        for _ in 0..stmts {
            self.stmt(1)?;
        }
        if self.u.ratio(1, 5)? {
            let v = self.expr(ret, 3)?;
            self.line(&format!("return {v};"));
        } else {
            let v = self.expr(ret, 3)?;
            self.line(&v);
        }
        self.indent -= 1;
        self.line("}");
        self.device = false;
        Ok(DevSig { name, args, ret })
    }

    fn kernel(&mut self) -> ArbResult<()> {
        self.scopes = vec![Vec::new()];
        self.arrays.clear();
        let generic = match self.u.int_in_range(0..=9u8)? {
            0 => Some(("Float", T::F32)),
            1 => Some(("Numeric", T::I32)),
            _ => None,
        };
        self.generic = generic.map(|g| g.1);
        let n_slices = self.u.int_in_range(1..=4)?;
        let n_scalars = self.u.int_in_range(0..=2)?;
        let mut params = Vec::new();
        for i in 0..n_slices {
            let t = if self.generic.is_some() && self.u.ratio(2, 3)? {
                self.generic.unwrap_or(T::F32)
            } else {
                self.elem_ty(true)?
            };
            let t = if !self.wgsl_only && self.u.ratio(1, 40)? {
                T::BF16
            } else {
                t
            };
            let writable = i == 0 || self.u.ratio(1, 3)?;
            let name = format!("x{i}");
            let m = if writable { "&mut " } else { "&" };
            params.push(format!("{name}: {m}[{}]", self.ty_name(t)));
            self.arrays.push(Array {
                name,
                ty: t,
                writable,
                shared: false,
            });
        }
        for i in 0..n_scalars {
            let t = if self.generic.is_some() && self.u.arbitrary()? {
                self.generic.unwrap_or(T::F32)
            } else {
                self.elem_ty(false)?
            };
            let name = format!("s{i}");
            params.push(format!("{name}: {}", self.ty_name(t)));
            self.scopes[0].push(Var {
                name,
                ty: t,
                mutable: false,
            });
        }
        // Shuffle the parameters a little.
        if params.len() > 1 && self.u.arbitrary()? {
            let last = params.len() - 1;
            params.swap(0, last);
        }
        self.line("#[kernel]");
        let gen = match generic {
            Some((bound, _)) => format!("<T: {bound}>"),
            None => String::new(),
        };
        self.line(&format!("fn k{gen}({}) {{", params.join(", ")));
        self.indent += 1;
        self.line("let i = global_x();");
        self.scopes[0].push(Var {
            name: "i".into(),
            ty: T::Usize,
            mutable: false,
        });
        self.budget = self.u.int_in_range(1..=14)?;
        let guard = self.u.ratio(1, 2)?;
        if guard {
            self.line("if i < x0.len() {");
            self.indent += 1;
            self.scopes.push(Vec::new());
        }
        while self.budget > 0 {
            self.stmt(3)?;
        }
        if guard {
            self.scopes.pop();
            self.indent -= 1;
            self.line("}");
        }
        self.indent -= 1;
        self.line("}");
        Ok(())
    }
}

fn generate(u: &mut Unstructured<'_>) -> ArbResult<String> {
    let mut g = Gen::new(u);
    g.wgsl_only = g.u.ratio(2, 3)?;
    let n = g.u.int_in_range(0..=4u8)?.saturating_sub(2);
    for k in 0..n {
        let sig = g.device_fn(k as usize)?;
        g.devs.push(sig);
    }
    g.kernel()?;
    Ok(g.out)
}

fuzz_target!(|data: &[u8]| {
    if let Some((&0xFF, text)) = data.split_first() {
        if let Ok(src) = std::str::from_utf8(text) {
            check(src);
        }
        return;
    }
    let mut u = Unstructured::new(data);
    if let Ok(src) = generate(&mut u) {
        check(&src);
    }
});
