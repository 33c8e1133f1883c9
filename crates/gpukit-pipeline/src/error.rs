//! The pipeline's error: which batch, which stage, and what went wrong.

use std::fmt;

/// An error a user stage (load or sink) returns.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The stages of a batch, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Filling a pinned staging buffer on the host (the loader).
    Load,
    /// Host to device.
    Upload,
    /// The user's device work.
    Compute,
    /// Device to host.
    Download,
    /// Handing the result to the sink.
    Deliver,
}

impl Stage {
    /// Every stage, in order.
    pub const ALL: [Stage; 5] = [
        Stage::Load,
        Stage::Upload,
        Stage::Compute,
        Stage::Download,
        Stage::Deliver,
    ];

    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Stage::Load => "load",
            Stage::Upload => "upload",
            Stage::Compute => "compute",
            Stage::Download => "download",
            Stage::Deliver => "deliver",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a pipeline stopped. Every batch before `batch` was delivered, in order; nothing of
/// `batch` or later was.
///
/// Each level of the chain states one fact: `Display` says which batch and stage, and the
/// cause is [`source`](std::error::Error::source), so `anyhow`'s `{:#}` (or any walk of
/// `source()`) prints `batch 3: the upload stage failed: Stream::upload: ...` once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// A user stage (the loader or the sink) returned an error, which is
    /// [`source`](std::error::Error::source).
    #[error("batch {batch}: the {stage} stage failed")]
    Stage {
        /// The batch that failed.
        batch: usize,
        /// The stage.
        stage: Stage,
        /// The user's error.
        #[source]
        source: BoxError,
    },
    /// A device call failed (or the compute stage returned a device error), which is
    /// [`source`](std::error::Error::source).
    #[error("batch {batch}: the {stage} stage failed")]
    Gpu {
        /// The batch that failed.
        batch: usize,
        /// The stage.
        stage: Stage,
        /// The device error.
        #[source]
        source: gpukit_core::Error,
    },
    /// The load function said it filled more rows than the pipeline's `max_rows` (its
    /// staging buffers hold `max_rows`).
    #[error("batch {batch}: the loader filled {rows} rows, more than max_rows ({max_rows})")]
    TooManyRows {
        /// The batch that failed.
        batch: usize,
        /// The rows the loader reported.
        rows: usize,
        /// The pipeline's maximum.
        max_rows: usize,
    },
    /// The pipeline was configured in a way that cannot run.
    #[error("invalid pipeline: {0}")]
    Config(String),
}

impl PipelineError {
    /// The batch that failed, if the error belongs to one.
    pub fn batch(&self) -> Option<usize> {
        match self {
            PipelineError::Stage { batch, .. }
            | PipelineError::Gpu { batch, .. }
            | PipelineError::TooManyRows { batch, .. } => Some(*batch),
            PipelineError::Config(_) => None,
        }
    }

    /// The stage that failed, if any.
    pub fn stage(&self) -> Option<Stage> {
        match self {
            PipelineError::Stage { stage, .. } | PipelineError::Gpu { stage, .. } => Some(*stage),
            PipelineError::TooManyRows { .. } => Some(Stage::Load),
            PipelineError::Config(_) => None,
        }
    }
}

impl From<PipelineError> for gpukit_core::Error {
    /// A device error comes back as itself; a user stage's error as
    /// [`gpukit_core::Error::Backend`] naming the stage and batch.
    fn from(e: PipelineError) -> Self {
        match e {
            PipelineError::Gpu { source, .. } => source,
            PipelineError::Stage {
                batch,
                stage,
                source,
            } => gpukit_core::Error::Backend {
                backend: "pipeline",
                call: stage.name(),
                message: format!("batch {batch}: {source}"),
            },
            e @ PipelineError::TooManyRows { .. } => gpukit_core::Error::Backend {
                backend: "pipeline",
                call: Stage::Load.name(),
                message: e.to_string(),
            },
            PipelineError::Config(message) => gpukit_core::Error::Backend {
                backend: "pipeline",
                call: "configure",
                message,
            },
        }
    }
}
