//! Kog's Laneformer on the fast CPU runtime: every lane's residual stream and shard,
//! the published reduction between lanes (docs/dtp.md), float weights.

pub mod forward;
pub mod model;

pub use forward::{forward, LaneWorkspace};
pub use model::LaneModel;
