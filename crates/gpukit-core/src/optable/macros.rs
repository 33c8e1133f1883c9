//! The macros that expand the op table's entries (`optable/mod.rs`) into the op enums, one
//! accessor per column, the reference code and the typed methods on
//! [`Stream`](crate::Stream).
//!
//! Every column is required in every entry, so that no fact of an op lives anywhere else
//! (the module docs of `optable` say what each means):
//! - unary: `Variant "name" (method, method_inplace) ulps N grows N math M domain D |x| body;`
//!   with `M` one of `none`, `exp[arg]`, `log` and `D` one of `all`, `from[lo]`;
//! - binary: `Variant "name" (eight methods) ulps N math M |a, b| body;` with `M` one of
//!   `none`, `pow`.

/// The unary table: from its `numeric` and `float` entries, the variants, their columns'
/// accessors, their reference code and their typed methods on [`Stream`](crate::Stream).
macro_rules! unary_table {
    (
        numeric { $(
            $(#[$nd:meta])* $NV:ident $nname:literal ($nm:ident, $nmi:ident)
                ulps $nulps:literal grows $ngrow:literal
                math $nmath:ident $([$narg:expr])? domain $ndom:ident $([$nlo:expr])?
                |$nx:ident| $nbody:expr;
        )* }
        float { $(
            $(#[$fd:meta])* $FV:ident $fname:literal ($fm:ident, $fmi:ident)
                ulps $fulps:literal grows $fgrow:literal
                math $fmath:ident $([$farg:expr])? domain $fdom:ident $([$flo:expr])?
                |$fx:ident| $fbody:expr;
        )* }
    ) => {
        /// Element-wise functions of one operand (the op table's unary entries).
        // Not `non_exhaustive`: a backend's `match` over the ops must fail to compile when
        // the table grows, so that no op lacks a body.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum UnaryOp {
            $( $(#[$nd])* $NV, )*
            $( $(#[$fd])* $FV, )*
        }

        impl UnaryOp {
            /// Every unary op, in table order.
            pub const ALL: &'static [UnaryOp] = &[$(UnaryOp::$NV,)* $(UnaryOp::$FV,)*];

            /// The op's position in [`UnaryOp::ALL`]: its discriminant (`ALL` lists the
            /// variants in their declared order).
            pub(crate) const fn index(self) -> u32 {
                self as u32
            }

            /// Lower-case name: the op in kernel names and in the errors of the generic
            /// entry points ([`Stream::unary`]); the typed methods are named in the table
            /// entry (and name themselves in their errors).
            pub const fn name(self) -> &'static str {
                match self { $(UnaryOp::$NV => $nname,)* $(UnaryOp::$FV => $fname,)* }
            }

            /// Whether only float element types have the op.
            pub const fn floats_only(self) -> bool {
                match self { $(UnaryOp::$NV => false,)* $(UnaryOp::$FV => true,)* }
            }

            /// The op's accuracy contract (the `ulps` column), in ulp of an f32 or f64
            /// result: on every backend the result is within this many ulp of the exact
            /// result rounded to the type (for an op whose budget grows below 0, within
            /// [`UnaryOp::ulps_at`] there), and the backends within this many of each other; on a driver with Vulkan's precision,
            /// plus what [`UnaryOp::math`] adds. 0: correctly rounded, so bit for bit on every
            /// backend (one `+ - * /`, comparison or `sqrt`). f16 and bf16 results, computed
            /// in f32 and rounded once, are within `min(ulps, 1)` of theirs. The property
            /// tests check it.
            pub const fn ulps(self) -> u32 {
                match self { $(UnaryOp::$NV => $nulps,)* $(UnaryOp::$FV => $fulps,)* }
            }

            /// The op's accuracy contract at the input `x`: [`UnaryOp::ulps`], plus, for
            /// `x` below 0, `N |a|` ulp where `a` is the argument of the math function the
            /// op rests on ([`MathFn::Exp`]) and `N` the `grows` column (0 for most ops).
            /// An op grows where its result is `x e^a` in effect and `a` is itself
            /// computed, so that `a`'s few-eps rounding is `|a|` times that relative error
            /// of the result (gelu below 0); the property tests hold every input to it.
            pub fn ulps_at(self, x: f64) -> u32 {
                let n: u32 = match self { $(UnaryOp::$NV => $ngrow,)* $(UnaryOp::$FV => $fgrow,)* };
                let more = match self.math() {
                    Some(MathFn::Exp(arg)) if n > 0 && x < 0.0 => {
                        (f64::from(n) * arg(x).abs()).ceil().min(f64::from(u32::MAX / 2)) as u32
                    }
                    _ => 0,
                };
                self.ulps().saturating_add(more)
            }

            /// The math function the op calls per element (the `math` column), which
            /// decides its cost, where it exists and its accuracy on a looser driver
            /// ([`MathFn`]); `None` for an op built from `+ - * /`, comparisons and `sqrt`.
            pub fn math(self) -> Option<MathFn> {
                match self {
                    $(UnaryOp::$NV => unary_table!(@math $nx $nmath $([$narg])?),)*
                    $(UnaryOp::$FV => unary_table!(@math $fx $fmath $([$farg])?),)*
                }
            }

            /// The inputs the op is meant for (the `domain` column).
            pub const fn domain(self) -> Domain {
                match self {
                    $(UnaryOp::$NV => unary_table!(@domain $ndom $([$nlo])?),)*
                    $(UnaryOp::$FV => unary_table!(@domain $fdom $([$flo])?),)*
                }
            }

            /// The reference semantics on one value of a float compute type.
            pub fn apply_real<C: Real>(self, x: C) -> C {
                match self {
                    $(UnaryOp::$NV => { let $nx = x; $nbody })*
                    $(UnaryOp::$FV => { let $fx = x; $fbody })*
                }
            }

            /// The reference semantics on one value of any compute type; `None` for a
            /// float-only op.
            pub fn apply_numeric<C: Arith>(self, x: C) -> Option<C> {
                match self {
                    $(UnaryOp::$NV => { let $nx = x; Some($nbody) })*
                    _ => None,
                }
            }

            /// Runs the op over slices with the reference semantics: `out[i] = op(src[i])`,
            /// or `out[i] = op(out[i])` when `src` is `None`. Returns `false` (and changes
            /// nothing) for a float-only op; [`UnaryOp::map_float`] has them all.
            pub fn map_numeric<T: Numeric<Compute = C>, C: Arith>(
                self,
                src: Option<&[T]>,
                out: &mut [T],
            ) -> bool {
                match self {
                    $(UnaryOp::$NV => { map1(src, out, |$nx: C| $nbody); true })*
                    _ => false,
                }
            }

            /// [`UnaryOp::map_numeric`] for float elements, which have every op.
            pub fn map_float<T: Numeric<Compute = C>, C: Real>(self, src: Option<&[T]>, out: &mut [T]) {
                match self {
                    $(UnaryOp::$NV => map1(src, out, |$nx: C| $nbody),)*
                    $(UnaryOp::$FV => map1(src, out, |$fx: C| $fbody),)*
                }
            }
        }

        impl<B: Backend> Stream<B> {
            $(
                $(#[$nd])*
                ///
                #[doc = concat!("Writes `", $nname, "(x)` into `out`, element by element.")]
                pub fn $nm<T: Numeric>(&self, x: &impl DeviceRead<T, B>, out: &mut impl DeviceWrite<T, B>) -> Result<()> {
                    self.unary_as(stringify!($nm), UnaryOp::$NV, x, out)
                }
                #[doc = concat!("In place: `x = ", $nname, "(x)`, element by element (see [`Stream::", stringify!($nm), "`]).")]
                pub fn $nmi<T: Numeric>(&self, x: &mut impl DeviceWrite<T, B>) -> Result<()> {
                    self.unary_inplace_as(stringify!($nmi), UnaryOp::$NV, x)
                }
            )*
            $(
                $(#[$fd])*
                ///
                #[doc = concat!("Writes `", $fname, "(x)` into `out`, element by element.")]
                pub fn $fm<T: Float>(&self, x: &impl DeviceRead<T, B>, out: &mut impl DeviceWrite<T, B>) -> Result<()> {
                    self.unary_as(stringify!($fm), UnaryOp::$FV, x, out)
                }
                #[doc = concat!("In place: `x = ", $fname, "(x)`, element by element (see [`Stream::", stringify!($fm), "`]).")]
                pub fn $fmi<T: Float>(&self, x: &mut impl DeviceWrite<T, B>) -> Result<()> {
                    self.unary_inplace_as(stringify!($fmi), UnaryOp::$FV, x)
                }
            )*
        }
    };
    (@math $x:ident none) => { None };
    (@math $x:ident log) => { Some(MathFn::Log) };
    (@math $x:ident exp [$arg:expr]) => { Some(MathFn::Exp(|$x: f64| $arg)) };
    (@domain all) => { Domain::All };
    (@domain from [$lo:expr]) => { Domain::AtLeast($lo) };
}

/// The binary table: as [`unary_table!`], with each op's scalar, row and column forms.
macro_rules! binary_table {
    (
        numeric { $(
            $(#[$nd:meta])* $NV:ident $nname:literal ($($nm:ident),*)
                ulps $nulps:literal math $nmath:ident
                |$na:ident, $nb:ident| $nbody:expr;
        )* }
        float { $(
            $(#[$fd:meta])* $FV:ident $fname:literal ($($fm:ident),*)
                ulps $fulps:literal math $fmath:ident
                |$fa:ident, $fb:ident| $fbody:expr;
        )* }
    ) => {
        /// Element-wise functions of two operands (the op table's binary entries).
        // Not `non_exhaustive`, as `UnaryOp`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum BinaryOp {
            $( $(#[$nd])* $NV, )*
            $( $(#[$fd])* $FV, )*
        }

        impl BinaryOp {
            /// Every binary op, in table order.
            pub const ALL: &'static [BinaryOp] = &[$(BinaryOp::$NV,)* $(BinaryOp::$FV,)*];

            /// The op's position in [`BinaryOp::ALL`]: its discriminant (`ALL` lists the
            /// variants in their declared order).
            pub(crate) const fn index(self) -> u32 {
                self as u32
            }

            /// Lower-case name: the op in kernel names and in the errors of the generic
            /// entry points ([`Stream::binary`], ...); the typed methods are named in the
            /// table entry (`minimum` for `min`) and name themselves in their errors.
            pub const fn name(self) -> &'static str {
                match self { $(BinaryOp::$NV => $nname,)* $(BinaryOp::$FV => $fname,)* }
            }

            /// Whether only float element types have the op.
            pub const fn floats_only(self) -> bool {
                match self { $(BinaryOp::$NV => false,)* $(BinaryOp::$FV => true,)* }
            }

            /// The op's accuracy contract (the `ulps` column), as [`UnaryOp::ulps`].
            pub const fn ulps(self) -> u32 {
                match self { $(BinaryOp::$NV => $nulps,)* $(BinaryOp::$FV => $fulps,)* }
            }

            /// The math function the op calls per element (the `math` column), as
            /// [`UnaryOp::math`].
            pub fn math(self) -> Option<MathFn> {
                match self {
                    $(BinaryOp::$NV => binary_table!(@math $nmath),)*
                    $(BinaryOp::$FV => binary_table!(@math $fmath),)*
                }
            }

            /// The reference semantics on values of a float compute type.
            pub fn apply_real<C: Real>(self, a: C, b: C) -> C {
                match self {
                    $(BinaryOp::$NV => { let ($na, $nb) = (a, b); $nbody })*
                    $(BinaryOp::$FV => { let ($fa, $fb) = (a, b); $fbody })*
                }
            }

            /// The reference semantics on values of any compute type; `None` for a
            /// float-only op.
            pub fn apply_numeric<C: Arith>(self, a: C, b: C) -> Option<C> {
                match self {
                    $(BinaryOp::$NV => { let ($na, $nb) = (a, b); Some($nbody) })*
                    _ => None,
                }
            }

            /// Runs the op over slices with the reference semantics: `out = op(src, rhs)`
            /// over a matrix of rows of `cols` elements (`cols` matters only for
            /// [`RhsSlice::Row`] and [`RhsSlice::Col`]), in place when `src` is `None`.
            /// Returns `false` (and changes nothing) for a float-only op.
            pub fn map_numeric<T: Numeric<Compute = C>, C: Arith>(
                self,
                src: Option<&[T]>,
                rhs: RhsSlice<'_, T>,
                cols: usize,
                out: &mut [T],
            ) -> bool {
                match self {
                    $(BinaryOp::$NV => { map2(src, rhs, cols, out, |$na: C, $nb: C| $nbody); true })*
                    _ => false,
                }
            }

            /// [`BinaryOp::map_numeric`] for float elements, which have every op.
            pub fn map_float<T: Numeric<Compute = C>, C: Real>(
                self,
                src: Option<&[T]>,
                rhs: RhsSlice<'_, T>,
                cols: usize,
                out: &mut [T],
            ) {
                match self {
                    $(BinaryOp::$NV => map2(src, rhs, cols, out, |$na: C, $nb: C| $nbody),)*
                    $(BinaryOp::$FV => map2(src, rhs, cols, out, |$fa: C, $fb: C| $fbody),)*
                }
            }
        }

        impl<B: Backend> Stream<B> {
            $( binary_table!(@methods Numeric, $NV, $nname, [$(#[$nd])*], $($nm),*); )*
            $( binary_table!(@methods Float, $FV, $fname, [$(#[$fd])*], $($fm),*); )*
        }
    };
    (@math none) => { None };
    (@math pow) => { Some(MathFn::Pow) };
    (@methods $bound:ident, $V:ident, $name:literal, [$(#[$d:meta])*],
        $plain:ident, $inplace:ident, $scalar:ident, $scalar_inplace:ident,
        $row:ident, $row_inplace:ident, $col:ident, $col_inplace:ident) => {
        $(#[$d])*
        ///
        #[doc = concat!("Writes `a ", $name, " b` into `out`, element by element.")]
        pub fn $plain<T: $bound>(
            &self,
            a: &impl DeviceRead<T, B>,
            b: &impl DeviceRead<T, B>,
            out: &mut impl DeviceWrite<T, B>,
        ) -> Result<()> {
            self.binary_as(stringify!($plain), BinaryOp::$V, a, b, out)
        }
        #[doc = concat!("In place: `a = a ", $name, " b`, element by element.")]
        pub fn $inplace<T: $bound>(&self, a: &mut impl DeviceWrite<T, B>, b: &impl DeviceRead<T, B>) -> Result<()> {
            self.binary_inplace_as(stringify!($inplace), BinaryOp::$V, a, b)
        }
        #[doc = concat!("Writes `a ", $name, " s` for one scalar `s` into `out`.")]
        pub fn $scalar<T: $bound>(&self, a: &impl DeviceRead<T, B>, s: T, out: &mut impl DeviceWrite<T, B>) -> Result<()> {
            self.binary_scalar_as(stringify!($scalar), BinaryOp::$V, a, s, out)
        }
        #[doc = concat!("In place: `a = a ", $name, " s` for one scalar `s`.")]
        pub fn $scalar_inplace<T: $bound>(&self, a: &mut impl DeviceWrite<T, B>, s: T) -> Result<()> {
            self.binary_scalar_inplace_as(stringify!($scalar_inplace), BinaryOp::$V, a, s)
        }
        #[doc = concat!("Writes `a[r][j] ", $name, " v[j]` into `out`: the row vector `v` (`shape.cols` elements) applied to every row of the `shape` matrix `a` (a bias).")]
        pub fn $row<T: $bound>(
            &self,
            shape: Shape,
            a: &impl DeviceRead<T, B>,
            v: &impl DeviceRead<T, B>,
            out: &mut impl DeviceWrite<T, B>,
        ) -> Result<()> {
            self.binary_bcast(stringify!($row), BinaryOp::$V, shape, Bcast::Row, a, v, out)
        }
        #[doc = concat!("In place: `a[r][j] = a[r][j] ", $name, " v[j]` for the row vector `v` (`shape.cols` elements).")]
        pub fn $row_inplace<T: $bound>(&self, shape: Shape, a: &mut impl DeviceWrite<T, B>, v: &impl DeviceRead<T, B>) -> Result<()> {
            self.binary_bcast_inplace(stringify!($row_inplace), BinaryOp::$V, shape, Bcast::Row, a, v)
        }
        #[doc = concat!("Writes `a[r][j] ", $name, " v[r]` into `out`: the column vector `v` (`shape.rows` elements) applied to every column of the `shape` matrix `a`.")]
        pub fn $col<T: $bound>(
            &self,
            shape: Shape,
            a: &impl DeviceRead<T, B>,
            v: &impl DeviceRead<T, B>,
            out: &mut impl DeviceWrite<T, B>,
        ) -> Result<()> {
            self.binary_bcast(stringify!($col), BinaryOp::$V, shape, Bcast::Col, a, v, out)
        }
        #[doc = concat!("In place: `a[r][j] = a[r][j] ", $name, " v[r]` for the column vector `v` (`shape.rows` elements).")]
        pub fn $col_inplace<T: $bound>(&self, shape: Shape, a: &mut impl DeviceWrite<T, B>, v: &impl DeviceRead<T, B>) -> Result<()> {
            self.binary_bcast_inplace(stringify!($col_inplace), BinaryOp::$V, shape, Bcast::Col, a, v)
        }
    };
}
