//! The kernel as the code generators see it: typed, with every name resolved.

/// A value type of the kernel language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ty {
    /// Rust's `bool`.
    Bool,
    /// IEEE single precision.
    F32,
    /// IEEE double precision.
    F64,
    /// A signed byte.
    I8,
    /// An unsigned byte.
    U8,
    /// A 32-bit signed integer.
    I32,
    /// A 32-bit unsigned integer.
    U32,
    /// A 64-bit signed integer.
    I64,
    /// A 64-bit unsigned integer.
    U64,
    /// An index: 64 bits on the CPU and in CUDA, 32 in WGSL.
    Usize,
    /// IEEE half, a storage type: loads give an `f32`, stores round from one.
    F16,
    /// bfloat16, a storage type like [`Ty::F16`].
    BF16,
}

impl Ty {
    /// The element and scalar types a parameter may have, by their Rust names.
    pub fn from_name(name: &str) -> Option<Ty> {
        Some(match name {
            "bool" => Ty::Bool,
            "f32" => Ty::F32,
            "f64" => Ty::F64,
            "i8" => Ty::I8,
            "u8" => Ty::U8,
            "i32" => Ty::I32,
            "u32" => Ty::U32,
            "i64" => Ty::I64,
            "u64" => Ty::U64,
            "usize" => Ty::Usize,
            "f16" => Ty::F16,
            "bf16" => Ty::BF16,
            _ => return None,
        })
    }

    /// The type's Rust name.
    pub fn rust(self) -> &'static str {
        match self {
            Ty::Bool => "bool",
            Ty::F32 => "f32",
            Ty::F64 => "f64",
            Ty::I8 => "i8",
            Ty::U8 => "u8",
            Ty::I32 => "i32",
            Ty::U32 => "u32",
            Ty::I64 => "i64",
            Ty::U64 => "u64",
            Ty::Usize => "usize",
            Ty::F16 => "f16",
            Ty::BF16 => "bf16",
        }
    }

    /// The type in the expansion's Rust (the 16-bit floats through the facade's `half`).
    pub fn rust_path(self) -> &'static str {
        match self {
            Ty::F16 => "::gpukit::core::half::f16",
            Ty::BF16 => "::gpukit::core::half::bf16",
            t => t.rust(),
        }
    }

    /// Whether the type is a 16-bit float (a storage type).
    pub fn is_half(self) -> bool {
        matches!(self, Ty::F16 | Ty::BF16)
    }

    /// The type a value of this type is computed in: `f32` for the 16-bit floats.
    pub fn compute(self) -> Ty {
        if self.is_half() {
            Ty::F32
        } else {
            self
        }
    }

    /// The type in CUDA C (the 16-bit floats as their bits).
    pub fn c(self) -> &'static str {
        match self {
            Ty::Bool => "bool",
            Ty::F32 => "float",
            Ty::F64 => "double",
            Ty::I8 => "signed char",
            Ty::U8 => "unsigned char",
            Ty::I32 => "int",
            Ty::U32 => "unsigned int",
            Ty::I64 => "long long",
            Ty::U64 | Ty::Usize => "unsigned long long",
            Ty::F16 | Ty::BF16 => "unsigned short",
        }
    }

    /// Whether the type is `f32` or `f64` (the 16-bit floats are storage types).
    pub fn is_float(self) -> bool {
        matches!(self, Ty::F32 | Ty::F64)
    }

    /// Whether the type is an integer (`usize` included).
    pub fn is_int(self) -> bool {
        matches!(
            self,
            Ty::I8 | Ty::U8 | Ty::I32 | Ty::U32 | Ty::I64 | Ty::U64 | Ty::Usize
        )
    }

    /// Whether the type is a signed integer.
    pub fn is_signed(self) -> bool {
        matches!(self, Ty::I8 | Ty::I32 | Ty::I64)
    }

    /// Whether the type is a number (not `bool`).
    pub fn is_numeric(self) -> bool {
        self != Ty::Bool
    }

    /// Bits of an integer type (`usize` counts as 64, as on the CPU and in CUDA).
    pub fn bits(self) -> u32 {
        match self {
            Ty::Bool | Ty::I8 | Ty::U8 => 8,
            Ty::I32 | Ty::U32 | Ty::F32 => 32,
            Ty::I64 | Ty::U64 | Ty::Usize | Ty::F64 => 64,
            Ty::F16 | Ty::BF16 => 16,
        }
    }

    /// Whether the type can be an array element or a scalar parameter.
    pub fn is_element(self) -> bool {
        !matches!(self, Ty::Bool | Ty::Usize)
    }
}

/// A kernel parameter.
#[derive(Debug, Clone)]
pub struct Param {
    /// Its name in the source.
    pub name: String,
    /// Its element type (a slice) or its type (a scalar).
    pub ty: Ty,
    /// A slice or a scalar.
    pub kind: ParamKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// How a parameter is passed.
pub enum ParamKind {
    /// `&[T]` (read) or `&mut [T]` (written); `array` is its number among the kernel's arrays.
    Slice {
        /// Whether the kernel writes it (`&mut [T]`).
        mutable: bool,
        /// Its number among the kernel's arrays (slices and shared arrays), as fault reports give it.
        array: u32,
    },
    /// A value of its type.
    Scalar,
}

/// A block-shared array.
#[derive(Debug, Clone)]
pub struct Shared {
    /// Its name in the source.
    pub name: String,
    /// Its element type.
    pub ty: Ty,
    /// Its number of elements.
    pub len: Extent,
    /// Its number among the kernel's arrays, as fault reports give it.
    pub array: u32,
}

/// A shared array's number of elements: a constant, or a compile-time parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    /// A constant.
    Fixed(u64),
    /// The compile-time parameter of this number ([`Kernel::comptime`]), a `usize`.
    Comptime(usize),
}

/// A compile-time parameter: a const generic of the kernel (`fn k<const B: usize>`), whose
/// value each instantiation (`k::<256>()`) writes into the generated code.
#[derive(Debug, Clone)]
pub struct ComptimeParam {
    /// Its name in the source.
    pub name: String,
    /// Its type (an integer type or `bool`).
    pub ty: Ty,
}

/// Where the emitters leave room for the compile-time parameters' definitions, which an
/// instantiation writes in ([`comptime_definitions`]).
pub const COMPTIME_MARK: &str = "// gk-comptime\n";

/// The definitions of the compile-time parameters `params` with `values` (each its Rust
/// literal text, unsuffixed) for the CUDA C (`cuda: true`) or WGSL of a kernel: what
/// replaces [`COMPTIME_MARK`] in its source. Also checks each shared array's length,
/// which a compile-time parameter may set: the CUDA C fails to compile where one is
/// outside 1..=65536, the WGSL fails to validate.
pub fn comptime_definitions(params: &[(&str, &str, &str)], cuda: bool) -> String {
    let mut out = String::new();
    for (name, ty, value) in params {
        let t = Ty::from_name(ty).unwrap_or(Ty::Usize);
        if cuda {
            let v = match t {
                Ty::Bool => (*value).to_owned(),
                // The least value's literal does not fit its type before the minus.
                Ty::I32 if *value == i32::MIN.to_string() => "(-2147483647 - 1)".into(),
                Ty::I64 if *value == i64::MIN.to_string() => "(-9223372036854775807ll - 1)".into(),
                Ty::I64 => format!("{value}ll"),
                Ty::U64 | Ty::Usize => format!("{value}ull"),
                Ty::U32 => format!("{value}u"),
                _ => (*value).to_owned(),
            };
            out += &format!("static constexpr {} v_{name} = {v};\n", t.c());
        } else {
            let (w, suffix) = match t {
                Ty::Bool => ("bool", ""),
                Ty::I32 => ("i32", "i"),
                Ty::I64 => ("i64", "li"),
                Ty::U64 => ("u64", "lu"),
                _ => ("u32", "u"),
            };
            match t {
                Ty::I32 if *value == i32::MIN.to_string() => {
                    out += &format!("const v_{name}: i32 = (-2147483647i - 1i);\n");
                }
                // A function: WGSL's constant expressions have no 64-bit arithmetic (naga's
                // do not), and `i64::MIN` has no literal.
                Ty::I64 => {
                    let v = if *value == i64::MIN.to_string() {
                        "-9223372036854775807li - 1li".to_owned()
                    } else {
                        format!("{value}li")
                    };
                    out += &format!("fn v_{name}() -> i64 {{ return {v}; }}\n");
                }
                _ => out += &format!("const v_{name}: {w} = {value}{suffix};\n"),
            }
        }
    }
    out
}

/// An array a kernel indexes: a slice parameter or a shared array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arr {
    /// The parameter of this number.
    Param(usize),
    /// The shared array of this number.
    Shared(usize),
}

/// Where a local lives in the CPU twin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// An ordinary local of the thread's code.
    Plain,
    /// Declared where a barrier splits the code: one value per thread of the block.
    PerThread,
    /// The variable of a loop that contains a barrier: the same for every thread.
    Uniform,
}

#[derive(Debug, Clone)]
/// A local variable.
pub struct Local {
    /// The name emitted (unique in the kernel).
    pub name: String,
    /// Its type.
    pub ty: Ty,
    /// Whether it is assigned after its declaration.
    pub mutable: bool,
    /// Where the CPU twin keeps it.
    pub storage: Storage,
}

#[derive(Debug, Clone)]
/// A kernel, or a device function (`ret` is its result type), as the emitters take it.
pub struct Kernel {
    /// Its name, the entry point's (unprefixed) in every target.
    pub name: String,
    /// Its parameters, in order.
    pub params: Vec<Param>,
    /// Its block-shared arrays.
    pub shared: Vec<Shared>,
    /// Every local of the body, by number (names are unique).
    pub locals: Vec<Local>,
    /// Its statements.
    pub body: Vec<Stmt>,
    /// Arrays that atomics touch (WGSL declares them atomic, and accesses them so).
    pub atomic: Vec<Arr>,
    /// A device function's result type (`None` for a kernel).
    pub ret: Option<Ty>,
    /// The device functions called (distinct, in order of first call).
    pub calls: Vec<Callee>,
    /// Its compile-time parameters, in order.
    pub comptime: Vec<ComptimeParam>,
    /// What its `report_out_of_bounds` calls name, distinct, in order of first call: the
    /// arrays of its fault codes after its slices and shared arrays.
    pub reports: Vec<String>,
}

/// A device function a kernel calls.
#[derive(Debug, Clone)]
pub struct Callee {
    /// The path written at the call (`helper`, `math::helper`), as text.
    pub path: String,
    /// Its last segment: the function's name in the generated code.
    pub name: String,
    /// The argument types and result type the kernel calls it with.
    pub args: Vec<Ty>,
    /// The result type.
    pub ret: Ty,
}

impl Kernel {
    /// The element type of an array.
    pub fn arr_ty(&self, a: Arr) -> Ty {
        match a {
            Arr::Param(i) => self.params[i].ty,
            Arr::Shared(i) => self.shared[i].ty,
        }
    }

    /// The name of an array in the source.
    pub fn arr_name(&self, a: Arr) -> &str {
        match a {
            Arr::Param(i) => &self.params[i].name,
            Arr::Shared(i) => &self.shared[i].name,
        }
    }

    /// The array's number in fault reports.
    pub fn arr_number(&self, a: Arr) -> u32 {
        match a {
            Arr::Param(i) => match self.params[i].kind {
                ParamKind::Slice { array, .. } => array,
                ParamKind::Scalar => u32::MAX,
            },
            Arr::Shared(i) => self.shared[i].array,
        }
    }

    /// The fault code of what the report `i` ([`Stmt::Report`]) names: after the slices'
    /// and the shared arrays'.
    pub fn report_number(&self, i: usize) -> u32 {
        (self.slices().count() + self.shared.len() + i) as u32
    }

    /// The names of the fault codes, in order: the slice parameters, the shared arrays,
    /// then what the reports name (what the checked launch convention's `arrays` lists).
    pub fn array_names(&self) -> Vec<String> {
        self.slices()
            .map(|(_, p)| p.name.clone())
            .chain(self.shared.iter().map(|s| s.name.clone()))
            .chain(self.reports.iter().cloned())
            .collect()
    }

    /// Whether the kernel's code without bounds checks may still report a fault: it calls
    /// `report_out_of_bounds`, or has atomics (which keep their checks).
    pub fn faults_unchecked(&self) -> bool {
        !self.reports.is_empty() || !self.atomic.is_empty()
    }

    /// Whether atomics touch the array.
    pub fn is_atomic(&self, a: Arr) -> bool {
        self.atomic.contains(&a)
    }

    /// Marks the locals a barrier splits: those declared directly in a statement list that
    /// contains a barrier live per thread in the CPU twin, the variables of loops that contain
    /// one are the block's.
    pub fn assign_storage(&mut self) {
        fn walk(stmts: &[Stmt], locals: &mut [Local]) {
            let split = stmts.iter().any(Stmt::has_barrier);
            for s in stmts {
                match s {
                    Stmt::Let { local, .. } if split => locals[*local].storage = Storage::PerThread,
                    Stmt::Collective { local, .. } => locals[*local].storage = Storage::PerThread,
                    Stmt::Block(b) | Stmt::Loop(b) => walk(b, locals),
                    Stmt::If { then, els, .. } => {
                        walk(then, locals);
                        walk(els, locals);
                    }
                    Stmt::For { var, body, .. } => {
                        if body.iter().any(Stmt::has_barrier) {
                            locals[*var].storage = Storage::Uniform;
                        }
                        walk(body, locals);
                    }
                    Stmt::While { body, .. } => walk(body, locals),
                    _ => {}
                }
            }
        }
        walk(&self.body, &mut self.locals);
    }

    /// The slice parameters, in order.
    pub fn slices(&self) -> impl Iterator<Item = (usize, &Param)> {
        self.params
            .iter()
            .enumerate()
            .filter(|(_, p)| matches!(p.kind, ParamKind::Slice { .. }))
    }
}

#[derive(Debug, Clone)]
/// A statement.
pub enum Stmt {
    /// `let name = init;`: declares local `local`.
    Let {
        /// The local's number.
        local: usize,
        /// Its value.
        init: Expr,
    },
    /// `place = value` or, with `op`, `place op= value`.
    Assign {
        /// What is assigned.
        place: Place,
        /// The operator of a compound assignment.
        op: Option<BinOp>,
        /// The value assigned.
        value: Expr,
    },
    /// An expression evaluated for its effect (an atomic).
    Expr(Expr),
    /// `{ ... }`.
    Block(Vec<Stmt>),
    /// `if cond { then } else { els }`.
    If {
        /// A `bool`.
        cond: Expr,
        /// Run where `cond` holds.
        then: Vec<Stmt>,
        /// Run where it does not (empty without `else`).
        els: Vec<Stmt>,
    },
    /// `for var in (start..end).step_by(step) { body }`.
    For {
        /// The loop variable's local.
        var: usize,
        /// The first value.
        start: Expr,
        /// The end, excluded.
        end: Expr,
        /// A `usize`.
        step: Option<Expr>,
        /// Run for each value.
        body: Vec<Stmt>,
    },
    /// `while cond { body }`.
    While {
        /// A `bool`, evaluated before each turn.
        cond: Expr,
        /// Run while `cond` holds.
        body: Vec<Stmt>,
    },
    /// `loop { ... }`.
    Loop(Vec<Stmt>),
    /// `break` out of the innermost loop.
    Break,
    /// `continue` with its next turn.
    Continue,
    /// `return;` in a kernel, `return v;` (or the tail expression) in a device function.
    Return(Option<Expr>),
    /// `barrier()`: every thread of the block waits for the others, and sees their writes to shared and global memory.
    Barrier,
    /// `report_out_of_bounds("what", index, len);`: notes through the fault record, as a
    /// checked access out of bounds does, that `index` is out of bounds for `what` (of
    /// length `len`; both `usize`), the report `what` of [`Kernel::reports`]. Checked and
    /// unchecked code alike.
    Report {
        /// Its place in [`Kernel::reports`].
        what: usize,
        /// The index.
        index: Expr,
        /// The length it is out of bounds for.
        len: Expr,
    },
    /// `let local = subgroup_op(value[, lane]);`: a collective over the lanes of the
    /// thread's subgroup. Like a barrier, every thread of the block reaches it (the CPU
    /// twin splits the block's code there).
    Collective {
        /// The local the result is bound to (one value per thread).
        local: usize,
        /// The operation.
        op: Collective,
        /// Each lane's value.
        value: Expr,
        /// The lane, offset or mask of a shuffle (a `usize`).
        lane: Option<Expr>,
    },
}

/// A subgroup collective. The lanes of a subgroup are the threads of one warp on CUDA
/// (32, by linear index in the block), the invocations of one subgroup on Vulkan (the
/// adapter's size) and groups of [`TWIN_SUBGROUP`] threads by linear index on the CPU twin;
/// the last subgroup of a block may have fewer lanes. A shuffle from a lane that is not
/// there gives the caller's own value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collective {
    /// `subgroup_add(v)`: the sum over the lanes (integers wrap; a float sum's order is the
    /// target's).
    Add,
    /// `subgroup_min(v)`: the least value (a NaN loses to a number).
    Min,
    /// `subgroup_max(v)`: the greatest value (a NaN loses to a number).
    Max,
    /// `subgroup_inclusive_add(v)`: the sum over the lanes up to and including this one.
    InclusiveAdd,
    /// `subgroup_exclusive_add(v)`: the sum over the lanes before this one (0 on lane 0).
    ExclusiveAdd,
    /// `subgroup_shuffle(v, lane)`: lane `lane`'s value.
    Shuffle,
    /// `subgroup_shuffle_xor(v, mask)`: the value of lane `this ^ mask`.
    ShuffleXor,
    /// `subgroup_shuffle_up(v, delta)`: the value of lane `this - delta` (the own value
    /// where there is none).
    ShuffleUp,
    /// `subgroup_shuffle_down(v, delta)`: the value of lane `this + delta`.
    ShuffleDown,
    /// `subgroup_any(c)`: whether `c` holds on any lane.
    Any,
    /// `subgroup_all(c)`: whether `c` holds on every lane.
    All,
}

/// The subgroup size of the CPU twin (the CUDA warp's, so that a kernel's twin and its CUDA
/// run group threads alike).
pub const TWIN_SUBGROUP: usize = 32;

impl Collective {
    /// Each collective: its name in the kernel language, itself, and whether it takes a lane.
    pub const ALL: [(&'static str, Collective, bool); 11] = [
        ("subgroup_add", Collective::Add, false),
        ("subgroup_min", Collective::Min, false),
        ("subgroup_max", Collective::Max, false),
        ("subgroup_inclusive_add", Collective::InclusiveAdd, false),
        ("subgroup_exclusive_add", Collective::ExclusiveAdd, false),
        ("subgroup_shuffle", Collective::Shuffle, true),
        ("subgroup_shuffle_xor", Collective::ShuffleXor, true),
        ("subgroup_shuffle_up", Collective::ShuffleUp, true),
        ("subgroup_shuffle_down", Collective::ShuffleDown, true),
        ("subgroup_any", Collective::Any, false),
        ("subgroup_all", Collective::All, false),
    ];

    /// The collective of a name in the kernel language.
    pub fn from_name(name: &str) -> Option<Collective> {
        Collective::ALL.iter().find(|c| c.0 == name).map(|c| c.1)
    }

    /// Its name in the kernel language.
    pub fn name(self) -> &'static str {
        Collective::ALL
            .iter()
            .find(|c| c.1 == self)
            .map_or("subgroup_add", |c| c.0)
    }

    /// Whether it takes a lane, offset or mask besides the value.
    pub fn takes_lane(self) -> bool {
        matches!(
            self,
            Collective::Shuffle
                | Collective::ShuffleXor
                | Collective::ShuffleUp
                | Collective::ShuffleDown
        )
    }

    /// Whether it votes on a `bool` (else it takes a 32- or 64-bit number).
    pub fn votes(self) -> bool {
        matches!(self, Collective::Any | Collective::All)
    }
}

impl Stmt {
    /// Whether the statement is or contains a barrier.
    pub fn has_barrier(&self) -> bool {
        match self {
            Stmt::Barrier | Stmt::Collective { .. } => true,
            Stmt::Block(b) | Stmt::Loop(b) => b.iter().any(Stmt::has_barrier),
            Stmt::If { then, els, .. } => {
                then.iter().any(Stmt::has_barrier) || els.iter().any(Stmt::has_barrier)
            }
            Stmt::For { body, .. } | Stmt::While { body, .. } => body.iter().any(Stmt::has_barrier),
            _ => false,
        }
    }
}

#[derive(Debug, Clone)]
/// What an assignment writes.
pub enum Place {
    /// A local, by number.
    Local(usize),
    /// An element of an array.
    Index {
        /// The array.
        arr: Arr,
        /// The index, a `usize`.
        idx: Expr,
        /// Whether the index is in bounds whatever the inputs ([`Kernel::prove_bounds`]):
        /// checked code leaves its check out.
        proven: bool,
    },
}

#[derive(Debug, Clone)]
/// A typed expression.
pub struct Expr {
    /// What it computes.
    pub kind: ExprKind,
    /// The type of its value.
    pub ty: Ty,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
/// A thread coordinate, per axis (`_x`, `_y`, `_z`).
pub enum Coord {
    /// The thread's index in the grid (`global_x()`).
    Global,
    /// The thread's index in its block (`thread_x()`).
    Thread,
    /// The block's index in the grid (`block_x()`).
    Block,
    /// Threads per block (`block_dim_x()`).
    BlockDim,
    /// Blocks in the grid (`grid_dim_x()`).
    GridDim,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// Where a thread is among the subgroups of its block (each a `usize`).
pub enum Lane {
    /// `subgroup_size()`: the lanes of a full subgroup (32 on CUDA, the adapter's on
    /// Vulkan, [`TWIN_SUBGROUP`] on the CPU twin).
    Size,
    /// `subgroup_lane()`: this thread's lane in its subgroup.
    Lane,
    /// `subgroup_id()`: this thread's subgroup in its block.
    Id,
    /// `num_subgroups()`: the subgroups of the block.
    Count,
}

impl Lane {
    /// Each query: its name in the kernel language and itself.
    pub const ALL: [(&'static str, Lane); 4] = [
        ("subgroup_size", Lane::Size),
        ("subgroup_lane", Lane::Lane),
        ("subgroup_id", Lane::Id),
        ("num_subgroups", Lane::Count),
    ];

    /// The query of a name in the kernel language.
    pub fn from_name(name: &str) -> Option<Lane> {
        Lane::ALL.iter().find(|c| c.0 == name).map(|c| c.1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// A unary operator.
pub enum UnOp {
    /// `-a` (wrapping for integers).
    Neg,
    /// `!a` (bitwise for integers).
    Not,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// A binary operator, as Rust writes it; integers wrap.
pub enum BinOp {
    /// `+`.
    Add,
    /// `-`.
    Sub,
    /// `*`.
    Mul,
    /// `/` (integers: `a / 0 == 0`, as the built-in ops and NumPy give; `MIN / -1 == MIN`).
    Div,
    /// `%` (integers: `a % 0 == 0`).
    Rem,
    /// `&`.
    BitAnd,
    /// `|`.
    BitOr,
    /// `^`.
    BitXor,
    /// `<<` (the shift taken modulo the width).
    Shl,
    /// `>>` (arithmetic for signed types; the shift modulo the width).
    Shr,
    /// `&&`.
    And,
    /// `||`.
    Or,
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

impl BinOp {
    /// The operator as Rust (and C, and WGSL) spell it.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::BitAnd => "&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::And => "&&",
            BinOp::Or => "||",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
        }
    }

    /// Whether the operator compares (its value is a `bool`).
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }
}

/// The math methods, by their Rust names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Math {
    /// `abs()`.
    Abs,
    /// `min(b)`: a NaN loses to a number, and of two equal values (`0.0` and `-0.0`
    /// included) the receiver wins.
    Min,
    /// `max(b)`: a NaN loses to a number, and of two equal values the receiver wins.
    Max,
    /// `sqrt()`.
    Sqrt,
    /// `exp()`.
    Exp,
    /// `exp2()`.
    Exp2,
    /// `ln()`.
    Ln,
    /// `log2()`.
    Log2,
    /// `ln_1p()`: `ln(1 + self)`, accurate near 0.
    Ln1p,
    /// `sin()`.
    Sin,
    /// `cos()`.
    Cos,
    /// `tanh()`.
    Tanh,
    /// `powf(b)`.
    Powf,
    /// `floor()`.
    Floor,
    /// `ceil()`.
    Ceil,
    /// `mul_add(b, c)`: `self * b + c`, rounded once.
    MulAdd,
    /// `mul_hi(b)`: the high 32 bits of the 64-bit product of two `u32`s (u32 only).
    MulHi,
}

impl Math {
    /// Each method: its Rust name, itself, and how many arguments it takes besides `self`.
    pub const ALL: [(&'static str, Math, usize); 17] = [
        ("abs", Math::Abs, 0),
        ("min", Math::Min, 1),
        ("max", Math::Max, 1),
        ("sqrt", Math::Sqrt, 0),
        ("exp", Math::Exp, 0),
        ("exp2", Math::Exp2, 0),
        ("ln", Math::Ln, 0),
        ("log2", Math::Log2, 0),
        ("ln_1p", Math::Ln1p, 0),
        ("sin", Math::Sin, 0),
        ("cos", Math::Cos, 0),
        ("tanh", Math::Tanh, 0),
        ("powf", Math::Powf, 1),
        ("floor", Math::Floor, 0),
        ("ceil", Math::Ceil, 0),
        ("mul_add", Math::MulAdd, 2),
        ("mul_hi", Math::MulHi, 1),
    ];

    /// The method's Rust name.
    pub fn rust(self) -> &'static str {
        Math::ALL
            .iter()
            .find(|m| m.1 == self)
            .map(|m| m.0)
            .unwrap_or("abs")
    }

    /// Whether integers have it too.
    pub fn for_ints(self) -> bool {
        matches!(self, Math::Abs | Math::Min | Math::Max | Math::MulHi)
    }

    /// Whether only `u32` has it.
    pub fn u32_only(self) -> bool {
        self == Math::MulHi
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// An atomic read-modify-write of an array element (`atomic_add(&mut a[i], v)`, ...); each returns the old value.
pub enum AtomicOp {
    /// `atomic_add`.
    Add,
    /// `atomic_min`.
    Min,
    /// `atomic_max`.
    Max,
    /// `atomic_exchange`: stores the value.
    Exchange,
    /// `atomic_cas`: stores the second value where the element equals the first.
    Cas,
}

#[derive(Debug, Clone)]
/// What an expression computes.
pub enum ExprKind {
    /// A literal: its Rust text, typed (`1.5`, `3`, `true`).
    Lit(String),
    /// A local, by number.
    Local(usize),
    /// A scalar parameter.
    Param(usize),
    /// An element of an array, bounds-checked.
    Index {
        /// The array.
        arr: Arr,
        /// The index, a `usize`.
        idx: Box<Expr>,
        /// Whether the index is in bounds whatever the inputs ([`Kernel::prove_bounds`]):
        /// checked code leaves its check out.
        proven: bool,
    },
    /// `a.len()`.
    Len(Arr),
    /// A unary operator on a value.
    Unary(UnOp, Box<Expr>),
    /// A binary operator on two values (of one type; a shift's right side is a `u32`).
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `a as T`, Rust's conversion, to the expression's type.
    Cast(Box<Expr>),
    /// A number as an `f32` rounded to odd: toward zero, then the last bit set when that
    /// was inexact (a NaN stays a NaN, a value past f32's largest becomes the largest). A
    /// store of it into an f16 or bf16 array rounds once, correctly, as converting the
    /// number directly would; `a as f32` and the store would round twice. Built-in casts
    /// only: no `#[kernel]` syntax makes it.
    RoundOdd(Box<Expr>),
    /// A math method on its receiver and arguments.
    Math(Math, Vec<Expr>),
    /// A thread coordinate on an axis (0, 1, 2).
    Coord(Coord, usize),
    /// Where the thread is among its block's subgroups.
    Lane(Lane),
    /// A compile-time parameter, by number ([`Kernel::comptime`]).
    Comptime(usize),
    /// `if c { a } else { b }`, only as the whole value of a `let` or an assignment.
    IfElse(Box<Expr>, Box<Expr>, Box<Expr>),
    /// An atomic on an array element; its value is the old element.
    Atomic {
        /// The operation.
        op: AtomicOp,
        /// The array.
        arr: Arr,
        /// The element's index, a `usize`.
        idx: Box<Expr>,
        /// The operand(s): one, or the expected and new values of a compare-and-swap.
        args: Vec<Expr>,
    },
    /// A call of a device function: its number in [`Kernel::calls`] and its arguments.
    Call(usize, Vec<Expr>),
}

/// Which values are the same for every thread of a block: what a barrier or a subgroup
/// collective may depend on. Every thread of a block must reach the same barriers and
/// collectives (a GPU hangs or corrupts the block otherwise), so the conditions of the
/// control flow around one, and the bounds of a loop around one, must be uniform.
///
/// Uniform: literals, compile-time parameters, scalar kernel arguments, arrays' lengths,
/// `block_*()`, `block_dim_*()`, `grid_dim_*()`, `subgroup_size()`, `num_subgroups()`, and
/// what is computed from uniform values only (device functions take scalars and have no
/// thread, so a call of uniform arguments is uniform). Not uniform: `global_*()`,
/// `thread_*()`, `subgroup_lane()`, `subgroup_id()`, every value read from memory (an
/// array or shared array element, an atomic's old value), a collective's result, and a
/// local assigned a value that is not uniform, or assigned anywhere in control flow that
/// is not (threads then hold different values), including a loop some threads leave
/// early.
#[derive(Debug)]
pub struct Uniformity {
    /// For each local of the kernel: whether its value may differ between threads.
    varies: Vec<bool>,
    /// Locals whose `let` is uniform whatever its value.
    loaded: Vec<usize>,
}

impl Uniformity {
    /// The analysis of `k`'s body: which of its locals may differ between threads, the
    /// `let`s of the locals `loaded` uniform whatever their value (`uniform_load`'s: read by
    /// the whole block between two barriers).
    pub fn of(k: &Kernel, loaded: &[usize]) -> Uniformity {
        let mut u = Uniformity {
            varies: vec![false; k.locals.len()],
            loaded: loaded.to_vec(),
        };
        // A local marked varying stays so: a fixpoint, reached in at most one pass per
        // local.
        loop {
            let before = u.varies.clone();
            u.visit(&k.body, false);
            if u.varies == before {
                return u;
            }
        }
    }

    /// Whether `e` has the same value for every thread of a block.
    pub fn uniform(&self, e: &Expr) -> bool {
        match &e.kind {
            ExprKind::Lit(_) | ExprKind::Param(_) | ExprKind::Comptime(_) | ExprKind::Len(_) => {
                true
            }
            ExprKind::Local(i) => !self.varies.get(*i).copied().unwrap_or(true),
            ExprKind::Index { .. } | ExprKind::Atomic { .. } => false,
            ExprKind::Unary(_, a) | ExprKind::Cast(a) | ExprKind::RoundOdd(a) => self.uniform(a),
            ExprKind::Binary(_, a, b) => self.uniform(a) && self.uniform(b),
            ExprKind::IfElse(c, a, b) => self.uniform(c) && self.uniform(a) && self.uniform(b),
            ExprKind::Math(_, args) | ExprKind::Call(_, args) => {
                args.iter().all(|a| self.uniform(a))
            }
            ExprKind::Coord(c, _) => matches!(c, Coord::Block | Coord::BlockDim | Coord::GridDim),
            ExprKind::Lane(l) => matches!(l, Lane::Size | Lane::Count),
        }
    }

    fn mark(&mut self, local: usize, varies: bool) {
        if varies {
            if let Some(v) = self.varies.get_mut(local) {
                *v = true;
            }
        }
    }

    /// Marks the locals `stmts` assign, `divergent`: whether threads may be running them
    /// apart (some threads and not others, or different turns of a loop).
    fn visit(&mut self, stmts: &[Stmt], divergent: bool) {
        for s in stmts {
            match s {
                Stmt::Let { local, init } => {
                    let v = divergent || !(self.uniform(init) || self.loaded.contains(local));
                    self.mark(*local, v);
                }
                Stmt::Assign {
                    place: Place::Local(local),
                    value,
                    ..
                } => {
                    let v = divergent || !self.uniform(value);
                    self.mark(*local, v);
                }
                Stmt::Collective { local, .. } => self.mark(*local, true),
                Stmt::Block(b) => self.visit(b, divergent),
                Stmt::If { cond, then, els } => {
                    let d = divergent || !self.uniform(cond);
                    self.visit(then, d);
                    self.visit(els, d);
                }
                Stmt::For {
                    var,
                    start,
                    end,
                    step,
                    body,
                } => {
                    let bounds = self.uniform(start)
                        && self.uniform(end)
                        && step.as_ref().is_none_or(|s| self.uniform(s));
                    let d = divergent || !bounds || self.leaves_apart(body);
                    self.mark(*var, d);
                    self.visit(body, d);
                }
                Stmt::While { cond, body } => {
                    let d = divergent || !self.uniform(cond) || self.leaves_apart(body);
                    self.visit(body, d);
                }
                Stmt::Loop(body) => {
                    let d = divergent || self.leaves_apart(body);
                    self.visit(body, d);
                }
                Stmt::Assign { .. }
                | Stmt::Expr(_)
                | Stmt::Break
                | Stmt::Continue
                | Stmt::Return(_)
                | Stmt::Barrier
                | Stmt::Report { .. } => {}
            }
        }
    }

    /// Whether a loop body's own `break` or `continue` (not a nested loop's) sits in
    /// control flow that is not uniform: then threads run different turns. (A `return` is
    /// refused in a kernel with barriers or collectives, where uniformity matters.)
    fn leaves_apart(&self, body: &[Stmt]) -> bool {
        fn jumps(stmts: &[Stmt]) -> bool {
            stmts.iter().any(|s| match s {
                Stmt::Break | Stmt::Continue => true,
                Stmt::Block(b) => jumps(b),
                Stmt::If { then, els, .. } => jumps(then) || jumps(els),
                _ => false,
            })
        }
        fn apart(u: &Uniformity, stmts: &[Stmt]) -> bool {
            stmts.iter().any(|s| match s {
                Stmt::Block(b) => apart(u, b),
                Stmt::If { cond, then, els } if u.uniform(cond) => apart(u, then) || apart(u, els),
                Stmt::If { then, els, .. } => jumps(then) || jumps(els),
                _ => false,
            })
        }
        apart(self, body)
    }
}

/// A function of operands of one type, outside any kernel: a built-in op's body, which a
/// backend evaluates element by element in its own kernels. Operand `i` is
/// `ExprKind::Local(i)`; the emitters name it as they name a local (`v_` and its name), the
/// variable the backend's kernel declares.
#[derive(Debug, Clone)]
pub struct Body {
    /// The operands, in order.
    pub operands: Vec<Local>,
    /// The body's value, over the operands.
    pub value: Expr,
}

impl Body {
    /// The kernel the emitters see the body in: no parameters, the operands as its locals.
    #[cfg(test)]
    pub(crate) fn context(&self) -> Kernel {
        Kernel {
            name: String::new(),
            params: Vec::new(),
            shared: Vec::new(),
            locals: self.operands.clone(),
            body: Vec::new(),
            atomic: Vec::new(),
            ret: None,
            calls: Vec::new(),
            comptime: Vec::new(),
            reports: Vec::new(),
        }
    }
}

/// What [`walk`] shows its visitor: each statement, then each expression in it (outer
/// before inner).
/// One step of [`walk`].
#[derive(Debug)]
pub enum Visit<'a> {
    /// A statement.
    Stmt(&'a Stmt),
    /// An expression.
    Expr(&'a Expr),
}

/// Shows `f` every statement and expression of `stmts`, nested ones included: the one
/// traversal the generators' analyses share.
pub fn walk<'a>(stmts: &'a [Stmt], f: &mut dyn FnMut(Visit<'a>)) {
    for s in stmts {
        f(Visit::Stmt(s));
        match s {
            Stmt::Let { init, .. } => walk_expr(init, f),
            Stmt::Assign { place, value, .. } => {
                if let Place::Index { idx, .. } = place {
                    walk_expr(idx, f);
                }
                walk_expr(value, f);
            }
            Stmt::Expr(e) | Stmt::Return(Some(e)) => walk_expr(e, f),
            Stmt::Block(b) | Stmt::Loop(b) => walk(b, f),
            Stmt::If { cond, then, els } => {
                walk_expr(cond, f);
                walk(then, f);
                walk(els, f);
            }
            Stmt::For {
                start,
                end,
                step,
                body,
                ..
            } => {
                walk_expr(start, f);
                walk_expr(end, f);
                if let Some(s) = step {
                    walk_expr(s, f);
                }
                walk(body, f);
            }
            Stmt::While { cond, body } => {
                walk_expr(cond, f);
                walk(body, f);
            }
            Stmt::Collective { value, lane, .. } => {
                walk_expr(value, f);
                if let Some(l) = lane {
                    walk_expr(l, f);
                }
            }
            Stmt::Report { index, len, .. } => {
                walk_expr(index, f);
                walk_expr(len, f);
            }
            Stmt::Return(None) | Stmt::Break | Stmt::Continue | Stmt::Barrier => {}
        }
    }
}

/// Shows `f` `e` and every expression inside it (outer before inner).
pub fn walk_expr<'a>(e: &'a Expr, f: &mut dyn FnMut(Visit<'a>)) {
    f(Visit::Expr(e));
    match &e.kind {
        ExprKind::Index { idx, .. } => walk_expr(idx, f),
        ExprKind::Unary(_, a) | ExprKind::Cast(a) | ExprKind::RoundOdd(a) => walk_expr(a, f),
        ExprKind::Binary(_, a, b) => {
            walk_expr(a, f);
            walk_expr(b, f);
        }
        ExprKind::Math(_, args) | ExprKind::Call(_, args) => {
            args.iter().for_each(|a| walk_expr(a, f))
        }
        ExprKind::IfElse(c, a, b) => {
            walk_expr(c, f);
            walk_expr(a, f);
            walk_expr(b, f);
        }
        ExprKind::Atomic { idx, args, .. } => {
            walk_expr(idx, f);
            args.iter().for_each(|a| walk_expr(a, f));
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
