//! Tests of the launcher bootstrap, one module per area.

mod env;
mod share_id;
