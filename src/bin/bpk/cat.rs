//! `bpk cat FILE NAME`: one tensor's dtype, shape and values, abridged as NumPy abridges them
//! (the first and last three along each dimension of a tensor of more than 1000 values),
//! reading only the values printed where the source reads ranges; `--full` prints them all,
//! `--rows A..B` a range of the first dimension, `--npy OUT` writes the tensor as a `.npy`.

use std::io::Write;
use std::ops::Range;
use std::path::Path;

use burn::tensor::{BoolStore, Bytes, DType, bf16, f16};
use burnpack::format::TensorInfo;
use burnpack::source::{ReadError, TensorSource, TensorSourceExt, human_bytes};

use crate::Failure;
use crate::print::{clean, dtype_name, name};

/// NumPy's `threshold`: more values than this are abridged.
const THRESHOLD: usize = 1000;
/// NumPy's `edgeitems`: values kept at each end of an abridged dimension.
const EDGE: usize = 3;
/// Neighbouring ranges closer than this many bytes are read as one.
const GAP: u64 = 64 << 10;

/// What `bpk cat` was asked.
struct Ask<'a> {
    name: &'a str,
    full: bool,
    rows: Option<Range<usize>>,
    npy: Option<&'a Path>,
}

/// `A..B` as a range of rows (`A..` and `..B` too, bounded by the tensor later).
pub(crate) fn parse_rows(text: &str) -> Result<(Option<usize>, Option<usize>), String> {
    let (a, b) = text
        .split_once("..")
        .ok_or_else(|| format!("'{text}' is not a range of rows (A..B)"))?;
    let number = |s: &str| -> Result<Option<usize>, String> {
        if s.is_empty() {
            Ok(None)
        } else {
            s.parse()
                .map(Some)
                .map_err(|_| format!("'{text}' is not a range of rows (A..B)"))
        }
    };
    Ok((number(a)?, number(b)?))
}

pub(crate) fn cat(
    path: &Path,
    name_asked: &str,
    full: bool,
    rows: Option<(Option<usize>, Option<usize>)>,
    npy: Option<&Path>,
) -> Result<u8, Failure> {
    // The header and the table only: the values are read below, those printed.
    let source = burnpack::interop::open_any_with(
        path,
        &crate::open::OPTIONS.get().cloned().unwrap_or_default(),
    )
    .map_err(|e| crate::open::failure(&e))?;
    if let Some(out) = npy {
        crate::convert::refuse_onto_input(&*source, path, out, false)?;
    }
    let source = source.as_tensor_source();
    let info = match source.find_tensor(name_asked) {
        Ok(info) => info,
        Err(e @ ReadError::NotFound { .. }) => {
            return Err(Failure::usage(format!(
                "{e} (`bpk inspect {}` lists its tensors)",
                path.display()
            )));
        }
        Err(e) => return Err(Failure::of(&e)),
    };
    let rows = match rows {
        None => None,
        Some((a, b)) => {
            let Some(&first) = info.shape().first() else {
                return Err(Failure::usage(format!(
                    "{}: tensor '{}' is a scalar: it has no rows",
                    path.display(),
                    name_asked
                )));
            };
            let (a, b) = (a.unwrap_or(0), b.unwrap_or(first));
            if a > b {
                return Err(Failure::usage(format!(
                    "{}: tensor '{}': --rows {a}..{b} is reversed (the start is after the end)",
                    path.display(),
                    name_asked
                )));
            }
            if b > first {
                return Err(Failure::usage(format!(
                    "{}: tensor '{}' has {first} rows: --rows {a}..{b} is outside them",
                    path.display(),
                    name_asked
                )));
            }
            Some(a..b)
        }
    };
    let ask = Ask {
        name: name_asked,
        full,
        rows,
        npy,
    };
    match ask.npy {
        Some(out) => to_npy(path, source, &ask, out),
        None => show(source, info, &ask),
    }
}

fn to_npy(path: &Path, source: &dyn TensorSource, ask: &Ask, out: &Path) -> Result<u8, Failure> {
    let size =
        burnpack::interop::write_npy(out, source, ask.name, ask.rows.clone()).map_err(|e| {
            Failure {
                code: if e.is_usage() {
                    2
                } else if e.is_damaged() {
                    1
                } else {
                    3
                },
                message: e.to_string(),
            }
        })?;
    println!(
        "{} '{}' -> {} ({})",
        path.display(),
        name(ask.name),
        out.display(),
        human_bytes(size)
    );
    Ok(0)
}

/// Prints the header line and the values.
fn show(source: &dyn TensorSource, info: &TensorInfo, ask: &Ask) -> Result<u8, Failure> {
    let mut shape = info.shape().to_vec();
    let first = if let Some(rows) = &ask.rows {
        shape[0] = rows.len();
        rows.start
    } else {
        0
    };
    let count: usize = shape.iter().product();
    let abridged = !ask.full && count > THRESHOLD;
    let kept: Vec<Vec<Range<usize>>> = shape
        .iter()
        .map(|&n| {
            if abridged && n > 2 * EDGE {
                vec![0..EDGE, n - EDGE..n]
            } else {
                vec![0..n]
            }
        })
        .collect();
    let quantized = matches!(info.dtype(), DType::QFloat(_));
    let mut head = format!(
        "{}: {} {:?}",
        name(ask.name),
        dtype_name(info.dtype()),
        info.shape()
    );
    if let Some(rows) = &ask.rows {
        head += &format!(", rows {}..{} {:?}", rows.start, rows.end, shape);
    }
    if quantized {
        head += " (quantized: values dequantized for printing)";
    }
    if abridged {
        head += &format!(" ({count} values, abridged; --full prints all)");
    }
    let values = if quantized {
        Values::dequantized(source, info)?
    } else {
        // The element ranges printed, of the whole tensor, in order.
        let row: usize = shape.iter().skip(1).product();
        let base = first * row;
        let mut runs = Vec::new();
        element_runs(&shape, &kept, 0, base, &mut runs);
        Values::read(source, info, &runs, ask.rows.is_none() && !abridged)?
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = (|| {
        writeln!(out, "{}", clean(&head))?;
        let row: usize = shape.iter().skip(1).product();
        let strings = Strings::new(&values, info.dtype());
        let width = strings.width;
        print_dim(
            &mut out,
            &Printer {
                shape: &shape,
                kept: &kept,
                strings: &strings,
                width,
            },
            0,
            first * row,
        )?;
        writeln!(out)?;
        out.flush()
    })();
    written.map_err(|e| Failure::file(format!("standard output: cannot write: {e}")))?;
    Ok(0)
}

/// Pushes the element ranges (of the whole tensor) printed along dimension `dim` onward, at
/// element offset `at`.
fn element_runs(
    shape: &[usize],
    kept: &[Vec<Range<usize>>],
    dim: usize,
    at: usize,
    runs: &mut Vec<Range<usize>>,
) {
    if shape.is_empty() {
        runs.push(at..at + 1);
        return;
    }
    let stride: usize = shape[dim + 1..].iter().product();
    for range in &kept[dim] {
        if dim + 1 == shape.len() {
            runs.push(at + range.start..at + range.end);
        } else {
            for i in range.clone() {
                element_runs(shape, kept, dim + 1, at + i * stride, runs);
            }
        }
    }
}

/// The values read: runs of elements (whole-tensor offsets), each as its bytes.
struct Values {
    /// `(first element, bytes)`, sorted: the source's own bytes (a window of a mapping stays
    /// one), never copied here.
    runs: Vec<(usize, Bytes)>,
    /// The width of an element in the bytes (4 for dequantized values, as `f32`).
    size: usize,
    /// Dequantized values are `f32`s whatever the tensor's dtype.
    dequantized: bool,
}

impl Values {
    /// Reads `runs` (elements of `info`), neighbouring ones together; `whole` reads the
    /// tensor with [`TensorSource::read`] and checks it against its checksum.
    fn read(
        source: &dyn TensorSource,
        info: &TensorInfo,
        runs: &[Range<usize>],
        whole: bool,
    ) -> Result<Self, Failure> {
        let size = info.dtype().size();
        if whole {
            let bytes = source.read(info).map_err(|e| Failure::of(&e))?;
            source.check(info, &bytes).map_err(|e| Failure::of(&e))?;
            return Ok(Self {
                runs: vec![(0, bytes)],
                size,
                dequantized: false,
            });
        }
        let mut merged: Vec<Range<usize>> = Vec::new();
        for run in runs.iter().filter(|r| !r.is_empty()) {
            match merged.last_mut() {
                Some(last) if ((run.start - last.end) * size) as u64 <= GAP => last.end = run.end,
                _ => merged.push(run.clone()),
            }
        }
        let mut out = Vec::with_capacity(merged.len());
        for run in merged {
            let bytes = source
                .read_range(info, (run.start * size) as u64..(run.end * size) as u64)
                .map_err(|e| Failure::of(&e))?;
            out.push((run.start, bytes));
        }
        Ok(Self {
            runs: out,
            size,
            dequantized: false,
        })
    }

    /// The whole quantized tensor, dequantized on the host.
    fn dequantized(source: &dyn TensorSource, info: &TensorInfo) -> Result<Self, Failure> {
        let bytes = source.read(info).map_err(|e| Failure::of(&e))?;
        source.check(info, &bytes).map_err(|e| Failure::of(&e))?;
        let mut values = Vec::new();
        let decoded = crate::scan::for_each_f64(info, &bytes, |v| {
            values.extend_from_slice(&(v as f32).to_le_bytes());
        });
        if !decoded {
            return Err(Failure::file(format!(
                "{}: tensor '{}': quantized as {:?}, a scheme bpk does not dequantize for \
                 printing (`--npy` neither: convert it to a pack without --keep-quantized)",
                source.file(),
                info.name(),
                info.dtype()
            )));
        }
        Ok(Self {
            runs: vec![(0, Bytes::from_bytes_vec(values))],
            size: 4,
            dequantized: true,
        })
    }

    /// The bytes of element `i`.
    fn get(&self, i: usize) -> &[u8] {
        let at = self.runs.partition_point(|(start, _)| *start <= i) - 1;
        let (start, bytes) = &self.runs[at];
        let from = (i - start) * self.size;
        &bytes[from..from + self.size]
    }
}

/// Elements as text.
struct Strings<'a> {
    values: &'a Values,
    dtype: DType,
    /// The widest element printed, for the columns.
    width: usize,
}

impl<'a> Strings<'a> {
    fn new(values: &'a Values, dtype: DType) -> Self {
        let mut strings = Self {
            values,
            dtype,
            width: 0,
        };
        let mut width = 0;
        for (start, bytes) in &values.runs {
            for i in 0..bytes.len() / values.size {
                width = width.max(strings.text(start + i).len());
            }
        }
        strings.width = width;
        strings
    }

    fn text(&self, i: usize) -> String {
        let b = self.values.get(i);
        if self.values.dequantized {
            return format!("{:?}", f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        }
        let n = |n: usize| -> [u8; 8] {
            let mut out = [0; 8];
            out[..n].copy_from_slice(&b[..n]);
            out
        };
        match self.dtype {
            DType::F64 => format!("{:?}", f64::from_le_bytes(n(8))),
            DType::F32 | DType::Flex32 => {
                format!("{:?}", f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            DType::F16 => format!("{:?}", f16::from_le_bytes([b[0], b[1]]).to_f32()),
            DType::BF16 => format!("{:?}", bf16::from_le_bytes([b[0], b[1]]).to_f32()),
            DType::I64 => i64::from_le_bytes(n(8)).to_string(),
            DType::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]).to_string(),
            DType::I16 => i16::from_le_bytes([b[0], b[1]]).to_string(),
            DType::I8 => (b[0] as i8).to_string(),
            DType::U64 => u64::from_le_bytes(n(8)).to_string(),
            DType::U32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]).to_string(),
            DType::U16 => u16::from_le_bytes([b[0], b[1]]).to_string(),
            DType::U8 => b[0].to_string(),
            DType::Bool(BoolStore::Native | BoolStore::U8) => (b[0] != 0).to_string(),
            DType::Bool(BoolStore::U32) => {
                (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) != 0).to_string()
            }
            DType::QFloat(_) => "?".to_string(),
        }
    }
}

struct Printer<'a> {
    shape: &'a [usize],
    kept: &'a [Vec<Range<usize>>],
    strings: &'a Strings<'a>,
    width: usize,
}

/// Prints dimension `dim` at element offset `at`, NumPy's way: `[a, b, ..., z]`, nested
/// dimensions one per line under their bracket, blank lines between blocks of rank 3 or more.
fn print_dim(out: &mut impl Write, p: &Printer, dim: usize, at: usize) -> std::io::Result<()> {
    let rank = p.shape.len();
    if rank == 0 {
        return write!(out, "{}", p.strings.text(at));
    }
    let stride: usize = p.shape[dim + 1..].iter().product();
    write!(out, "[")?;
    let mut first = true;
    for (k, range) in p.kept[dim].iter().enumerate() {
        if k > 0 {
            // The values left out between the two ends.
            if dim + 1 == rank {
                write!(out, ", ...")?;
            } else {
                write!(
                    out,
                    ",{}{:indent$}...",
                    "\n".repeat(rank - dim - 1),
                    "",
                    indent = dim + 1
                )?;
            }
        }
        for i in range.clone() {
            if !first || k > 0 {
                if dim + 1 == rank {
                    write!(out, ", ")?;
                } else {
                    write!(
                        out,
                        ",{}{:indent$}",
                        "\n".repeat(rank - dim - 1),
                        "",
                        indent = dim + 1
                    )?;
                }
            }
            first = false;
            if dim + 1 == rank {
                write!(out, "{:>w$}", p.strings.text(at + i), w = p.width)?;
            } else {
                print_dim(out, p, dim + 1, at + i * stride)?;
            }
        }
    }
    write!(out, "]")
}
