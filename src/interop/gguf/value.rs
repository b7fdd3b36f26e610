//! GGUF's typed metadata values, and their textual form.

/// A metadata value of a GGUF file, with its type.
///
/// Its text (`Display`) is the value as written in Python: numbers, `true`/`false`, strings in
/// double quotes (escaped as JSON escapes them), arrays in brackets; an array of more than 16
/// items shows its first 8 and how many there are (`["a", "b", ... (151936 items)]`).
///
/// ```
/// use burnpack::interop::gguf::{Array, Value};
/// assert_eq!(Value::U32(4096).to_string(), "4096");
/// assert_eq!(Value::String("llama".into()).to_string(), "\"llama\"");
/// let tokens = Value::Array(Array::String((0..100).map(|i| i.to_string()).collect()));
/// assert!(tokens.to_string().ends_with("... (100 items)]"));
/// assert_eq!(Value::U32(7).as_u64(), Some(7));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Value {
    /// `uint8`.
    U8(u8),
    /// `int8`.
    I8(i8),
    /// `uint16`.
    U16(u16),
    /// `int16`.
    I16(i16),
    /// `uint32`.
    U32(u32),
    /// `int32`.
    I32(i32),
    /// `uint64`.
    U64(u64),
    /// `int64`.
    I64(i64),
    /// `float32`.
    F32(f32),
    /// `float64`.
    F64(f64),
    /// `bool`.
    Bool(bool),
    /// `string` (UTF-8).
    String(String),
    /// `array`.
    Array(Array),
}

/// A metadata array: its items, all of one type (arrays of arrays included).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
#[allow(missing_docs)] // one variant per GGUF item type, named as `Value`'s
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<Array>),
}

impl Value {
    /// The value as an unsigned integer, when it is a non-negative integer of any width.
    #[must_use]
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a string, when it is one.
    #[must_use]
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as an array, when it is one.
    #[must_use]
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Self::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl Value {
    /// The value as stored in another format's string metadata: a string as it is, any other
    /// value as its text with arrays unabridged (`[1, 2, 3]`, `["a", "b"]`).
    ///
    /// ```
    /// use burnpack::interop::gguf::{Array, Value};
    /// assert_eq!(Value::String("llama".into()).stored(), "llama");
    /// let long = Value::Array(Array::U8(vec![0; 20]));
    /// assert!(!long.stored().contains("..."));
    /// ```
    #[must_use]
    pub fn stored(&self) -> String {
        match self {
            Self::String(s) => s.clone(),
            Self::Array(a) => a.full(),
            other => other.to_string(),
        }
    }
}

impl Array {
    /// Every item as text, in brackets.
    fn full(&self) -> String {
        format!("[{}]", self.items(usize::MAX).join(", "))
    }

    /// How many items.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            Self::U8(v) => v.len(),
            Self::I8(v) => v.len(),
            Self::U16(v) => v.len(),
            Self::I16(v) => v.len(),
            Self::U32(v) => v.len(),
            Self::I32(v) => v.len(),
            Self::U64(v) => v.len(),
            Self::I64(v) => v.len(),
            Self::F32(v) => v.len(),
            Self::F64(v) => v.len(),
            Self::Bool(v) => v.len(),
            Self::String(v) => v.len(),
            Self::Array(v) => v.len(),
        }
    }

    /// Whether there is no item.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each item as text, the first `most` of them.
    fn items(&self, most: usize) -> Vec<String> {
        fn each<T>(v: &[T], most: usize, f: impl Fn(&T) -> String) -> Vec<String> {
            v.iter().take(most).map(f).collect()
        }
        match self {
            Self::U8(v) => each(v, most, ToString::to_string),
            Self::I8(v) => each(v, most, ToString::to_string),
            Self::U16(v) => each(v, most, ToString::to_string),
            Self::I16(v) => each(v, most, ToString::to_string),
            Self::U32(v) => each(v, most, ToString::to_string),
            Self::I32(v) => each(v, most, ToString::to_string),
            Self::U64(v) => each(v, most, ToString::to_string),
            Self::I64(v) => each(v, most, ToString::to_string),
            Self::F32(v) => each(v, most, |x| format!("{x:?}")),
            Self::F64(v) => each(v, most, |x| format!("{x:?}")),
            Self::Bool(v) => each(v, most, ToString::to_string),
            Self::String(v) => each(v, most, |s| quoted(s)),
            Self::Array(v) => each(v, most, ToString::to_string),
        }
    }
}

/// A string in double quotes, escaped as JSON escapes it.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                use std::fmt::Write as _;
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Arrays longer than this are summarised.
const SHOWN: usize = 16;

impl std::fmt::Display for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let len = self.len();
        if len > SHOWN {
            write!(f, "[{}, ... ({len} items)]", self.items(8).join(", "))
        } else {
            write!(f, "[{}]", self.items(SHOWN).join(", "))
        }
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::U8(v) => write!(f, "{v}"),
            Self::I8(v) => write!(f, "{v}"),
            Self::U16(v) => write!(f, "{v}"),
            Self::I16(v) => write!(f, "{v}"),
            Self::U32(v) => write!(f, "{v}"),
            Self::I32(v) => write!(f, "{v}"),
            Self::U64(v) => write!(f, "{v}"),
            Self::I64(v) => write!(f, "{v}"),
            Self::F32(v) => write!(f, "{v:?}"),
            Self::F64(v) => write!(f, "{v:?}"),
            Self::Bool(v) => write!(f, "{v}"),
            Self::String(s) => f.write_str(&quoted(s)),
            Self::Array(a) => write!(f, "{a}"),
        }
    }
}
