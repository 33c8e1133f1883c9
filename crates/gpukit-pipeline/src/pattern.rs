//! The patterns batches move through the stages in.

/// How batches move through the stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// The baseline: load, upload, compute, download and deliver one batch, then the next,
    /// all on one stream and the calling thread. Nothing overlaps.
    Sequential,
    /// Two batches in flight (`Deep(2)`).
    Double,
    /// Three batches in flight (`Deep(3)`): with balanced stages, upload, compute and
    /// download of three consecutive batches run at once.
    Triple,
    /// `n >= 1` batches in flight: a loader thread prefetches into pinned staging buffers,
    /// and upload, compute and download run on their own streams, ordered by events.
    Deep(usize),
}

impl Pattern {
    /// The patterns the examples and benchmarks compare.
    pub const STANDARD: [Pattern; 4] = [
        Pattern::Sequential,
        Pattern::Double,
        Pattern::Triple,
        Pattern::Deep(4),
    ];

    /// Batches in flight at once (1 for `Sequential`).
    pub fn depth(self) -> usize {
        match self {
            Pattern::Sequential => 1,
            Pattern::Double => 2,
            Pattern::Triple => 3,
            Pattern::Deep(n) => n,
        }
    }

    /// A short name: `sequential`, `double`, `triple`, `deep-4`.
    pub fn name(self) -> String {
        match self {
            Pattern::Sequential => "sequential".into(),
            Pattern::Double => "double".into(),
            Pattern::Triple => "triple".into(),
            Pattern::Deep(n) => format!("deep-{n}"),
        }
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}
