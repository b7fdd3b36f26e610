//! The safetensors conversions under their earlier name: use
//! [`interop::safetensors`](crate::interop::safetensors). This alias goes in the next release.

pub use crate::interop::safetensors::*;
