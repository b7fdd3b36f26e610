//! The safetensors conversions under their earlier name: use
//! [`interop::safetensors`](crate::interop::safetensors). This alias goes in the next release.

//! (Empty in a build without the `safetensors` feature.)

#[cfg(feature = "safetensors")]
pub use crate::interop::safetensors::*;
