//! [`CmpOp`]: the comparisons into `u8` masks, and how a binary op's second operand is laid
//! out.

/// How a binary op's second operand is laid out against a matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bcast {
    Row,
    Col,
}

/// A comparison of two elements into a `u8` mask (`Stream::compare`): IEEE's, so every
/// comparison with a NaN is false but `Ne`, which is true.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `a == b`.
    Eq,
    /// `a != b`.
    Ne,
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a >= b`.
    Ge,
}

impl CmpOp {
    /// Every comparison.
    pub const ALL: [CmpOp; 6] = [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ];

    /// The method's name (`eq`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }

    /// The C and WGSL operator.
    pub const fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    /// The reference: the comparison in the compute type.
    pub fn apply<C: PartialOrd>(self, a: C, b: C) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_name_and_spell_themselves() {
        let got = CmpOp::ALL.map(|c| (c.name(), c.symbol()));
        assert_eq!(
            got,
            [
                ("eq", "=="),
                ("ne", "!="),
                ("lt", "<"),
                ("le", "<="),
                ("gt", ">"),
                ("ge", ">="),
            ]
        );
    }
}
