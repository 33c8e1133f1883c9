//! The kernel as the code generators see it: typed, with every name resolved.

/// A value type of the kernel language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ty {
    Bool,
    F32,
    F64,
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
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
            Ty::F16 => "::gpukit::half::f16",
            Ty::BF16 => "::gpukit::half::bf16",
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

    /// The WGSL type, where WGSL has one (`usize` is `u32` there).
    pub fn wgsl(self) -> Option<&'static str> {
        match self {
            Ty::Bool => Some("bool"),
            Ty::F32 => Some("f32"),
            Ty::I32 => Some("i32"),
            Ty::U32 | Ty::Usize => Some("u32"),
            Ty::F64 | Ty::I8 | Ty::U8 | Ty::I64 | Ty::U64 | Ty::F16 | Ty::BF16 => None,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Ty::F32 | Ty::F64)
    }

    pub fn is_int(self) -> bool {
        matches!(
            self,
            Ty::I8 | Ty::U8 | Ty::I32 | Ty::U32 | Ty::I64 | Ty::U64 | Ty::Usize
        )
    }

    pub fn is_signed(self) -> bool {
        matches!(self, Ty::I8 | Ty::I32 | Ty::I64)
    }

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
    pub name: String,
    pub ty: Ty,
    pub kind: ParamKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// `&[T]` (read) or `&mut [T]` (written); `array` is its number among the kernel's arrays.
    Slice {
        mutable: bool,
        array: u32,
    },
    Scalar,
}

/// A block-shared array.
#[derive(Debug, Clone)]
pub struct Shared {
    pub name: String,
    pub ty: Ty,
    pub len: u64,
    pub array: u32,
}

/// An array a kernel indexes: a slice parameter or a shared array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arr {
    Param(usize),
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
pub struct Local {
    /// The name emitted (unique in the kernel).
    pub name: String,
    pub ty: Ty,
    pub mutable: bool,
    pub storage: Storage,
}

#[derive(Debug, Clone)]
pub struct Kernel {
    pub name: String,
    pub params: Vec<Param>,
    pub shared: Vec<Shared>,
    pub locals: Vec<Local>,
    pub body: Vec<Stmt>,
    /// Arrays that atomics touch (WGSL declares them atomic, and accesses them so).
    pub atomic: Vec<Arr>,
    /// A device function's result type (`None` for a kernel).
    pub ret: Option<Ty>,
    /// The device functions called (distinct, in order of first call).
    pub calls: Vec<Callee>,
}

/// A device function a kernel calls.
#[derive(Debug, Clone)]
pub struct Callee {
    /// The path written at the call (`helper`, `math::helper`), as text.
    pub path: String,
    /// Its last segment: the function's name in the generated code.
    pub name: String,
    /// The first call's span, where a mismatch with the function's signature is reported.
    pub span: proc_macro2::Span,
    /// The argument types and result type the kernel calls it with.
    pub args: Vec<Ty>,
    pub ret: Ty,
}

impl Kernel {
    pub fn arr_ty(&self, a: Arr) -> Ty {
        match a {
            Arr::Param(i) => self.params[i].ty,
            Arr::Shared(i) => self.shared[i].ty,
        }
    }

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

    pub fn is_atomic(&self, a: Arr) -> bool {
        self.atomic.contains(&a)
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
pub enum Stmt {
    Let {
        local: usize,
        init: Expr,
    },
    Assign {
        place: Place,
        op: Option<BinOp>,
        value: Expr,
    },
    /// An expression evaluated for its effect (an atomic).
    Expr(Expr),
    Block(Vec<Stmt>),
    If {
        cond: Expr,
        then: Vec<Stmt>,
        els: Vec<Stmt>,
    },
    For {
        var: usize,
        start: Expr,
        end: Expr,
        /// A `usize`.
        step: Option<Expr>,
        body: Vec<Stmt>,
    },
    While {
        cond: Expr,
        body: Vec<Stmt>,
    },
    Loop(Vec<Stmt>),
    Break,
    Continue,
    /// `return;` in a kernel, `return v;` (or the tail expression) in a device function.
    Return(Option<Expr>),
    Barrier,
}

impl Stmt {
    pub fn has_barrier(&self) -> bool {
        match self {
            Stmt::Barrier => true,
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
pub enum Place {
    Local(usize),
    Index { arr: Arr, idx: Expr },
}

#[derive(Debug, Clone)]
pub struct Expr {
    pub kind: ExprKind,
    pub ty: Ty,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coord {
    Global,
    Thread,
    Block,
    BlockDim,
    GridDim,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
    And,
    Or,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl BinOp {
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
    Abs,
    Min,
    Max,
    Sqrt,
    Exp,
    Exp2,
    Ln,
    Log2,
    Sin,
    Cos,
    Tanh,
    Powf,
    Floor,
    Ceil,
    MulAdd,
}

impl Math {
    pub const ALL: [(&'static str, Math, usize); 15] = [
        ("abs", Math::Abs, 0),
        ("min", Math::Min, 1),
        ("max", Math::Max, 1),
        ("sqrt", Math::Sqrt, 0),
        ("exp", Math::Exp, 0),
        ("exp2", Math::Exp2, 0),
        ("ln", Math::Ln, 0),
        ("log2", Math::Log2, 0),
        ("sin", Math::Sin, 0),
        ("cos", Math::Cos, 0),
        ("tanh", Math::Tanh, 0),
        ("powf", Math::Powf, 1),
        ("floor", Math::Floor, 0),
        ("ceil", Math::Ceil, 0),
        ("mul_add", Math::MulAdd, 2),
    ];

    pub fn rust(self) -> &'static str {
        Math::ALL
            .iter()
            .find(|m| m.1 == self)
            .map(|m| m.0)
            .unwrap_or("abs")
    }

    /// Whether integers have it too.
    pub fn for_ints(self) -> bool {
        matches!(self, Math::Abs | Math::Min | Math::Max)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    Add,
    Min,
    Max,
    Exchange,
    Cas,
}

#[derive(Debug, Clone)]
pub enum ExprKind {
    /// A literal: its Rust text, typed (`1.5`, `3`, `true`).
    Lit(String),
    Local(usize),
    /// A scalar parameter.
    Param(usize),
    Index {
        arr: Arr,
        idx: Box<Expr>,
    },
    Len(Arr),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Cast(Box<Expr>),
    Math(Math, Vec<Expr>),
    Coord(Coord, usize),
    /// `if c { a } else { b }`, only as the whole value of a `let` or an assignment.
    IfElse(Box<Expr>, Box<Expr>, Box<Expr>),
    Atomic {
        op: AtomicOp,
        arr: Arr,
        idx: Box<Expr>,
        args: Vec<Expr>,
    },
    /// A call of a device function: its number in [`Kernel::calls`] and its arguments.
    Call(usize, Vec<Expr>),
}

/// What [`walk`] shows its visitor: each statement, then each expression in it (outer
/// before inner).
pub enum Visit<'a> {
    Stmt(&'a Stmt),
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
            Stmt::Return(None) | Stmt::Break | Stmt::Continue | Stmt::Barrier => {}
        }
    }
}

/// Shows `f` `e` and every expression inside it (outer before inner).
pub fn walk_expr<'a>(e: &'a Expr, f: &mut dyn FnMut(Visit<'a>)) {
    f(Visit::Expr(e));
    match &e.kind {
        ExprKind::Index { idx, .. } => walk_expr(idx, f),
        ExprKind::Unary(_, a) | ExprKind::Cast(a) => walk_expr(a, f),
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
        | ExprKind::Coord(..) => {}
    }
}
