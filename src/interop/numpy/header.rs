//! The `.npy` header: the magic, the version, the header length, and the Python-literal dict
//! (`{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }`), parsed strictly by hand
//! (nothing is evaluated): exactly the keys `descr`, `fortran_order` and `shape`, each once.

use burn::tensor::{BoolStore, DType};

/// The first bytes of every `.npy` file (and of every stored `.npz` member).
pub(crate) const MAGIC: &[u8] = b"\x93NUMPY";

/// The bytes before the header dict of a version 1.0 file (magic, version, `u16` length);
/// versions 2.0 and 3.0 have a `u32` length, two bytes more.
pub(super) const PREAMBLE_V1: usize = 10;
/// The preamble of versions 2.0 and 3.0.
pub(super) const PREAMBLE_V2: usize = 12;

/// A dtype of the header: its Burn equivalent, its element size and byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Dtype {
    /// Burn's dtype.
    pub dtype: DType,
    /// Bytes per element.
    pub size: usize,
    /// Stored big-endian (and more than one byte wide): swapped when read.
    pub big_endian: bool,
}

/// A parsed header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Header {
    /// `(major, minor)`: `(1, 0)`, `(2, 0)` or `(3, 0)`.
    pub version: (u8, u8),
    /// The dtype string as written (`<f4`).
    pub descr: String,
    pub dtype: Dtype,
    /// Stored in Fortran (column-major) order.
    pub fortran: bool,
    /// The shape, row-major as NumPy states it.
    pub shape: Vec<usize>,
    /// Where the array's bytes start, from the start of the `.npy` data.
    pub data_start: u64,
    /// The array's bytes: elements times the element size (checked not to overflow).
    pub data_len: u64,
}

/// What is wrong with a header.
#[derive(Debug)]
pub(super) enum HeaderError {
    /// Fewer bytes than the header says.
    Truncated(String),
    /// A valid header of something this crate does not read (an object array, complex
    /// numbers, a version after 3.0).
    Unsupported(String),
    /// Not a valid header.
    Invalid(String),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Truncated(r) | Self::Unsupported(r) | Self::Invalid(r) => f.write_str(r),
        }
    }
}

/// The length of the header dict from the preamble `pre` (at least [`PREAMBLE_V2`] bytes, or
/// all there are): `(version, preamble length, dict length)`.
pub(super) fn preamble(pre: &[u8], max_header: u64) -> Result<((u8, u8), usize, u64), HeaderError> {
    if pre.len() < PREAMBLE_V1 || !pre.starts_with(MAGIC) {
        return Err(if MAGIC.starts_with(&pre[..pre.len().min(MAGIC.len())]) {
            HeaderError::Truncated(format!(
                "{} bytes: a .npy header needs at least {PREAMBLE_V1}",
                pre.len()
            ))
        } else {
            HeaderError::Invalid("not a .npy array (no \\x93NUMPY magic)".into())
        });
    }
    let version = (pre[6], pre[7]);
    let (start, len) = match version {
        (1, 0) => (PREAMBLE_V1, u64::from(u16::from_le_bytes([pre[8], pre[9]]))),
        (2 | 3, 0) => {
            let Some(bytes) = pre.get(8..12) else {
                return Err(HeaderError::Truncated(
                    "the header length of a version 2 or 3 .npy header is cut off".into(),
                ));
            };
            let len = u32::from_le_bytes(bytes.try_into().unwrap_or_default());
            (PREAMBLE_V2, u64::from(len))
        }
        (major, minor) => {
            return Err(HeaderError::Unsupported(format!(
                ".npy format version {major}.{minor}: versions 1.0, 2.0 and 3.0 are read"
            )));
        }
    };
    if len > max_header {
        return Err(HeaderError::Invalid(format!(
            "a header of {len} bytes, over the limit of {max_header}"
        )));
    }
    Ok((version, start, len))
}

/// Parses the header dict `text` (the bytes after the preamble) of a file of `version`.
pub(super) fn parse(
    version: (u8, u8),
    preamble: usize,
    text: &[u8],
) -> Result<Header, HeaderError> {
    let invalid = |r: String| HeaderError::Invalid(format!("header: {r}"));
    // Versions 1 and 2 are latin-1 (NumPy writes ASCII there); 3 is UTF-8.
    let text = if version.0 == 3 {
        std::str::from_utf8(text).map_err(|_| invalid("not UTF-8".into()))?
    } else {
        if !text.is_ascii() {
            return Err(invalid("bytes that are not ASCII".into()));
        }
        std::str::from_utf8(text).map_err(|_| invalid("not ASCII".into()))?
    };
    let mut p = Parser {
        s: text.as_bytes(),
        at: 0,
    };
    p.expect(b'{')?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        p.space();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.space();
        p.expect(b':')?;
        p.space();
        let repeated = |k: &str| invalid(format!("the key '{k}' is given twice"));
        match key.as_str() {
            "descr" => {
                if descr.is_some() {
                    return Err(repeated("descr"));
                }
                if p.peek() == Some(b'[') {
                    return Err(HeaderError::Unsupported(
                        "a structured dtype (a list of fields): arrays of one numeric dtype are \
                         read"
                            .into(),
                    ));
                }
                descr = Some(p.string()?);
            }
            "fortran_order" => {
                if fortran.is_some() {
                    return Err(repeated("fortran_order"));
                }
                fortran = Some(p.boolean()?);
            }
            "shape" => {
                if shape.is_some() {
                    return Err(repeated("shape"));
                }
                shape = Some(p.tuple()?);
            }
            other => {
                return Err(invalid(format!(
                    "the key '{}' (a .npy header has 'descr', 'fortran_order' and 'shape')",
                    other.escape_default()
                )));
            }
        }
        p.space();
        if p.eat(b',') {
            continue;
        }
        p.space();
        p.expect(b'}')?;
        break;
    }
    if !p.s[p.at..]
        .iter()
        .all(|b| matches!(b, b' ' | b'\n' | b'\t' | b'\r'))
    {
        return Err(invalid("text after the closing '}'".into()));
    }
    let missing = |k: &str| invalid(format!("no '{k}' key"));
    let descr = descr.ok_or_else(|| missing("descr"))?;
    let fortran = fortran.ok_or_else(|| missing("fortran_order"))?;
    let shape = shape.ok_or_else(|| missing("shape"))?;
    let dtype = dtype_of(&descr)?;
    let elements = shape
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
        .ok_or_else(|| invalid(format!("shape {shape:?} overflows")))?;
    let data_len = elements
        .checked_mul(dtype.size as u64)
        .ok_or_else(|| invalid(format!("shape {shape:?} of {descr} overflows")))?;
    Ok(Header {
        version,
        descr,
        dtype,
        fortran,
        shape,
        data_start: (preamble + text.len()) as u64,
        data_len,
    })
}

/// Burn's equivalent of a NumPy dtype string (`<f4`, `>i8`, `|u1`, `|b1`).
fn dtype_of(descr: &str) -> Result<Dtype, HeaderError> {
    let unsupported = |what: String| HeaderError::Unsupported(format!("dtype '{descr}': {what}"));
    let bytes = descr.as_bytes();
    let (order, kind, size) = match bytes {
        [order @ (b'<' | b'>' | b'|' | b'='), kind, size @ ..] => (*order, *kind, size),
        _ => {
            return Err(HeaderError::Invalid(format!(
                "header: dtype '{}' is not a NumPy type string",
                descr.escape_default()
            )));
        }
    };
    if kind == b'O' {
        return Err(unsupported(
            "an object array (a Python pickle): refused, never unpickled".into(),
        ));
    }
    let size: usize = std::str::from_utf8(size)
        .ok()
        .filter(|s| !s.is_empty() && s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            HeaderError::Invalid(format!(
                "header: dtype '{}' has no element size",
                descr.escape_default()
            ))
        })?;
    let dtype = match (kind, size) {
        (b'f', 8) => DType::F64,
        (b'f', 4) => DType::F32,
        (b'f', 2) => DType::F16,
        (b'i', 8) => DType::I64,
        (b'i', 4) => DType::I32,
        (b'i', 2) => DType::I16,
        (b'i', 1) => DType::I8,
        (b'u', 8) => DType::U64,
        (b'u', 4) => DType::U32,
        (b'u', 2) => DType::U16,
        (b'u', 1) => DType::U8,
        (b'b', 1) => DType::Bool(BoolStore::Native),
        (b'c', _) => return Err(unsupported("complex numbers have no Burn dtype".into())),
        (b'U' | b'S' | b'a', _) => return Err(unsupported("strings have no Burn dtype".into())),
        (b'V', _) => return Err(unsupported("raw void records have no Burn dtype".into())),
        (b'M' | b'm', _) => {
            return Err(unsupported(
                "dates and time deltas have no Burn dtype".into(),
            ));
        }
        _ => return Err(unsupported("no Burn dtype".into())),
    };
    let big_endian = match order {
        b'>' => true,
        // `=`: native order, which NumPy never writes into a file: refused rather than guessed.
        b'=' if size > 1 => {
            return Err(unsupported(
                "native byte order ('='), which a file cannot state".into(),
            ));
        }
        _ => false,
    };
    Ok(Dtype {
        dtype,
        size,
        big_endian: big_endian && size > 1,
    })
}

/// A cursor over the header dict.
struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\t' | b'\r')) {
            self.at += 1;
        }
    }

    fn error(&self, wanted: &str) -> HeaderError {
        let found = match self.peek() {
            Some(b) => format!("'{}'", (b as char).escape_default()),
            None => "the end".into(),
        };
        HeaderError::Invalid(format!(
            "header: {wanted} expected at byte {}, found {found} (a .npy header is a Python \
             dict of literals; nothing in it is evaluated)",
            self.at
        ))
    }

    fn expect(&mut self, b: u8) -> Result<(), HeaderError> {
        if self.eat(b) {
            Ok(())
        } else {
            Err(self.error(&format!("'{}'", b as char)))
        }
    }

    /// A quoted string without escapes (NumPy writes none in its keys and type strings).
    fn string(&mut self) -> Result<String, HeaderError> {
        let quote = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err(self.error("a quoted string")),
        };
        self.at += 1;
        let start = self.at;
        while let Some(b) = self.peek() {
            if b == quote {
                let text = String::from_utf8_lossy(&self.s[start..self.at]).into_owned();
                self.at += 1;
                return Ok(text);
            }
            if b == b'\\' || b == b'\n' {
                return Err(self.error("a plain string (no escapes)"));
            }
            self.at += 1;
        }
        Err(self.error("the string's closing quote"))
    }

    fn boolean(&mut self) -> Result<bool, HeaderError> {
        for (word, value) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.s[self.at..].starts_with(word) {
                self.at += word.len();
                return Ok(value);
            }
        }
        Err(self.error("True or False"))
    }

    /// A tuple of non-negative integers: `()`, `(3,)`, `(3, 4)`, `(3, 4,)`.
    fn tuple(&mut self) -> Result<Vec<usize>, HeaderError> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            self.space();
            if self.eat(b')') {
                // `(3)` is the integer 3, not a tuple: a dimension must be followed by a comma
                // when it is the only one.
                return Ok(dims);
            }
            let start = self.at;
            while self.peek().is_some_and(|b| b.is_ascii_digit()) {
                self.at += 1;
            }
            if start == self.at {
                return Err(self.error("a dimension (a non-negative integer)"));
            }
            if self.at - start > 20 {
                return Err(self.error("a dimension of at most 20 digits"));
            }
            let digits = std::str::from_utf8(&self.s[start..self.at]).unwrap_or_default();
            let dim: usize = digits.parse().map_err(|_| {
                HeaderError::Invalid(format!(
                    "header: dimension {digits} is past this platform's memory"
                ))
            })?;
            dims.push(dim);
            if dims.len() > MAX_DIMS {
                return Err(HeaderError::Invalid(format!(
                    "header: more than {MAX_DIMS} dimensions (NumPy's limit)"
                )));
            }
            self.space();
            if self.eat(b',') {
                continue;
            }
            if dims.len() == 1 {
                return Err(self.error("',' after the only dimension"));
            }
            self.expect(b')')?;
            return Ok(dims);
        }
    }
}

/// NumPy's most dimensions (`NPY_MAXDIMS` of NumPy 2).
const MAX_DIMS: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    fn header(dict: &str) -> Result<Header, HeaderError> {
        parse((1, 0), PREAMBLE_V1, dict.as_bytes())
    }

    #[test]
    fn numpy_headers_parse() {
        let h =
            header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }      \n").unwrap();
        assert_eq!(h.shape, vec![3, 4]);
        assert_eq!(h.dtype.dtype, DType::F32);
        assert!(!h.fortran && !h.dtype.big_endian);
        assert_eq!(h.data_len, 48);
        let h = header("{'descr': '>i8', 'fortran_order': True, 'shape': (5,), }").unwrap();
        assert!(h.fortran && h.dtype.big_endian);
        assert_eq!(h.shape, vec![5]);
        let h = header("{'descr': '|b1', 'fortran_order': False, 'shape': ()}").unwrap();
        assert!(h.shape.is_empty());
        assert_eq!(h.data_len, 1);
    }

    #[test]
    fn anything_else_is_refused_by_name() {
        for (dict, says) in [
            (
                "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }",
                "object array",
            ),
            (
                "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }",
                "complex",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}",
                "'x'",
            ),
            (
                "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
                "twice",
            ),
            ("{'descr': '<f4', 'fortran_order': False}", "'shape'"),
            (
                "{'descr': '<f4', 'fortran_order': __import__('os'), 'shape': (1,)}",
                "True or False",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (3)}",
                "','",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}",
                "dimension",
            ),
            (
                "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}",
                "structured",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x",
                "after",
            ),
            (
                "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296)}",
                "overflows",
            ),
        ] {
            let err = header(dict).unwrap_err().to_string();
            assert!(err.contains(says), "{dict}: {err}");
        }
    }

    #[test]
    fn preambles_of_three_versions() {
        let mut v1 = MAGIC.to_vec();
        v1.extend([1, 0, 70, 0]);
        assert_eq!(preamble(&v1, 1 << 20).unwrap(), ((1, 0), 10, 70));
        let mut v3 = MAGIC.to_vec();
        v3.extend([3, 0, 0, 0, 1, 0]);
        assert_eq!(preamble(&v3, 1 << 20).unwrap(), ((3, 0), 12, 65536));
        assert!(
            preamble(&v3, 1000)
                .unwrap_err()
                .to_string()
                .contains("over the limit")
        );
        let mut v4 = MAGIC.to_vec();
        v4.extend([4, 0, 0, 0]);
        assert!(
            preamble(&v4, 1000)
                .unwrap_err()
                .to_string()
                .contains("version 4.0")
        );
    }
}
