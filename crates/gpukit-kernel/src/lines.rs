//! The text the CUDA C and WGSL generators write: indented lines and fresh temporaries.

/// Generated source under construction.
pub struct Lines {
    pub out: String,
    /// Indentation, in levels of four spaces.
    pub depth: usize,
    tmp: usize,
}

impl Lines {
    /// Empty, one level deep (a function's body).
    pub fn new() -> Self {
        Lines {
            out: String::new(),
            depth: 1,
            tmp: 0,
        }
    }

    /// Appends `s` as a line at the current depth.
    pub fn line(&mut self, s: &str) {
        for _ in 0..self.depth {
            self.out.push_str("    ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    /// A name for a temporary, unique in the function (`gk_t1`, `gk_t2`, ...).
    pub fn fresh(&mut self) -> String {
        self.tmp += 1;
        format!("gk_t{}", self.tmp)
    }
}
