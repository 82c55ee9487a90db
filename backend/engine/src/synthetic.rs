//! Synthetic models: any supported shape with seeded random weights, built in memory.
