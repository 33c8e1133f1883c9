//! The types of the element-wise tables' columns beyond names, accuracy and bodies: the math
//! function an op rests on ([`MathFn`]) and the inputs it is meant for ([`Domain`]).

/// A function of the platform's math library that an element-wise op calls per element: the
/// table's `math` column (`none` for an op built from `+ - * /`, comparisons and `sqrt`).
///
/// The column decides, for every backend and test, three facts that no list elsewhere
/// repeats:
/// - **cost**: such an op costs an order of magnitude more per element than a memory-bound
///   one, so the CPU backend spreads it over its cores from fewer elements;
/// - **where it exists**: WGSL on Vulkan has `exp`, `log`, `tanh` and `pow` in 16 and 32
///   bits only, so the wgpu backend refuses such an op on f64;
/// - **its accuracy on a looser driver**: Vulkan specifies its functions (GLSL.std.450) to
///   `exp(a)` within `3 + 2|a|` ulp; `log` within 3 ulp outside `[0.5, 2]` and `2^-21`
///   absolute inside; `pow(a, b)` as `exp2(b log2 a)`; and a driver may read a subnormal
///   operand as 0 (lavapipe does). On a backend whose driver promises no
///   more (the wgpu backend), an op is within its [`UnaryOp::ulps`](super::UnaryOp::ulps)
///   plus the bound of the function it rests on; elsewhere within its `ulps`.
#[derive(Debug, Clone, Copy)]
pub enum MathFn {
    /// `exp` of `a = arg(x)`, or `tanh` of it (which a driver may compute through
    /// `exp(2|a|)`): within `3 + 4⌈|a|⌉` ulp on a looser driver.
    Exp(fn(f64) -> f64),
    /// `log` or `log1p` of the operand: within 3 ulp more on a looser driver, and `2^-21`
    /// absolute where its argument is in `[0.5, 2]`; `log` of a subnormal operand there is
    /// only at or below the log of the smallest normal (lavapipe gives -87.7 for the f32
    /// `4e-39`, whose log is -88.3).
    Log,
    /// `pow(a, b)` of the two operands (a binary op): `exp2(b log2 a)` on a looser driver,
    /// where `log2` of a subnormal `a` is only at or below that of the smallest normal (so
    /// the result is anywhere between `pow(0, b)` and `pow(smallest normal, b)`).
    Pow,
}

/// The inputs an element-wise op is meant for: the table's `domain` column, from which the
/// property tests draw its inputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Domain {
    /// Every number.
    All,
    /// From this value up: below it the result is NaN (`sqrt`, `log`, ...).
    AtLeast(f64),
}
