//! [`Shape`]: the rows and columns of a dense row-major matrix.

/// The shape of a dense row-major matrix: `rows` rows of `cols` elements each, stored one
/// row after another. The row/column broadcasts, the per-row reductions, softmax and
/// cross-entropy take one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Number of rows.
    pub rows: usize,
    /// Elements per row (also the leading dimension: rows are contiguous).
    pub cols: usize,
}

impl Shape {
    /// A `rows x cols` matrix.
    pub const fn new(rows: usize, cols: usize) -> Shape {
        Shape { rows, cols }
    }

    /// `rows * cols`, or `None` when it overflows.
    pub const fn len(self) -> Option<usize> {
        self.rows.checked_mul(self.cols)
    }

    /// Whether the matrix has no elements.
    pub const fn is_empty(self) -> bool {
        self.rows == 0 || self.cols == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_and_emptiness() {
        assert_eq!(Shape::new(3, 4).len(), Some(12));
        assert_eq!(Shape::new(usize::MAX, 2).len(), None);
        assert!(!Shape::new(3, 4).is_empty());
        assert!(Shape::new(0, 4).is_empty() && Shape::new(3, 0).is_empty());
    }
}
