//! Device memory and the work queued on it, on every backend (one module per file): the
//! stream-ordered pool and its counters (`pool`), graph capture and replay with its guard
//! (`graphs`), unified memory (`unified`) and profiler ranges (`ranges`).

mod graphs;
mod pool;
mod ranges;
mod unified;
