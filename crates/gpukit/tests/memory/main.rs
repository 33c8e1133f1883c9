//! Device memory and the work queued on it, on every backend, in one test binary (one
//! module per file): the stream-ordered pool and its counters (`pool`), graph capture and
//! replay with its guard (`graphs`), unified memory (`unified`) and profiler ranges
//! (`ranges`).

#[path = "../common/mod.rs"]
mod common;
mod graphs;
mod pool;
mod ranges;
mod unified;
