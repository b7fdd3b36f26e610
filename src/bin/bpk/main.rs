//! `bpk`: inspect, verify, diff and convert burnpack files and every format the library's
//! registry reads (safetensors, PyTorch, GGUF, NumPy, ONNX, Burn records, checkpoints).
//!
//! Every command also takes `s3://bucket/key` URLs where it takes a file, when built with the
//! `object-store` feature (configured from the `AWS_*` environment variables).
//!
//! One file per command (`inspect`, `verify`, `cat`, `diff`, `convert`, `migrate`), as ripgrep splits
//! its binary; no command knows a format by name: `open` opens any argument (a file of any
//! format, an index of shards, a URL) through the library's container registry, and the
//! source describes itself; `convert` writes through the registry's output side
//! (`burnpack::interop::output_for`: the output picked by its name) and `migrate` runs the
//! registry's migration (`burnpack::interop::migration`). The shared pieces: `print` (rows, metadata, the dtype census),
//! `scan` (every tensor read and checked, floats scanned for NaN/Inf) and `progress` (bars on
//! a terminal, nothing when piped). This file holds the arguments, the exit codes (the table
//! in `EXIT_CODES`, shown by `bpk --help`) and the dispatch.
#![deny(clippy::undocumented_unsafe_blocks)]

mod cat;
mod convert;
mod diff;
mod inspect;
mod migrate;
mod open;
mod os;
mod print;
mod progress;
mod scan;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The exit-code contract of every command, for every format (shown by `bpk --help`; the
/// same table is in docs/guide.md).
const EXIT_CODES: &str = "\
Files: burnpack packs (.bpk) and checkpoints (incremental manifests with their data files),
safetensors (one file, or shards through their index .json), PyTorch torch.save files (zip and
legacy, .pt/.pth/.bin, or shards through an index), GGUF (llama.cpp; split sets), NumPy
.npy/.npz, ONNX models' initializers (external data too), Burn 0.14-0.21 records (.mpk,
.mpk.gz, .json, .json.gz); a pack's s3:// URL. The format is told by
the content, never by the name.

Exit codes (the same for every format and every command):
  0  done: inspected, verified sound, printed, converted; diff: no tensor differs
  1  read, but damaged or different: a checksum or CRC-32 that does not match the bytes
     (a pack's header, metadata or tensor; a .pt archive's pickle or storage; a .gz stream),
     a checkpoint reference that does not hold, verify's own findings (NaN/Inf with --nan,
     a damaged metadata key, non-zero padding); diff: tensors differ (metadata only with
     --strict-metadata)
  2  usage: bad arguments, a malformed URL, an output bpk will not write
  3  cannot read: missing, not a regular file or an I/O error; not a file bpk reads (a Git LFS
     pointer, an HTML page, a bincode record, ...); cut short; a bad magic number or an
     invalid header or structure; an unsupported version, dtype or quantization type; a
     refused pickle; no tensors in it; standard output cannot be written (a full disk)
A failure prints one line on stderr naming the file (`bpk: FILE: ...`); results go to stdout.";

#[derive(Parser)]
#[command(
    name = "bpk",
    version,
    about = "Inspect, verify, diff and convert weights: burnpack packs and checkpoints, safetensors, PyTorch torch.save files, GGUF, NumPy, ONNX initializers and Burn 0.14-0.21 records",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// torch.save files: the key of the top-level dict that holds the state dict (by default
    /// the top, or `state_dict`, `model_state_dict` or `model` when the top holds no tensor).
    #[arg(long, global = true, value_name = "KEY")]
    key: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Show a file's header, totals, metadata, scalars and tensors (reads only the metadata;
    /// for a URL, says how many bytes that took).
    #[command(
        after_help = "Examples:\n  bpk inspect model.bpk --filter '^encoder\\.'\n  bpk inspect s3://models/run-7/model.bpk"
    )]
    Inspect {
        /// The file (any format bpk reads: see `bpk --help`), an index .json of shards, or a
        /// pack's s3:// URL.
        file: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Only list tensors whose name matches this regex.
        #[arg(long, value_name = "REGEX")]
        filter: Option<String>,
    },
    /// Check a file's structure and read every tensor against the checksums or CRC-32s its
    /// format keeps; exit 0 only when sound, 1 when damaged, 3 when it cannot be read.
    /// A URL is read whole into memory (one request after its header and metadata).
    #[command(
        after_help = "Examples:\n  bpk verify model.bpk --nan\n  bpk verify model.gguf --json\n  bpk verify s3://models/run-7/model.bpk"
    )]
    Verify {
        /// The file (any format bpk reads: see `bpk --help`), an index .json of shards, or a
        /// pack's s3:// URL.
        file: PathBuf,
        /// Also scan float tensors for NaN and infinite values.
        #[arg(long)]
        nan: bool,
        /// Print JSON instead of text (`ok`, `problems`, ...; the exit code is the same).
        #[arg(long)]
        json: bool,
    },
    /// Compare two files of any formats: tensors only in one, different dtype or shape,
    /// value differences (a quantized tensor by its dequantized values), parameter ids,
    /// metadata and scalars. Exit 0 when the tensors agree, 1 when they differ; metadata and
    /// scalar differences are reported, and fail only with --strict-metadata.
    #[command(
        after_help = "Examples:\n  bpk diff before.bpk after.bpk --json\n  bpk diff model-q8_0.gguf model.bpk --atol 1e-6\n  bpk diff a.safetensors b.bpk --rtol 1e-3 --strict-metadata"
    )]
    Diff {
        /// The first file (any format bpk reads, an index .json, or a pack's s3:// URL).
        a: PathBuf,
        /// The second file (any format bpk reads, an index .json, or a pack's s3:// URL).
        b: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Values agree when |a - b| <= atol + rtol * |b| (default 0: exactly).
        #[arg(long, value_name = "ABS", default_value_t = 0.0)]
        atol: f64,
        /// Relative tolerance (see --atol; default 0).
        #[arg(long, value_name = "REL", default_value_t = 0.0)]
        rtol: f64,
        /// Also exit 1 when metadata, scalars or parameter ids present on only one side differ.
        #[arg(long)]
        strict_metadata: bool,
    },
    /// Print one tensor: its dtype, shape and values, abridged as NumPy abridges them (the
    /// first and last three along each dimension of more than 1000 values; only those are
    /// read where the format allows), or write it as a NumPy .npy file. Quantized tensors are
    /// dequantized for printing (and said to be). A tensor not in the file is a usage error (2).
    #[command(
        after_help = "Examples:\n  bpk cat model.bpk encoder.weight\n  bpk cat model.safetensors lm_head.weight --rows 0..4\n  bpk cat model.gguf token_embd.weight --full\n  bpk cat model.bpk encoder.weight --npy weight.npy"
    )]
    Cat {
        /// The file (any format bpk reads: see `bpk --help`), an index .json of shards, or a
        /// pack's s3:// URL.
        file: PathBuf,
        /// The tensor's name, as `bpk inspect` lists it.
        name: String,
        /// Print every value.
        #[arg(long)]
        full: bool,
        /// Only rows A..B of the first dimension (`A..`, `..B` too), reading only their bytes
        /// where the format allows (not checked against the tensor's checksum, which covers
        /// the whole tensor).
        #[arg(long, value_name = "A..B", value_parser = cat::parse_rows)]
        rows: Option<(Option<usize>, Option<usize>)>,
        /// Write the tensor (or its rows) to this .npy file instead of printing it (written
        /// whole, then renamed into place).
        #[arg(long, value_name = "OUT")]
        npy: Option<PathBuf>,
    },
    /// Convert a burn-train 0.14-0.21 checkpoint directory (`model-<epoch>.mpk.gz`,
    /// `optim-<epoch>.mpk.gz`, `scheduler-<epoch>.mpk.gz`) into one checkpoint per epoch that
    /// Burn 0.22 resumes from (`PackCheckpointer`, `CheckpointManager`).
    #[command(
        after_help = "Example:\n  bpk migrate old-run/checkpoint new-run/checkpoint --scheduler exponential"
    )]
    Migrate {
        /// The burn-train 0.14-0.21 checkpoint directory.
        old: PathBuf,
        /// The directory to write `ckpt-<epoch, 20 digits>.bpk` files into (created).
        new: PathBuf,
        /// The LR scheduler the run used (Burn 0.21's scheduler record does not say).
        #[arg(long, default_value = "constant", value_parser = migrate::schedulers())]
        scheduler: String,
    },
    /// Convert any file bpk reads (a pack or checkpoint, safetensors, a PyTorch torch.save
    /// file, GGUF, NumPy .npy/.npz, an ONNX model's initializers, a Burn 0.14-0.21 record)
    /// into a pack or safetensors (the output format
    /// chosen by its extension, or --to); a pack also copies to or from object storage
    /// (s3:// URLs).
    #[command(
        after_help = "Examples:\n  bpk convert model.safetensors model.bpk\n  bpk convert model.safetensors.index.json model.bpk\n  bpk convert model.bpk model.safetensors --shard-size 5000000000\n  bpk convert model.safetensors s3://models/run-7/model.bpk\n  bpk convert s3://models/run-7/model.bpk model.safetensors\n  bpk convert model-3.mpk.gz model.bpk\n  bpk convert pytorch_model.bin model.safetensors\n  bpk convert model-q8_0.gguf model.bpk --keep-quantized\n  bpk convert model.safetensors model-f16.bpk --dtype f16 --filter '^encoder\\.' --rename '^encoder\\.=enc.'"
    )]
    Convert {
        /// The source: any file bpk reads, its format told by its content (never its name),
        /// an index .json of shards, or a pack's s3:// URL.
        input: PathBuf,
        /// The destination file, or an s3:// URL for a pack.
        output: PathBuf,
        /// The destination format (default: from the output's extension).
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(
            burnpack::interop::output_formats()
        ))]
        to: Option<String>,
        /// To safetensors: split into shards of at most this many bytes, with the index JSON
        /// (`<output>.index.json`).
        #[arg(long, value_name = "BYTES")]
        shard_size: Option<u64>,
        /// To burnpack: keep quantized blocks that a Burn quantization scheme holds exactly
        /// (GGUF Q8_0, Q4_0, Q5_0, Q3_K, Q6_K, IQ4_*, IQ2_*, IQ3_*, IQ1_*, TQ*, MXFP4, NVFP4)
        /// as Burn quantized tensors instead of dequantizing them.
        #[arg(long)]
        keep_quantized: bool,
        /// Write float tensors (f64, f32, f16, bf16) as this dtype, rounded to nearest even as
        /// Burn casts; ints, bools and quantized tensors as they are.
        #[arg(long, value_name = "DTYPE", value_parser = ["f16", "bf16", "f32"])]
        dtype: Option<String>,
        /// Keep only the tensors whose name (after --rename) matches this regular expression.
        #[arg(long, value_name = "REGEX")]
        filter: Option<String>,
        /// Rename tensors: every match of the regular expression FROM is replaced by TO ($1...
        /// name groups); repeatable, applied in order. Two tensors renamed to one name are
        /// refused.
        #[arg(long, value_name = "FROM=TO")]
        rename: Vec<String>,
        /// GGUF: the dtype the quantized blocks not kept quantized are dequantized into.
        #[arg(long, value_name = "DTYPE", value_parser = ["f32", "f16", "bf16"])]
        dequantize_to: Option<String>,
    },
}

/// A failure, with the exit code it maps to.
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    /// The failure of `e` (an error of opening or reading an input, or of a conversion that
    /// read one): exit 1 where the input was read and its own checks found it damaged
    /// (anywhere in the chain of causes), 3 otherwise.
    fn of(e: &(dyn std::error::Error + 'static)) -> Self {
        use burnpack::source::{ReadError, SourceError, SourceErrorKind};
        let mut next = Some(e);
        while let Some(cause) = next {
            let kind = cause
                .downcast_ref::<SourceError>()
                .map(SourceError::kind)
                .or_else(|| cause.downcast_ref::<ReadError>().map(ReadError::kind));
            if kind == Some(SourceErrorKind::Damaged) {
                return Self {
                    code: 1,
                    message: e.to_string(),
                };
            }
            next = cause.source();
        }
        Self::file(e)
    }
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
    os::raise_open_files();
    os::stdout_failures_exit();
    let cli = Cli::parse();
    // The worker threads up front: where they cannot be started (a memory or process limit),
    // that is said and bpk stops, instead of panicking at the first parallel step. (Rayon
    // sets its global pool once: a failed start cannot be retried with fewer threads.)
    if let Err(e) = os::start_worker_threads() {
        eprintln!("bpk: cannot start worker threads: {e}");
        return ExitCode::from(3);
    }
    open::OPTIONS.get_or_init(|| {
        let keep = matches!(
            cli.command,
            Command::Convert {
                keep_quantized: true,
                ..
            }
        );
        let options = burnpack::source::OpenOptions::new().keep_quantized(keep);
        let options = match &cli.command {
            Command::Convert {
                dequantize_to: Some(dtype),
                ..
            } => options.dequantize_to(match dtype.as_str() {
                "f16" => burn::tensor::DType::F16,
                "bf16" => burn::tensor::DType::BF16,
                _ => burn::tensor::DType::F32,
            }),
            _ => options,
        };
        match &cli.key {
            Some(key) => options.key(key.clone()),
            None => options,
        }
    });
    let result = match cli.command {
        Command::Inspect { file, json, filter } => inspect::inspect(&file, json, filter.as_deref()),
        Command::Verify { file, nan, json } => verify::verify(&file, nan, json),
        Command::Cat {
            file,
            name,
            full,
            rows,
            npy,
        } => cat::cat(&file, &name, full, rows, npy.as_deref()),
        Command::Diff {
            a,
            b,
            json,
            atol,
            rtol,
            strict_metadata,
        } => diff::diff(
            &a,
            &b,
            json,
            &diff::Rules {
                atol,
                rtol,
                strict_metadata,
            },
        ),
        Command::Migrate {
            old,
            new,
            scheduler,
        } => migrate::migrate(&old, &new, &scheduler),
        Command::Convert {
            input,
            output,
            to,
            shard_size,
            keep_quantized,
            dtype,
            filter,
            rename,
            dequantize_to: _,
        } => convert::convert(
            &input,
            &output,
            to.as_deref(),
            shard_size,
            keep_quantized,
            &convert::Edits {
                dtype,
                filter,
                rename,
            },
        ),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("bpk: {}", print::clean(&failure.message));
            ExitCode::from(failure.code)
        }
    }
}
