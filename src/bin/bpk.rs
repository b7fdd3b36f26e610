//! `bpk`: inspect, verify, diff and convert burnpack files.
//!
//! Every command also takes `s3://bucket/key` URLs where it takes a file, when built with the
//! `object-store` feature (configured from the `AWS_*` environment variables).
//!
//! Exit codes: 0 success; 1 verification failed or the files differ; 2 usage error;
//! 3 a file is unreadable or not a valid pack.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use burn::tensor::{BoolStore, DType, bf16, f16};
use burnpack::format::{FormatError, Layout, TensorInfo};
use burnpack::interop::safetensors::SafetensorsSource;
use burnpack::read::{ReadError, Reader, TensorSource};
use clap::{Parser, Subcommand, ValueEnum};
use rayon::prelude::*;
use regex::Regex;
use serde_json::{Value, json};

#[derive(Parser)]
#[command(
    name = "bpk",
    version,
    about = "Inspect, verify, diff and convert burnpack (.bpk) files and safetensors weights"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show a file's header, totals, metadata, scalars and tensors (reads only the metadata;
    /// for a URL, says how many bytes that took).
    #[command(
        after_help = "Examples:\n  bpk inspect model.bpk --filter '^encoder\\.'\n  bpk inspect s3://models/run-7/model.bpk"
    )]
    Inspect {
        /// The burnpack file (or its s3:// URL), or safetensors weights (a .safetensors file or
        /// an index .json).
        file: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Only list tensors whose name matches this regex.
        #[arg(long, value_name = "REGEX")]
        filter: Option<String>,
    },
    /// Check a file's structure and read every tensor; exit 0 only when sound.
    /// A URL is read whole into memory (one request after its header and metadata).
    #[command(
        after_help = "Examples:\n  bpk verify model.bpk --nan\n  bpk verify s3://models/run-7/model.bpk"
    )]
    Verify {
        /// The burnpack file (or its s3:// URL), or safetensors weights (a .safetensors file or
        /// an index .json).
        file: PathBuf,
        /// Also scan float tensors for NaN and infinite values.
        #[arg(long)]
        nan: bool,
    },
    /// Compare two files: tensors only in one, different dtype or shape, value differences,
    /// metadata and scalars. Exit 0 when identical, 1 when they differ.
    #[command(after_help = "Example:\n  bpk diff before.bpk after.bpk --json")]
    Diff {
        /// The first file (burnpack or its s3:// URL, or safetensors weights).
        a: PathBuf,
        /// The second file (burnpack or its s3:// URL, or safetensors weights).
        b: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Convert between burnpack and safetensors (format chosen by the output's extension,
    /// or --to); a pack also copies to or from object storage (s3:// URLs).
    #[command(
        after_help = "Examples:\n  bpk convert model.safetensors model.bpk\n  bpk convert model.safetensors.index.json model.bpk\n  bpk convert model.bpk model.safetensors --shard-size 5000000000\n  bpk convert model.safetensors s3://models/run-7/model.bpk\n  bpk convert s3://models/run-7/model.bpk model.safetensors"
    )]
    Convert {
        /// The source file (burnpack or safetensors, recognised by its content), or a pack's
        /// s3:// URL.
        input: PathBuf,
        /// The destination file, or an s3:// URL for a pack.
        output: PathBuf,
        /// The destination format (default: from the output's extension).
        #[arg(long, value_enum)]
        to: Option<Format>,
        /// To safetensors: split into shards of at most this many bytes, with the index JSON
        /// (`<output>.index.json`).
        #[arg(long, value_name = "BYTES")]
        shard_size: Option<u64>,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Burnpack,
    Safetensors,
}

/// A failure, with the exit code it maps to.
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn file(message: impl std::fmt::Display) -> Self {
        Self {
            code: 3,
            message: message.to_string(),
        }
    }
    fn usage(message: impl std::fmt::Display) -> Self {
        Self {
            code: 2,
            message: message.to_string(),
        }
    }
}

fn main() -> ExitCode {
    // Like other Unix filters, stop quietly when the reader of our output goes away
    // (`bpk inspect big.bpk | head`) instead of failing to print.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect { file, json, filter } => inspect(&file, json, filter.as_deref()),
        Command::Verify { file, nan } => verify(&file, nan),
        Command::Diff { a, b, json } => diff(&a, &b, json),
        Command::Convert {
            input,
            output,
            to,
            shard_size,
        } => convert(&input, &output, to, shard_size),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("bpk: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

/// Whether `path` names safetensors weights (a `.safetensors` file or an index `.json`).
fn is_safetensors(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e == "safetensors" || e == "json")
}

/// Whether `arg` names an object on object storage (`s3://bucket/key`) rather than a file.
fn is_url(arg: &Path) -> bool {
    arg.to_str()
        .is_some_and(|s| s.starts_with("s3://") || s.starts_with("s3a://"))
}

/// Packs on object storage (feature `object-store`).
#[cfg(feature = "object-store")]
mod remote {
    use std::path::Path;

    use burn::tensor::Bytes;
    use burnpack::interop::object_store::{ObjectLocation, ObjectSource, RemoteError};
    use burnpack::read::{ReadError, Reader};

    use super::Failure;

    /// The object a URL argument names.
    pub fn location(arg: &Path) -> Result<ObjectLocation, Failure> {
        ObjectLocation::parse(&arg.to_string_lossy()).map_err(Failure::usage)
    }

    /// The pack at a URL: header and metadata read and validated (two ranged requests).
    pub fn open(arg: &Path) -> Result<ObjectSource, Failure> {
        ObjectSource::open(&location(arg)?).map_err(Failure::file)
    }

    /// The whole pack at a URL in memory, named by its URL (for `verify`, which reads every
    /// byte): header and metadata first, so an object that is not a pack within the limits is
    /// refused before its data is fetched; then one GET. An invalid pack is the inner error.
    pub fn download(arg: &Path) -> Result<Result<Reader, ReadError>, Failure> {
        let location = location(arg)?;
        let url = location.to_string();
        match ObjectSource::open(&location) {
            Ok(_) => {}
            Err(RemoteError::Invalid { source, .. }) => {
                return Ok(Err(ReadError::Invalid {
                    file: url,
                    source: *source,
                }));
            }
            Err(e) => return Err(Failure::file(e)),
        }
        let bytes = location.read_all().map_err(Failure::file)?;
        Ok(Reader::from_bytes(Bytes::from_bytes_vec(bytes)).map(|r| r.with_name(url)))
    }
}

/// Without the `object-store` feature, a URL is a usage error saying how to get it.
#[cfg(not(feature = "object-store"))]
mod remote {
    use std::path::Path;

    use super::Failure;

    /// Never a source: the error says how to build `bpk` with object storage.
    pub enum Never {}

    impl burnpack::read::TensorSource for Never {
        fn file(&self) -> &str {
            match *self {}
        }
        fn tensors(&self) -> &[burnpack::format::TensorInfo] {
            match *self {}
        }
        fn read(
            &self,
            _: &burnpack::format::TensorInfo,
        ) -> Result<burn::tensor::Bytes, burnpack::read::ReadError> {
            match *self {}
        }
    }

    impl burnpack::read::PackSource for Never {
        fn layout(&self) -> &burnpack::format::Layout {
            match *self {}
        }
    }

    pub fn download(
        arg: &Path,
    ) -> Result<Result<burnpack::read::Reader, burnpack::read::ReadError>, Failure> {
        match open(arg)? {}
    }

    pub fn open(arg: &Path) -> Result<Never, Failure> {
        Err(Failure::usage(format!(
            "{}: this bpk was built without object storage; install it with \
             `--features cli,object-store`",
            arg.display()
        )))
    }
}

/// A burnpack file, safetensors weights (one file or an index and its shards), or a pack on
/// object storage.
enum Opened {
    Pack(Reader),
    Safetensors(SafetensorsSource),
    #[cfg(feature = "object-store")]
    Remote(burnpack::interop::object_store::ObjectSource),
}

impl Opened {
    fn open(path: &Path) -> Result<Self, Failure> {
        if is_url(path) {
            let source = remote::open(path)?;
            #[cfg(feature = "object-store")]
            {
                // Everything at once: coalesced parallel requests, checked as they arrive.
                let all: Vec<&TensorInfo> = source.tensors().iter().collect();
                source.prefetch(&all).map_err(Failure::file)?;
                return Ok(Opened::Remote(source));
            }
            #[cfg(not(feature = "object-store"))]
            match source {}
        }
        if is_safetensors(path) {
            SafetensorsSource::open(path)
                .map(Opened::Safetensors)
                .map_err(Failure::file)
        } else {
            Reader::open(path).map(Opened::Pack).map_err(Failure::file)
        }
    }

    fn source(&self) -> &(dyn TensorSource + Sync) {
        match self {
            Opened::Pack(r) => r,
            Opened::Safetensors(s) => s,
            #[cfg(feature = "object-store")]
            Opened::Remote(s) => s,
        }
    }

    /// The pack's layout (`None` for safetensors).
    fn layout(&self) -> Option<&Layout> {
        match self {
            Opened::Pack(r) => Some(r.layout()),
            Opened::Safetensors(_) => None,
            #[cfg(feature = "object-store")]
            Opened::Remote(s) => Some(s.layout()),
        }
    }

    fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        match self {
            Opened::Pack(r) => r.tensor(name),
            Opened::Safetensors(s) => s.tensor(name),
            #[cfg(feature = "object-store")]
            Opened::Remote(s) => s.layout().tensor(name),
        }
    }

    fn metadata(&self) -> &std::collections::BTreeMap<String, String> {
        match self {
            Opened::Pack(r) => r.metadata(),
            Opened::Safetensors(s) => s.metadata(),
            #[cfg(feature = "object-store")]
            Opened::Remote(s) => s.layout().metadata(),
        }
    }

    /// Scalars as text (safetensors has none).
    fn scalars(&self) -> Vec<(String, String)> {
        self.layout().map_or_else(Vec::new, |layout| {
            layout
                .scalars()
                .iter()
                .map(|(k, v)| (k.clone(), format!("{v:?}")))
                .collect()
        })
    }
}

fn open(path: &Path) -> Result<Reader, Failure> {
    Reader::open(path).map_err(Failure::file)
}

fn mib(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / 1048576.0)
    } else if bytes >= 1 << 10 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

fn dtype_name(dtype: DType) -> String {
    match dtype {
        DType::QFloat(_) => "qfloat".to_string(),
        other => other.name().to_string(),
    }
}

fn tensor_json(t: &TensorInfo) -> Value {
    json!({
        "name": t.name(),
        "dtype": dtype_name(t.dtype()),
        "shape": t.shape(),
        "bytes": t.len(),
        // A string: 64-bit ids do not survive JSON tools that read numbers as doubles (jq).
        "param_id": t.param_id().map(|id| id.to_string()),
        "offset": t.offset(),
    })
}

fn inspect(path: &Path, as_json: bool, filter: Option<&str>) -> Result<u8, Failure> {
    let filter = filter
        .map(|pattern| {
            Regex::new(pattern).map_err(|e| {
                // regex's own message spans several lines (the pattern, a caret, the error).
                let why = e
                    .to_string()
                    .lines()
                    .rev()
                    .find_map(|l| l.trim().strip_prefix("error: ").map(str::to_string))
                    .unwrap_or_else(|| e.to_string().replace('\n', " "));
                Failure::usage(format!("--filter '{pattern}' is not a valid regex: {why}"))
            })
        })
        .transpose()?;
    if is_safetensors(path) {
        return inspect_safetensors(path, as_json, filter.as_ref());
    }
    if is_url(path) {
        let source = remote::open(path)?;
        #[cfg(feature = "object-store")]
        {
            // What opening cost: header and metadata, never a tensor.
            let fetched = (source.fetched_bytes(), source.requests());
            return Ok(inspect_pack(
                path,
                source.layout(),
                as_json,
                filter.as_ref(),
                Some(fetched),
            ));
        }
        #[cfg(not(feature = "object-store"))]
        match source {}
    }
    let reader = open(path)?;
    Ok(inspect_pack(
        path,
        reader.layout(),
        as_json,
        filter.as_ref(),
        None,
    ))
}

/// Totals of a table of tensors, as `inspect` shows them.
struct Census {
    count: usize,
    elements: u64,
    data_bytes: u64,
    /// Bytes by dtype name.
    by_dtype: std::collections::BTreeMap<String, u64>,
}

impl Census {
    fn of(tensors: &[TensorInfo]) -> Self {
        let mut by_dtype = std::collections::BTreeMap::<String, u64>::new();
        for t in tensors {
            *by_dtype.entry(dtype_name(t.dtype())).or_default() += t.len();
        }
        Self {
            count: tensors.len(),
            elements: tensors.iter().map(|t| t.num_elements() as u64).sum(),
            data_bytes: tensors.iter().map(TensorInfo::len).sum(),
            by_dtype,
        }
    }

    /// `tensors: N (E elements, SIZE; dtype SIZE, ...)`.
    fn print(&self) {
        let dtypes: Vec<String> = self
            .by_dtype
            .iter()
            .map(|(d, b)| format!("{d} {}", mib(*b)))
            .collect();
        println!(
            "tensors: {} ({} elements, {}; {})",
            self.count,
            self.elements,
            mib(self.data_bytes),
            if dtypes.is_empty() {
                "none".into()
            } else {
                dtypes.join(", ")
            }
        );
    }
}

/// The metadata block of `inspect` (nothing when empty).
fn print_metadata(metadata: &std::collections::BTreeMap<String, String>) {
    if !metadata.is_empty() {
        println!("metadata:");
        for (k, v) in metadata {
            println!("  {k} = {v}");
        }
    }
}

/// The width of the name column for `shown`.
fn name_width(shown: &[&TensorInfo]) -> usize {
    shown
        .iter()
        .map(|t| t.name().len())
        .max()
        .unwrap_or(4)
        .max(4)
}

/// The last line of a filtered `inspect`.
fn filtered(filter: Option<&Regex>, shown: usize, total: usize) {
    if filter.is_some() {
        println!("({shown} of {total} tensors match the filter)");
    }
}

/// `inspect` for a pack: header, totals, metadata, scalars and the tensors matching
/// `filter`; for a pack on object storage, the bytes and requests that opening it took.
fn inspect_pack(
    path: &Path,
    layout: &Layout,
    as_json: bool,
    filter: Option<&Regex>,
    fetched: Option<(u64, u64)>,
) -> u8 {
    let shown: Vec<&TensorInfo> = layout
        .tensors_by_position()
        .filter(|t| filter.is_none_or(|re| re.is_match(t.name())))
        .collect();
    let census = Census::of(layout.tensors());
    if as_json {
        let out = json!({
            "file": path.display().to_string(),
            "version": layout.header().version,
            "file_size": layout.file_len(),
            "metadata_size": layout.header().metadata_size,
            "data_start": layout.data_start(),
            "tensor_count": census.count,
            "elements": census.elements,
            "data_bytes": census.data_bytes,
            "bytes_by_dtype": census.by_dtype,
            "metadata": layout.metadata(),
            "scalars": layout.scalars().iter().map(|(k, v)| (k.clone(), format!("{v:?}"))).collect::<std::collections::BTreeMap<_, _>>(),
            "tensors": shown.iter().map(|t| tensor_json(t)).collect::<Vec<_>>(),
            "fetched_bytes": fetched.map(|(bytes, _)| bytes),
            "requests": fetched.map(|(_, requests)| requests),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("JSON of plain values")
        );
        return 0;
    }
    println!(
        "{}: burnpack v{}, {} ({} bytes)",
        path.display(),
        layout.header().version,
        mib(layout.file_len()),
        layout.file_len()
    );
    println!(
        "metadata: {} bytes of CBOR, data section at byte {}",
        layout.header().metadata_size,
        layout.data_start()
    );
    if let Some((bytes, requests)) = fetched {
        println!(
            "fetched: {bytes} bytes in {requests} requests (header and metadata, no tensor data)"
        );
    }
    census.print();
    print_metadata(layout.metadata());
    if !layout.scalars().is_empty() {
        println!("scalars:");
        for (k, v) in layout.scalars() {
            println!("  {k} = {v:?}");
        }
    }
    let width = name_width(&shown);
    println!(
        "{:<width$}  {:>9}  {:>16}  {:>12}  {:>20}  {:>12}",
        "name", "dtype", "shape", "bytes", "param id", "offset"
    );
    for t in &shown {
        let id = t
            .param_id()
            .map_or_else(|| "-".to_string(), |id| id.to_string());
        println!(
            "{:<width$}  {:>9}  {:>16}  {:>12}  {:>20}  {:>12}",
            t.name(),
            dtype_name(t.dtype()),
            format!("{:?}", t.shape()),
            t.len(),
            id,
            t.offset()
        );
    }
    filtered(filter, shown.len(), census.count);
    0
}

/// `inspect` for safetensors weights: the shard table, totals, the dtype census, metadata and
/// the tensors (reads only the headers).
fn inspect_safetensors(path: &Path, as_json: bool, filter: Option<&Regex>) -> Result<u8, Failure> {
    let source = SafetensorsSource::open(path).map_err(Failure::file)?;
    let tensors = source.tensors();
    let census = Census::of(tensors);
    let mut by_shard = std::collections::BTreeMap::<&Path, (usize, u64)>::new();
    for t in tensors {
        let shard = by_shard.entry(source.shard_of(t)).or_default();
        shard.0 += 1;
        shard.1 += t.len();
    }
    let shown: Vec<&TensorInfo> = tensors
        .iter()
        .filter(|t| filter.is_none_or(|re| re.is_match(t.name())))
        .collect();
    let shard_name = |p: &Path| {
        p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    if as_json {
        let out = json!({
            "file": path.display().to_string(),
            "format": "safetensors",
            "shards": by_shard.iter().map(|(p, (n, b))| json!({"file": shard_name(p), "tensors": n, "bytes": b})).collect::<Vec<_>>(),
            "tensor_count": census.count,
            "elements": census.elements,
            "data_bytes": census.data_bytes,
            "bytes_by_dtype": census.by_dtype,
            "metadata": source.metadata(),
            "unaligned": source.unaligned().map(TensorInfo::name).collect::<Vec<_>>(),
            "tensors": shown.iter().map(|t| {
                let mut v = tensor_json(t);
                v["shard"] = json!(shard_name(source.shard_of(t)));
                v
            }).collect::<Vec<_>>(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("JSON of plain values")
        );
        return Ok(0);
    }
    println!(
        "{}: safetensors, {} shard{}, {} of tensor data",
        path.display(),
        by_shard.len(),
        if by_shard.len() == 1 { "" } else { "s" },
        mib(census.data_bytes)
    );
    if by_shard.len() > 1 {
        println!("shards:");
        for (p, (n, b)) in &by_shard {
            println!("  {}  {n} tensors, {}", shard_name(p), mib(*b));
        }
    }
    census.print();
    let unaligned = source.unaligned().count();
    if unaligned > 0 {
        println!("unaligned: {unaligned} tensors (copied when loaded)");
    }
    print_metadata(source.metadata());
    let width = name_width(&shown);
    println!(
        "{:<width$}  {:>9}  {:>16}  {:>12}  shard",
        "name", "dtype", "shape", "bytes"
    );
    for t in &shown {
        println!(
            "{:<width$}  {:>9}  {:>16}  {:>12}  {}",
            t.name(),
            dtype_name(t.dtype()),
            format!("{:?}", t.shape()),
            t.len(),
            shard_name(source.shard_of(t))
        );
    }
    filtered(filter, shown.len(), census.count);
    Ok(0)
}

/// `verify` for safetensors weights: every header validated by the `safetensors` crate (and an
/// index against its shards), every tensor read, optionally scanned for NaN / Inf. Safetensors
/// carries no checksums: the contents themselves are unverified.
fn verify_safetensors(path: &Path, nan: bool) -> Result<u8, Failure> {
    let source = match SafetensorsSource::open(path) {
        Ok(source) => source,
        Err(e @ burnpack::interop::safetensors::ConvertError::Safetensors { .. }) => {
            println!("{e}");
            println!("{}: FAILED: 1 problem", path.display());
            return Ok(1);
        }
        Err(e) => return Err(Failure::file(e)),
    };
    let Scan { bad, total, .. } = scan(&source, path, nan)?;
    if bad > 0 {
        println!("{}: FAILED: {bad} problems", path.display());
        return Ok(1);
    }
    println!(
        "{}: OK: {} shard{} valid, {} tensors ({}) read, no checksums in safetensors (contents unverified){}",
        path.display(),
        source.shards().len(),
        if source.shards().len() == 1 { "" } else { "s" },
        source.tensors().len(),
        mib(total),
        if nan {
            ", float values scanned for NaN/Inf"
        } else {
            ""
        }
    );
    Ok(0)
}

/// Calls `f` with every element of a tensor as f64 (`None` for non-numeric dtypes).
fn for_each_f64(dtype: DType, bytes: &[u8], mut f: impl FnMut(f64)) -> bool {
    macro_rules! each {
        ($n:literal, $conv:expr) => {
            for c in bytes.chunks_exact($n) {
                f($conv(c.try_into().expect("exact chunk")))
            }
        };
    }
    match dtype {
        DType::F64 => each!(8, f64::from_le_bytes),
        DType::F32 | DType::Flex32 => each!(4, |b| f64::from(f32::from_le_bytes(b))),
        DType::F16 => each!(2, |b| f16::from_le_bytes(b).to_f64()),
        DType::BF16 => each!(2, |b| bf16::from_le_bytes(b).to_f64()),
        DType::I64 => each!(8, |b| i64::from_le_bytes(b) as f64),
        DType::I32 => each!(4, |b| f64::from(i32::from_le_bytes(b))),
        DType::I16 => each!(2, |b| f64::from(i16::from_le_bytes(b))),
        DType::I8 => each!(1, |b: [u8; 1]| f64::from(b[0] as i8)),
        DType::U64 => each!(8, |b| u64::from_le_bytes(b) as f64),
        DType::U32 => each!(4, |b| f64::from(u32::from_le_bytes(b))),
        DType::U16 => each!(2, |b| f64::from(u16::from_le_bytes(b))),
        DType::U8 | DType::Bool(BoolStore::Native | BoolStore::U8) => {
            each!(1, |b: [u8; 1]| f64::from(b[0]))
        }
        DType::Bool(BoolStore::U32) => each!(4, |b| f64::from(u32::from_le_bytes(b))),
        DType::QFloat(_) => return false,
    }
    true
}

/// What reading every tensor of a source found.
struct Scan {
    /// Problems printed: checksum mismatches, tensors with NaN or infinite values.
    bad: usize,
    /// Tensors whose checksum matched (none for sources without checksums).
    verified: usize,
    /// Bytes read.
    total: u64,
}

/// Reads every tensor of `source` in parallel (a progress bar from 256 MiB on), checks each
/// against its checksum and, with `nan`, scans floats for NaN and infinite values; prints
/// each problem.
fn scan(source: &(dyn TensorSource + Sync), path: &Path, nan: bool) -> Result<Scan, Failure> {
    let total: u64 = source.tensors().iter().map(TensorInfo::len).sum();
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg}")
            .expect("valid template"),
    );
    if total < 256 << 20 {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    // Per tensor: name, NaN count, infinity count, checksum verdict.
    type Verdict = (String, u64, u64, Result<bool, String>);
    let results: Vec<Result<Verdict, Failure>> = source
        .tensors()
        .par_iter()
        .map(|t| {
            let bytes = source.read(t).map_err(Failure::file)?;
            let sum = source.check(t, &bytes).map_err(|e| e.to_string());
            let (mut nans, mut infs) = (0u64, 0u64);
            if nan && t.dtype().is_float() {
                for_each_f64(t.dtype(), &bytes, |v| {
                    nans += u64::from(v.is_nan());
                    infs += u64::from(v.is_infinite());
                });
            }
            bar.inc(t.len());
            Ok((t.name().to_string(), nans, infs, sum))
        })
        .collect();
    bar.finish_and_clear();
    let (mut bad, mut verified) = (0, 0);
    for result in results {
        let (name, nans, infs, sum) = result?;
        match sum {
            Ok(checked) => verified += usize::from(checked),
            Err(message) => {
                bad += 1;
                println!("{message}");
            }
        }
        if nans + infs > 0 {
            bad += 1;
            println!(
                "{}: tensor '{name}': {nans} NaN and {infs} infinite values",
                path.display()
            );
        }
    }
    Ok(Scan {
        bad,
        verified,
        total,
    })
}

fn verify(path: &Path, nan: bool) -> Result<u8, Failure> {
    if is_safetensors(path) {
        return verify_safetensors(path, nan);
    }
    // Ordinary reads, never a mapping: a damaged file (a hole on a full tmpfs, a file
    // truncated meanwhile) is then an error to report, not a `SIGBUS`.
    let failed = |e: &ReadError| {
        println!("{e}");
        println!("{}: FAILED: 1 problem", path.display());
        Ok(1)
    };
    let opened = if is_url(path) {
        remote::download(path)?
    } else {
        Reader::open_buffered(path)
    };
    let reader = match opened {
        Ok(reader) => reader,
        // Damage that the checksums caught is a failed verification, like a tensor's.
        Err(
            e @ ReadError::Invalid {
                source: FormatError::MetadataChecksum { .. },
                ..
            },
        ) => return failed(&e),
        Err(e) => return Err(Failure::file(e)),
    };
    match reader.verify_structure() {
        Ok(()) => {}
        Err(e @ ReadError::Invalid { .. }) => return failed(&e),
        Err(e) => return Err(Failure::file(e)),
    }
    // What Burn's reader ignores in other writers' files (an error in this crate's files,
    // refused above): named, without failing the verification.
    for warning in reader.layout().check_extras().unwrap_or_default() {
        println!("{}: warning: {warning}", path.display());
    }
    let Scan {
        bad,
        verified,
        total,
    } = scan(&reader, path, nan)?;
    if bad > 0 {
        println!("{}: FAILED: {bad} problems", path.display());
        return Ok(1);
    }
    let scanned = if nan {
        ", float values scanned for NaN/Inf"
    } else {
        ""
    };
    let sums = if reader.layout().has_checksums() {
        format!("header and metadata checksum and all {verified} tensor checksums match")
    } else {
        "no checksums in this file (contents unverified)".to_string()
    };
    println!(
        "{}: OK: structure valid, {} tensors ({}) read, {sums}{scanned}",
        path.display(),
        reader.tensors().len(),
        mib(total)
    );
    Ok(0)
}

/// A tensor whose values differ: name, largest absolute and relative difference.
type ValueDiff = (String, f64, f64);

/// Largest absolute and relative difference between two tensors of one dtype and shape.
fn max_diff(dtype: DType, a: &[u8], b: &[u8]) -> Option<(f64, f64)> {
    let mut left = Vec::new();
    if !for_each_f64(dtype, a, |v| left.push(v)) {
        return (a != b)
            .then_some((f64::NAN, f64::NAN))
            .or(Some((0.0, 0.0)));
    }
    let (mut abs, mut rel, mut i) = (0.0f64, 0.0f64, 0);
    for_each_f64(dtype, b, |y| {
        let x = left[i];
        i += 1;
        let d = if x == y || (x.is_nan() && y.is_nan()) {
            0.0
        } else {
            (x - y).abs()
        };
        abs = abs.max(d);
        let scale = x.abs().max(y.abs());
        if d > 0.0 {
            rel = rel.max(if scale > 0.0 {
                d / scale
            } else {
                f64::INFINITY
            });
        }
    });
    Some((abs, rel))
}

fn diff(a_path: &Path, b_path: &Path, as_json: bool) -> Result<u8, Failure> {
    let (a, b) = (Opened::open(a_path)?, Opened::open(b_path)?);
    let names_a: BTreeSet<&str> = a.source().tensors().iter().map(TensorInfo::name).collect();
    let names_b: BTreeSet<&str> = b.source().tensors().iter().map(TensorInfo::name).collect();
    let only_a: Vec<&str> = names_a.difference(&names_b).copied().collect();
    let only_b: Vec<&str> = names_b.difference(&names_a).copied().collect();
    let common: Vec<(&TensorInfo, &TensorInfo)> = names_a
        .intersection(&names_b)
        .map(|n| (a.tensor(n).expect("listed"), b.tensor(n).expect("listed")))
        .collect();
    let mut changed_kind = Vec::new();
    let compared: Vec<Result<Option<ValueDiff>, Failure>> = common
        .par_iter()
        .filter(|(x, y)| x.dtype() == y.dtype() && x.shape() == y.shape())
        .map(|(x, y)| {
            let (bx, by) = (
                a.source().read(x).map_err(Failure::file)?,
                b.source().read(y).map_err(Failure::file)?,
            );
            if bx[..] == by[..] {
                return Ok(None);
            }
            let (abs, rel) = max_diff(x.dtype(), &bx, &by).unwrap_or((f64::NAN, f64::NAN));
            Ok(Some((x.name().to_string(), abs, rel)))
        })
        .collect();
    for (x, y) in &common {
        if x.dtype() != y.dtype() || x.shape() != y.shape() {
            changed_kind.push(json!({
                "name": x.name(),
                "a": {"dtype": dtype_name(x.dtype()), "shape": x.shape()},
                "b": {"dtype": dtype_name(y.dtype()), "shape": y.shape()},
            }));
        }
    }
    let ids: Vec<Value> = common
        .iter()
        .filter(|(x, y)| x.param_id() != y.param_id())
        .map(|(x, y)| {
            let id = |t: &TensorInfo| t.param_id().map(|id| id.to_string());
            json!({"name": x.name(), "a": id(x), "b": id(y)})
        })
        .collect();
    let mut values = Vec::new();
    for r in compared {
        if let Some(v) = r? {
            values.push(v);
        }
    }
    let map_diff = |x: Vec<(String, String)>, y: Vec<(String, String)>| {
        let xs: std::collections::BTreeMap<_, _> = x.into_iter().collect();
        let ys: std::collections::BTreeMap<_, _> = y.into_iter().collect();
        let keys: BTreeSet<&String> = xs.keys().chain(ys.keys()).collect();
        keys.into_iter()
            .filter(|k| xs.get(*k) != ys.get(*k))
            .map(|k| json!({"key": k, "a": xs.get(k), "b": ys.get(k)}))
            .collect::<Vec<_>>()
    };
    let strings = |r: &Opened| {
        r.metadata()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>()
    };
    let metadata = map_diff(strings(&a), strings(&b));
    let scalar_diffs = map_diff(a.scalars(), b.scalars());
    let differ = !(only_a.is_empty()
        && only_b.is_empty()
        && changed_kind.is_empty()
        && ids.is_empty()
        && values.is_empty()
        && metadata.is_empty()
        && scalar_diffs.is_empty());
    if as_json {
        let out = json!({
            "a": a_path.display().to_string(),
            "b": b_path.display().to_string(),
            "identical": !differ,
            "only_in_a": only_a,
            "only_in_b": only_b,
            "dtype_or_shape": changed_kind,
            "param_ids": ids,
            "values": values.iter().map(|(n, abs, rel)| json!({"name": n, "max_abs": abs, "max_rel": rel})).collect::<Vec<_>>(),
            "metadata": metadata,
            "scalars": scalar_diffs,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("JSON of plain values")
        );
        return Ok(u8::from(differ));
    }
    for n in &only_a {
        println!("only in {}: {n}", a_path.display());
    }
    for n in &only_b {
        println!("only in {}: {n}", b_path.display());
    }
    for c in &changed_kind {
        println!(
            "{}: {} {} vs {} {}",
            c["name"].as_str().unwrap_or(""),
            c["a"]["dtype"],
            c["a"]["shape"],
            c["b"]["dtype"],
            c["b"]["shape"]
        );
    }
    for d in &ids {
        println!(
            "{}: param id {} vs {}",
            d["name"].as_str().unwrap_or(""),
            d["a"].as_str().unwrap_or("none"),
            d["b"].as_str().unwrap_or("none")
        );
    }
    for (n, abs, rel) in &values {
        println!("{n}: values differ (max abs {abs:e}, max rel {rel:e})");
    }
    for m in &metadata {
        println!(
            "metadata {}: {} vs {}",
            m["key"].as_str().unwrap_or(""),
            m["a"],
            m["b"]
        );
    }
    for m in &scalar_diffs {
        println!(
            "scalar {}: {} vs {}",
            m["key"].as_str().unwrap_or(""),
            m["a"],
            m["b"]
        );
    }
    let same = common.len() - changed_kind.len() - values.len();
    println!(
        "{} tensors with identical values, {} differ in values, {} in dtype or shape, {} only in A, {} only in B",
        same,
        values.len(),
        changed_kind.len(),
        only_a.len(),
        only_b.len()
    );
    Ok(u8::from(differ))
}

fn convert(
    input: &Path,
    output: &Path,
    to: Option<Format>,
    shard_size: Option<u64>,
) -> Result<u8, Failure> {
    let to = match to {
        Some(f) => f,
        None => match output.extension().and_then(|e| e.to_str()) {
            Some("bpk") => Format::Burnpack,
            Some("safetensors") => Format::Safetensors,
            _ => {
                return Err(Failure::usage(format!(
                    "{}: cannot tell the output format from its extension; use --to",
                    output.display()
                )));
            }
        },
    };
    if shard_size.is_some() && to != Format::Safetensors {
        return Err(Failure::usage(
            "--shard-size applies to safetensors output only",
        ));
    }
    if is_url(input) || is_url(output) {
        return convert_remote(input, output, to, shard_size);
    }
    let size = match (is_burnpack_file(input)?, to) {
        (false, Format::Burnpack) => {
            burnpack::interop::safetensors::safetensors_to_burnpack(input, output)
        }
        (true, Format::Safetensors) => {
            let written = burnpack::interop::safetensors::burnpack_to_safetensors_sharded(
                input, output, shard_size,
            )
            .map_err(Failure::file)?;
            return Ok(converted_to_safetensors(input, output, &written));
        }
        (true, Format::Burnpack) | (false, Format::Safetensors) => {
            return Err(Failure::usage(format!(
                "{} is already in the requested format",
                input.display()
            )));
        }
    }
    .map_err(Failure::file)?;
    Ok(converted(input, output, size))
}

/// Says what a conversion wrote: `IN -> OUT (size)`.
fn converted(input: &Path, output: &Path, size: u64) -> u8 {
    println!(
        "{} -> {} ({})",
        input.display(),
        output.display(),
        mib(size)
    );
    0
}

/// Whether a local file starts with burnpack's magic (else it is taken for safetensors).
fn is_burnpack_file(input: &Path) -> Result<bool, Failure> {
    let mut magic = [0u8; 4];
    std::fs::File::open(input)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .map(|()| u32::from_le_bytes(magic) == burnpack::format::MAGIC)
        .map_err(|e| Failure::file(format!("{}: cannot read: {e}", input.display())))
}

/// Says what a conversion to safetensors wrote (one file, or shards and their index).
fn converted_to_safetensors(input: &Path, output: &Path, written: &[PathBuf]) -> u8 {
    let size: u64 = written
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    if written.len() > 1 {
        println!(
            "{} -> {} shards and {} ({})",
            input.display(),
            written.len() - 1,
            written
                .last()
                .map_or_else(String::new, |p| p.display().to_string()),
            mib(size)
        );
        0
    } else {
        converted(input, output, size)
    }
}

/// `convert` where the input or the output is on object storage: a pack there converts to
/// safetensors (a local file) or is copied (to a file or another object); a local pack or
/// safetensors weights go up as a pack, streamed as a multipart upload.
#[cfg(feature = "object-store")]
fn convert_remote(
    input: &Path,
    output: &Path,
    to: Format,
    shard_size: Option<u64>,
) -> Result<u8, Failure> {
    use burnpack::Writer;
    use burnpack::interop::object_store::{UploadOptions, upload};

    if to == Format::Safetensors && is_url(output) {
        return Err(Failure::usage(format!(
            "{}: safetensors are written to local files only; convert to a local file, then \
             copy it",
            output.display()
        )));
    }
    let writer = if is_url(input) {
        let source = remote::open(input)?;
        if to == Format::Safetensors {
            let written =
                burnpack::interop::safetensors::pack_to_safetensors(&source, output, shard_size)
                    .map_err(Failure::file)?;
            return Ok(converted_to_safetensors(input, output, &written));
        }
        Writer::from_part(&source, "").map_err(Failure::file)?
    } else if is_burnpack_file(input)? {
        Writer::from_part(&open(input)?, "").map_err(Failure::file)?
    } else {
        burnpack::interop::safetensors::safetensors_to_writer(input).map_err(Failure::file)?
    };
    let size = if is_url(output) {
        upload(writer, &remote::location(output)?, &UploadOptions::new()).map_err(Failure::file)?
    } else {
        writer.write_to_file(output).map_err(Failure::file)?
    };
    Ok(converted(input, output, size))
}

/// Without the `object-store` feature, a URL is a usage error saying how to get it.
#[cfg(not(feature = "object-store"))]
fn convert_remote(input: &Path, output: &Path, _: Format, _: Option<u64>) -> Result<u8, Failure> {
    match remote::open(if is_url(input) { input } else { output })? {}
}
