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
    ///
    /// The text is built in one buffer, item by item: at most about 7 bytes of text per byte
    /// the value takes in the file (`false, ` for a one-byte bool), never a string per item.
    #[must_use]
    pub fn stored(&self) -> String {
        match self {
            Self::String(s) => s.clone(),
            Self::Array(a) => {
                let mut out = String::new();
                a.write_full(&mut out);
                out
            }
            other => other.to_string(),
        }
    }

    /// The value as a tool shows it (`bpk inspect`, a description's metadata): a string as it
    /// is, any other value as its text with long arrays abridged (see [`Value`]'s `Display`)
    /// and, for an abridged array, the XXH3 of all its items, so that what is shown stays
    /// small whatever the array's length and two arrays that differ past their first items
    /// still show differently (`bpk diff`).
    ///
    /// ```
    /// use burnpack::interop::gguf::{Array, Value};
    /// assert_eq!(Value::String("llama".into()).shown(), "llama");
    /// assert_eq!(Value::Array(Array::U8(vec![1, 2])).shown(), "[1, 2]");
    /// let long = |last| {
    ///     let mut items = vec![0u8; 1_000_000];
    ///     items[999_999] = last;
    ///     Value::Array(Array::U8(items)).shown()
    /// };
    /// assert!(long(0).starts_with("[0, 0, 0, 0, 0, 0, 0, 0, ... (1000000 items, xxh3 "));
    /// assert_ne!(long(0), long(1));
    /// ```
    #[must_use]
    pub fn shown(&self) -> String {
        match self {
            Self::String(s) => s.clone(),
            Self::Array(a) if a.abridged() => {
                let mut hasher = twox_hash::XxHash3_64::new();
                a.digest(&mut hasher);
                let hash = std::hash::Hasher::finish(&hasher);
                let len = a.len();
                if len > SHOWN {
                    format!(
                        "[{}, ... ({len} items, xxh3 {hash:016x})]",
                        a.items(8).join(", ")
                    )
                } else {
                    format!("[{}] (xxh3 {hash:016x})", a.items(SHOWN).join(", "))
                }
            }
            other => other.to_string(),
        }
    }
}

impl Array {
    /// Whether the text (`Display`) leaves items out, here or in an array it holds.
    fn abridged(&self) -> bool {
        match self {
            Self::Array(v) => v.len() > SHOWN || v.iter().take(SHOWN).any(Self::abridged),
            other => other.len() > SHOWN,
        }
    }

    /// Feeds every item (type, length, and each item's bytes) to `hasher`.
    fn digest(&self, hasher: &mut impl std::hash::Hasher) {
        fn each<T, H: std::hash::Hasher>(h: &mut H, tag: u8, v: &[T], f: impl Fn(&mut H, &T)) {
            h.write_u8(tag);
            h.write_u64(v.len() as u64);
            for x in v {
                f(h, x);
            }
        }
        match self {
            Self::U8(v) => {
                hasher.write_u8(0);
                hasher.write_u64(v.len() as u64);
                hasher.write(v);
            }
            Self::I8(v) => each(hasher, 1, v, |h, x| h.write(&x.to_le_bytes())),
            Self::U16(v) => each(hasher, 2, v, |h, x| h.write(&x.to_le_bytes())),
            Self::I16(v) => each(hasher, 3, v, |h, x| h.write(&x.to_le_bytes())),
            Self::U32(v) => each(hasher, 4, v, |h, x| h.write(&x.to_le_bytes())),
            Self::I32(v) => each(hasher, 5, v, |h, x| h.write(&x.to_le_bytes())),
            Self::F32(v) => each(hasher, 6, v, |h, x| h.write(&x.to_le_bytes())),
            Self::Bool(v) => each(hasher, 7, v, |h, x| h.write_u8(u8::from(*x))),
            Self::String(v) => {
                hasher.write_u8(8);
                hasher.write_u64(v.len() as u64);
                for x in v {
                    hasher.write_u64(x.len() as u64);
                    hasher.write(x.as_bytes());
                }
            }
            Self::Array(v) => {
                hasher.write_u8(9);
                hasher.write_u64(v.len() as u64);
                for x in v {
                    x.digest(hasher);
                }
            }
            Self::U64(v) => each(hasher, 10, v, |h, x| h.write(&x.to_le_bytes())),
            Self::I64(v) => each(hasher, 11, v, |h, x| h.write(&x.to_le_bytes())),
            Self::F64(v) => each(hasher, 12, v, |h, x| h.write(&x.to_le_bytes())),
        }
    }

    /// Every item as text, in brackets, appended to `out` (no string per item).
    fn write_full(&self, out: &mut String) {
        use std::fmt::Write as _;
        fn each<T>(out: &mut String, v: &[T], mut f: impl FnMut(&mut String, &T)) {
            for (i, x) in v.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                f(out, x);
            }
        }
        // Writing into a `String` cannot fail.
        fn shown<T: std::fmt::Display>(o: &mut String, x: &T) {
            let _ = write!(o, "{x}");
        }
        fn float<T: std::fmt::Debug>(o: &mut String, x: &T) {
            let _ = write!(o, "{x:?}");
        }
        out.push('[');
        match self {
            Self::U8(v) => each(out, v, shown),
            Self::I8(v) => each(out, v, shown),
            Self::U16(v) => each(out, v, shown),
            Self::I16(v) => each(out, v, shown),
            Self::U32(v) => each(out, v, shown),
            Self::I32(v) => each(out, v, shown),
            Self::U64(v) => each(out, v, shown),
            Self::I64(v) => each(out, v, shown),
            Self::F32(v) => each(out, v, float),
            Self::F64(v) => each(out, v, float),
            Self::Bool(v) => each(out, v, shown),
            Self::String(v) => each(out, v, |o, x| push_quoted(o, x)),
            Self::Array(v) => each(out, v, |o, x| x.write_full(o)),
        }
        out.push(']');
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
    push_quoted(&mut out, s);
    out
}

/// [`quoted`], appended to `out`.
fn push_quoted(out: &mut String, s: &str) {
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
