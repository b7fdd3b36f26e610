//! Typed scalars stored in the metadata ([`Scalar`]) and their conversions.

#[allow(unused_imports)]
use super::prelude::*;

use serde::{Deserialize, Serialize};

/// A typed scalar stored in the metadata (an epoch, a learning rate, a flag).
///
/// Serialized as Burn's `burn_pack::Scalar` is: `{"Int": i64}`, `{"UInt": u64}`,
/// `{"Float": f64}` or `{"Bool": bool}`.
///
/// ```
/// use burnpack::format::Scalar;
/// let s = Scalar::from(7u32);
/// assert_eq!(s, Scalar::UInt(7));
/// assert_eq!(u8::try_from(s).unwrap(), 7);
/// assert!(bool::try_from(s).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Scalar {
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// A floating-point number.
    Float(f64),
    /// A boolean.
    Bool(bool),
}

/// A [`Scalar`] could not become the requested type (wrong kind, or out of range).
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("scalar {0:?} does not fit the requested type")]
pub struct ScalarConversionError(pub Scalar);

macro_rules! scalar_ints {
    ($($t:ty => $variant:ident),*) => {$(
        impl From<$t> for Scalar {
            fn from(value: $t) -> Self {
                Scalar::$variant(value.into())
            }
        }
        impl TryFrom<Scalar> for $t {
            type Error = ScalarConversionError;
            fn try_from(scalar: Scalar) -> Result<Self, Self::Error> {
                let fitted = match scalar {
                    Scalar::Int(v) => v.try_into().ok(),
                    Scalar::UInt(v) => v.try_into().ok(),
                    Scalar::Float(_) | Scalar::Bool(_) => None,
                };
                fitted.ok_or(ScalarConversionError(scalar))
            }
        }
    )*};
}
scalar_ints!(i8 => Int, i16 => Int, i32 => Int, i64 => Int, u8 => UInt, u16 => UInt, u32 => UInt, u64 => UInt);

impl From<usize> for Scalar {
    fn from(value: usize) -> Self {
        Scalar::UInt(value as u64)
    }
}

impl TryFrom<Scalar> for usize {
    type Error = ScalarConversionError;
    fn try_from(scalar: Scalar) -> Result<Self, Self::Error> {
        u64::try_from(scalar)?
            .try_into()
            .map_err(|_| ScalarConversionError(scalar))
    }
}

impl From<f64> for Scalar {
    fn from(value: f64) -> Self {
        Scalar::Float(value)
    }
}

impl From<f32> for Scalar {
    fn from(value: f32) -> Self {
        Scalar::Float(value.into())
    }
}

impl From<bool> for Scalar {
    fn from(value: bool) -> Self {
        Scalar::Bool(value)
    }
}

impl TryFrom<Scalar> for f64 {
    type Error = ScalarConversionError;
    #[allow(clippy::cast_precision_loss)] // documented: integers convert to the nearest f64
    fn try_from(scalar: Scalar) -> Result<Self, Self::Error> {
        match scalar {
            Scalar::Float(v) => Ok(v),
            Scalar::Int(v) => Ok(v as f64),
            Scalar::UInt(v) => Ok(v as f64),
            Scalar::Bool(_) => Err(ScalarConversionError(scalar)),
        }
    }
}

impl TryFrom<Scalar> for bool {
    type Error = ScalarConversionError;
    fn try_from(scalar: Scalar) -> Result<Self, Self::Error> {
        match scalar {
            Scalar::Bool(v) => Ok(v),
            _ => Err(ScalarConversionError(scalar)),
        }
    }
}
