//! `bpk`: inspect, verify, diff and convert burnpack files.
//!
//! Every command also takes `s3://bucket/key` URLs where it takes a file, when built with the
//! `object-store` feature (configured from the `AWS_*` environment variables).
//!
//! Exit codes: 0 success; 1 verification failed or the files differ; 2 usage error;
//! 3 a file is unreadable or not a valid pack.
//!
//! One file per command (`inspect`, `verify`, `diff`, `convert`, `migrate`), as ripgrep splits
//! its binary; no command knows a format by name: `open` opens any argument (a file of any
//! format, an index of shards, a URL) through the library's container registry, and the
//! source describes itself. The shared pieces: `print` (rows, metadata, the dtype census),
//! `scan` (every tensor read and checked, floats scanned for NaN/Inf) and `progress` (bars on
//! a terminal, nothing when piped). This file holds the arguments, the exit codes and the
//! dispatch.

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

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "bpk",
    version,
    about = "Inspect, verify, diff and convert burnpack (.bpk) files, safetensors weights, PyTorch torch.save files and Burn 0.14-0.21 records"
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
        #[arg(long, value_enum, default_value = "constant")]
        scheduler: burnpack::interop::burn_record::SchedulerKind,
    },
    /// Convert between burnpack and safetensors (format chosen by the output's extension,
    /// or --to), and PyTorch torch.save files and Burn 0.14-0.21 records to either; a pack also copies to or from object
    /// storage (s3:// URLs).
    #[command(
        after_help = "Examples:\n  bpk convert model.safetensors model.bpk\n  bpk convert model.safetensors.index.json model.bpk\n  bpk convert model.bpk model.safetensors --shard-size 5000000000\n  bpk convert model.safetensors s3://models/run-7/model.bpk\n  bpk convert s3://models/run-7/model.bpk model.safetensors\n  bpk convert model-3.mpk.gz model.bpk\n  bpk convert pytorch_model.bin model.safetensors\n  bpk convert model-q8_0.gguf model.bpk --keep-quantized"
    )]
    Convert {
        /// The source file (burnpack or safetensors, recognised by its content; a torch.save
        /// file or a Burn record, by its name), or a pack's
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
        /// To burnpack: keep quantized blocks that a Burn quantization scheme holds exactly
        /// (GGUF Q8_0) as Burn quantized tensors instead of dequantizing them.
        #[arg(long)]
        keep_quantized: bool,
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
    os::raise_open_files();
    let cli = Cli::parse();
    // The worker threads up front: where they cannot be started (a memory or process limit),
    // that is said and bpk stops, instead of panicking at the first parallel step. (Rayon
    // sets its global pool once: a failed start cannot be retried with fewer threads.)
    if let Err(e) = rayon::ThreadPoolBuilder::new().build_global() {
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
        let options = burnpack::interop::OpenOptions::new().keep_quantized(keep);
        match &cli.key {
            Some(key) => options.key(key.clone()),
            None => options,
        }
    });
    let result = match cli.command {
        Command::Inspect { file, json, filter } => inspect::inspect(&file, json, filter.as_deref()),
        Command::Verify { file, nan } => verify::verify(&file, nan),
        Command::Diff { a, b, json } => diff::diff(&a, &b, json),
        Command::Migrate {
            old,
            new,
            scheduler,
        } => migrate::migrate(&old, &new, scheduler),
        Command::Convert {
            input,
            output,
            to,
            shard_size,
            keep_quantized,
        } => convert::convert(&input, &output, to, shard_size, keep_quantized),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("bpk: {}", print::clean(&failure.message));
            ExitCode::from(failure.code)
        }
    }
}
