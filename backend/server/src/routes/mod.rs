//! HTTP routes, one file per area.

pub mod info;
