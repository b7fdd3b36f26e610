//! The names a checkpoint storage holds (`ckpt-00000000000000000007.bpk` for step 7,
//! `data-<step>-<nonce>.bpk`), and what an incremental checkpoint says of its tensors: for
//! each, the data file that holds its bytes, its name there, its parameter id, its 128-bit
//! content hash and the data file's checksum. Pure text, no I/O: the manifest's
//! `burnpack.refs` metadata value, one line a tensor.

use super::fields::{decimal, for_each_tab, hex, short};
use std::fmt::Write as _;

/// Metadata key of an incremental checkpoint's references (one line per tensor).
pub const REFS_KEY: &str = "burnpack.refs";
pub use crate::format::INCREMENTAL_KEY;
/// Metadata value of [`super::KIND_KEY`] in a data file of incremental checkpoints.
pub const DATA_KIND: &str = "checkpoint-data";

const CHECKPOINT_PREFIX: &str = "ckpt-";
const CHECKPOINT_SUFFIX: &str = ".bpk";
const DATA_PREFIX: &str = "data-";
const DATA_SUFFIX: &str = ".bpk";

/// The content hash of a tensor's bytes: XXH3-128. Together with the dtype and the shape, it
/// is what makes two tensors the same for an incremental checkpoint (128 bits: a collision
/// between two tensors of a run is not a practical event, unlike with 64).
///
/// ```
/// let a = burnpack::checkpoint::content_hash(&[1, 2, 3]);
/// assert_ne!(a, burnpack::checkpoint::content_hash(&[1, 2, 4]));
/// ```
#[must_use]
pub fn content_hash(bytes: &[u8]) -> u128 {
    twox_hash::XxHash3_128::oneshot(bytes)
}

/// One tensor of an incremental checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ref {
    /// The tensor's name in the checkpoint (`model.<path>`, `optim.<id>.<field>`).
    pub(crate) name: String,
    /// The data file (a name in the same storage) that holds its bytes.
    pub(crate) file: String,
    /// Its name in that data file.
    pub(crate) stored_as: String,
    /// Its parameter id in the checkpoint.
    pub(crate) param_id: Option<u64>,
    /// Its dtype, as [`dtype_text`] writes it (what a save compares; a load takes the data
    /// file's descriptor and checks that it says the same).
    pub(crate) dtype: String,
    /// Its shape.
    pub(crate) shape: Vec<usize>,
    /// XXH3-128 of its bytes.
    pub(crate) hash: u128,
    /// The data file's own checksum of the tensor (its descriptor's XXH3-64), when the data
    /// file has checksums: compared with the descriptor when the checkpoint is opened, so that
    /// a data file swapped for another of the same name (another run's) is refused without
    /// reading a byte of it. `None` in manifests written before it was recorded.
    pub(crate) checksum: Option<u64>,
    /// Where the data file holds it, when recorded (with the checksum): what lets an open
    /// build the data file's table from the manifest instead of decoding the data file's
    /// header.
    pub(crate) at: Option<Where>,
}

/// Where a data file holds a tensor: its offset in the file, and the data file's header and
/// metadata checksum (the last value of its `checksums`), which vouches for every descriptor
/// of the file, this tensor's included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Where {
    pub(crate) offset: u64,
    pub(crate) head: u64,
}

/// The object or file name of the checkpoint of `step` (zero-padded, so names sort by step).
pub(crate) fn checkpoint_name(step: u64) -> String {
    format!("{CHECKPOINT_PREFIX}{step:020}{CHECKPOINT_SUFFIX}")
}

/// The step of a checkpoint name, `None` for other names.
pub(crate) fn step_of(name: &str) -> Option<u64> {
    name.strip_prefix(CHECKPOINT_PREFIX)?
        .strip_suffix(CHECKPOINT_SUFFIX)?
        .parse()
        .ok()
}

/// The name of a data file written by the save of `step`; `nonce` makes it unique (a step
/// saved twice never overwrites a file an older manifest may still name).
pub(crate) fn data_name(step: u64, nonce: u64) -> String {
    format!("{DATA_PREFIX}{step:020}-{nonce:016x}{DATA_SUFFIX}")
}

/// The step of a data file's name; `None` for any other name (which is never opened as one,
/// so a manifest cannot name a path outside its storage).
pub(crate) fn data_step(name: &str) -> Option<u64> {
    let rest = name.strip_prefix(DATA_PREFIX)?.strip_suffix(DATA_SUFFIX)?;
    let (step, nonce) = rest.split_once('-')?;
    let digits = |s: &str, n: usize, hex: bool| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || hex && matches!(b, b'a'..=b'f'))
    };
    (digits(step, 20, false) && digits(nonce, 16, true))
        .then(|| step.parse().ok())
        .flatten()
}

/// A dtype as a reference line records it: its `Debug` text (`F32`, `QFloat(QuantScheme {
/// ... })`). Compared as text only: a text this build would not write never matches, so a
/// tensor is then written again rather than misread.
pub(crate) fn dtype_text(dtype: burn::tensor::DType) -> String {
    format!("{dtype:?}")
}

/// Whether `text` is [`dtype_text`] of `dtype`, compared as it is written (no text made).
pub(crate) fn dtype_is(dtype: burn::tensor::DType, text: &str) -> bool {
    /// What is left of the text to match, or `None` once something differed.
    struct Rest<'a>(Option<&'a str>);
    impl std::fmt::Write for Rest<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0 = self.0.and_then(|rest| rest.strip_prefix(s));
            Ok(())
        }
    }
    let mut rest = Rest(Some(text));
    let _ = write!(rest, "{dtype:?}");
    rest.0 == Some("")
}

/// Whether `name` can be written in a line of references (no tab, no line break).
pub(crate) fn nameable(name: &str) -> bool {
    !name.contains(['\t', '\n', '\r'])
}

/// The references as the manifest stores them, one line each, tab separated: `name`, `file`,
/// the name in the file (empty when it is `name`), the parameter id (empty if none), the
/// dtype, the shape (dimensions separated by commas), the hash in 32 hex digits, and the data
/// file's checksum of the tensor in 16 hex digits (empty when the data file has none); then,
/// where recorded, the tensor's offset in the data file (decimal) and the data file's header
/// checksum (16 hex digits).
pub(crate) fn encode(refs: &[Ref]) -> String {
    let mut out = String::with_capacity(refs.len() * 112);
    for r in refs {
        let stored = if r.stored_as == r.name {
            ""
        } else {
            &r.stored_as
        };
        let id = r.param_id.map(|id| id.to_string()).unwrap_or_default();
        let shape: Vec<String> = r.shape.iter().map(ToString::to_string).collect();
        let checksum = r.checksum.map(|c| format!("{c:016x}")).unwrap_or_default();
        let at = match (r.checksum, r.at) {
            (Some(_), Some(Where { offset, head })) => format!("\t{offset}\t{head:016x}"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "{}\t{}\t{stored}\t{id}\t{}\t{}\t{:032x}\t{checksum}{at}",
            r.name,
            r.file,
            r.dtype,
            shape.join(","),
            r.hash
        );
    }
    out
}

/// Parses [`encode`]'s text (and the 7-field lines of manifests written before the data
/// file's checksum was recorded) into owned references; the error says which line is wrong
/// and how. (Opening a checkpoint reads the same text through [`Table`], which copies none
/// of it.)
pub(crate) fn parse(text: &str) -> Result<Vec<Ref>, String> {
    let table = Table::parse(text)?;
    Ok((0..table.len())
        .map(|i| {
            let row = &table.rows[i];
            Ref {
                name: table.name(i).to_string(),
                file: table.file(i).to_string(),
                stored_as: table.stored_as(i).to_string(),
                param_id: row.param_id,
                dtype: table.dtype(i).to_string(),
                shape: table.shape(i).to_vec(),
                hash: row.hash,
                checksum: row.checksum,
                at: row.at,
            }
        })
        .collect())
}

/// A row's name and its name in its data file, as ranges of [`Table::names`]' buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NameRanges {
    pub(crate) name: (usize, usize),
    pub(crate) stored_as: (usize, usize),
}

/// A manifest's references parsed once into a compact table: each text field a range of the
/// manifest's own text (nothing copied, no string per tensor), the data files named once each,
/// every shape in one shared list of dimensions.
#[derive(Debug)]
pub(crate) struct Table<'a> {
    /// The text the ranges index.
    text: &'a str,
    /// One row a reference line, in the text's order until [`sort_by_name`](Self::sort_by_name).
    rows: Vec<Row>,
    /// The data files named, each once, in the order first named.
    files: Vec<&'a str>,
    /// Every row's dimensions, one after another.
    dims: Vec<usize>,
}

/// One reference line of a [`Table`].
#[derive(Debug, Clone, Copy)]
struct Row {
    /// The checkpoint's name of the tensor: a range of the text.
    name: (usize, usize),
    /// The name in the data file (the same range as `name` when the line leaves it empty).
    stored_as: (usize, usize),
    /// The dtype's text.
    dtype: (usize, usize),
    /// Index into [`Table::files`].
    file: usize,
    /// Range of [`Table::dims`].
    shape: (usize, usize),
    param_id: Option<u64>,
    hash: u128,
    checksum: Option<u64>,
    at: Option<Where>,
}

impl<'a> Table<'a> {
    /// Parses the references of [`encode`]'s layout (8 fields a line, or 7 in manifests
    /// written before the data file's checksum was recorded); the error says which line is
    /// wrong and how.
    pub(crate) fn parse(text: &'a str) -> Result<Self, String> {
        // The data files named so far, and the last one (most lines name the file the line
        // before did).
        let mut by_name: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        let mut last: Option<usize> = None;
        // One row a line: as many as the text (already in memory) has line breaks.
        let lines = memchr::memchr_iter(b'\n', text.as_bytes()).count() + 1;
        let mut table = Self {
            text,
            rows: Vec::with_capacity(lines),
            files: Vec::new(),
            // Two dimensions a tensor, most often.
            dims: Vec::with_capacity(2 * lines),
        };
        let base = text.as_ptr() as usize;
        let range = |field: &str| {
            let start = field.as_ptr() as usize - base;
            (start, start + field.len())
        };
        // Lines as `str::lines` splits them (a final line break ends the last line; a `\r`
        // before a line break is not part of the line), found with SIMD.
        let mut rest = text;
        let mut i = 0;
        while !rest.is_empty() {
            let (line, next) = match memchr::memchr(b'\n', rest.as_bytes()) {
                Some(at) => (&rest[..at], &rest[at + 1..]),
                None => (rest, ""),
            };
            rest = next;
            let line = line.strip_suffix('\r').unwrap_or(line);
            i += 1;
            let bad = |what: &str| format!("reference line {i}: {what}");
            let mut fields = [""; 10];
            let mut count = 0;
            for_each_tab(line.as_bytes(), |tab| {
                fields[count] = &line[..tab];
                count += 1;
                count < fields.len()
            });
            // The fields' ends are found; each starts after the one before.
            let mut start = 0;
            for field in &mut fields[..count] {
                let end = field.len();
                *field = &line[start..end];
                start = end + 1;
            }
            if count == fields.len() {
                // A tenth tab: an eleventh field at least.
                count = fields.len() + 1;
            } else {
                fields[count] = &line[start..];
                count += 1;
            }
            if !matches!(count, 7 | 8 | 10) {
                let more = if count > 10 { " or more" } else { "" };
                let shown = count.min(11);
                return Err(bad(&format!(
                    "{shown}{more} fields, 10 expected (7 or 8 in manifests of earlier layouts)"
                )));
            }
            let [
                name,
                file,
                stored,
                id,
                dtype,
                shape,
                hash,
                checksum,
                offset,
                head,
            ] = fields;
            if name.is_empty() {
                return Err(bad("empty tensor name"));
            }
            // A data file is checked where first named (most lines name the one the line
            // before did).
            let known = match last {
                Some(at) if table.files[at] == file => Some(at),
                _ => by_name.get(file).copied(),
            };
            let file = match known {
                Some(at) => at,
                None if data_step(file).is_none() => {
                    return Err(bad(&format!("'{file}' is not the name of a data file")));
                }
                None => {
                    table.files.push(file);
                    by_name.insert(file, table.files.len() - 1);
                    table.files.len() - 1
                }
            };
            last = Some(file);
            let param_id = match id {
                "" => None,
                id => Some(decimal(id).ok_or_else(|| {
                    bad(&format!(
                        "parameter id '{}' is not a number of 64 bits in decimal digits",
                        short(id)
                    ))
                })?),
            };
            if dtype.is_empty() {
                return Err(bad("empty dtype"));
            }
            let first_dim = table.dims.len();
            if !shape.is_empty() {
                for dim in shape.split(',') {
                    // Digits as the writer writes them, or whatever else `usize` parses.
                    let dim = decimal(dim)
                        .and_then(|d| usize::try_from(d).ok())
                        .or_else(|| dim.parse::<usize>().ok())
                        .ok_or_else(|| bad(&format!("shape '{shape}'")))?;
                    table.dims.push(dim);
                }
            }
            let Some(hash) = hex(hash, 32) else {
                return Err(bad(&format!("hash '{hash}' is not 32 hex digits")));
            };
            let checksum = match (checksum, hex(checksum, 16)) {
                ("", _) => None,
                // 16 hex digits always fit.
                (_, Some(c)) => Some(u64::try_from(c).map_err(|_| bad("checksum"))?),
                (c, None) => {
                    return Err(bad(&format!(
                        "data file checksum '{}' is not 16 hex digits",
                        c.chars().take(40).collect::<String>()
                    )));
                }
            };
            let at = if count == 10 {
                if checksum.is_none() {
                    return Err(bad(
                        "an offset without the data file's checksum of the tensor",
                    ));
                }
                let offset = decimal(offset)
                    .ok_or_else(|| bad(&format!("offset '{}' is not a number", short(offset))))?;
                let head = hex(head, 16)
                    .and_then(|h| u64::try_from(h).ok())
                    .ok_or_else(|| {
                        bad(&format!(
                            "data file header checksum '{}' is not 16 hex digits",
                            short(head)
                        ))
                    })?;
                Some(Where { offset, head })
            } else {
                None
            };
            let name = range(name);
            table.rows.push(Row {
                name,
                stored_as: if stored.is_empty() {
                    name
                } else {
                    range(stored)
                },
                dtype: range(dtype),
                file,
                shape: (first_dim, table.dims.len()),
                param_id,
                hash,
                checksum,
                at,
            });
        }
        Ok(table)
    }

    /// The number of references.
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    fn at(&self, (start, end): (usize, usize)) -> &'a str {
        // Ranges of fields split at ASCII tabs and line breaks: always in the text, on
        // character boundaries; `get` keeps a mistake from panicking.
        self.text.get(start..end).unwrap_or_default()
    }

    /// Row `i`'s tensor name.
    pub(crate) fn name(&self, i: usize) -> &'a str {
        self.at(self.rows[i].name)
    }

    /// The name of the data file of row `i`.
    pub(crate) fn file(&self, i: usize) -> &'a str {
        self.files[self.rows[i].file]
    }

    /// The index of row `i`'s data file in [`files`](Self::files).
    pub(crate) fn file_index(&self, i: usize) -> usize {
        self.rows[i].file
    }

    /// The data files named, each once.
    pub(crate) fn files(&self) -> &[&'a str] {
        &self.files
    }

    /// Row `i`'s name in its data file.
    pub(crate) fn stored_as(&self, i: usize) -> &'a str {
        self.at(self.rows[i].stored_as)
    }

    /// Row `i`'s dtype text.
    pub(crate) fn dtype(&self, i: usize) -> &'a str {
        self.at(self.rows[i].dtype)
    }

    /// Row `i`'s shape.
    pub(crate) fn shape(&self, i: usize) -> &[usize] {
        let (start, end) = self.rows[i].shape;
        &self.dims[start..end]
    }

    /// Row `i`'s parameter id.
    pub(crate) fn param_id(&self, i: usize) -> Option<u64> {
        self.rows[i].param_id
    }

    /// Row `i`'s content hash.
    pub(crate) fn hash(&self, i: usize) -> u128 {
        self.rows[i].hash
    }

    /// Where row `i`'s data file holds it, when recorded.
    pub(crate) fn located(&self, i: usize) -> Option<Where> {
        self.rows[i].at
    }

    /// Row `i`'s data file checksum, when recorded.
    pub(crate) fn checksum(&self, i: usize) -> Option<u64> {
        self.rows[i].checksum
    }

    /// The rows' names copied into one buffer of their own (the names are a fifth of the
    /// text: the checkpoint's table keeps these, not the text), with each row's name and its
    /// name in its data file as ranges of it (the same range where they are the same).
    pub(crate) fn names(&self) -> (std::sync::Arc<str>, Vec<NameRanges>) {
        let mut text = String::with_capacity(
            self.rows
                .iter()
                .map(|r| {
                    let stored = if r.stored_as == r.name {
                        0
                    } else {
                        r.stored_as.1 - r.stored_as.0
                    };
                    r.name.1 - r.name.0 + stored
                })
                .sum(),
        );
        let mut push = |range: (usize, usize)| {
            let start = text.len();
            text.push_str(self.at(range));
            (start, text.len())
        };
        let ranges = self
            .rows
            .iter()
            .map(|r| {
                let name = push(r.name);
                let stored_as = if r.stored_as == r.name {
                    name
                } else {
                    push(r.stored_as)
                };
                NameRanges { name, stored_as }
            })
            .collect();
        (std::sync::Arc::from(text), ranges)
    }

    /// Sorts the rows by tensor name; the first name listed twice, if any.
    pub(crate) fn sort_by_name(&mut self) -> Option<&'a str> {
        let text = self.text;
        let name = |r: &Row| text.get(r.name.0..r.name.1).unwrap_or_default();
        // Manifests are written sorted: strictly increasing names (sorted, none twice) are
        // one pass, and nothing to sort.
        if self.rows.windows(2).all(|w| name(&w[0]) < name(&w[1])) {
            return None;
        }
        self.rows.sort_unstable_by(|a, b| name(a).cmp(name(b)));
        self.rows
            .windows(2)
            .find(|w| name(&w[0]) == name(&w[1]))
            .map(|w| name(&w[0]))
    }
}

#[cfg(test)]
#[path = "refs_tests.rs"]
mod tests;
