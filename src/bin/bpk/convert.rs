//! `bpk convert`: anything the registry reads into any output its output side writes (a pack,
//! safetensors, sharded with `--shard-size`), picked by the output's name or `--to`; a pack
//! also copies to or from object storage.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use burn::tensor::DType;
use burnpack::interop::{OutputError, OutputOptions, output_for};
use burnpack::source::{DescribedSource, human_bytes};

use crate::Failure;
use crate::open::{is_url, open};
use crate::progress::Bar;

/// What `convert` changes on the way: `--dtype`, `--filter`, `--rename FROM=TO` (as given).
pub(crate) struct Edits {
    pub(crate) dtype: Option<String>,
    pub(crate) filter: Option<String>,
    pub(crate) rename: Vec<String>,
}

impl Edits {
    /// `options` with these edits; a bad pattern or rule is a usage error naming it.
    fn apply(&self, mut options: OutputOptions) -> Result<OutputOptions, Failure> {
        if let Some(dtype) = &self.dtype {
            let dtype = match dtype.as_str() {
                "f16" => DType::F16,
                "bf16" => DType::BF16,
                "f32" => DType::F32,
                other => {
                    return Err(Failure::usage(format!(
                        "--dtype {other}: not one of f16, bf16, f32"
                    )));
                }
            };
            options = options.float_dtype(dtype).map_err(Failure::usage)?;
        }
        if let Some(filter) = &self.filter {
            options = options
                .filter_regex(filter)
                .map_err(|e| Failure::usage(format!("--filter '{filter}': {e}")))?;
        }
        for rule in &self.rename {
            let Some((from, to)) = rule.split_once('=') else {
                return Err(Failure::usage(format!(
                    "--rename '{rule}': expected FROM=TO (a regular expression, `=`, its \
                     replacement)"
                )));
            };
            options = options
                .rename(from, to)
                .map_err(|e| Failure::usage(format!("--rename '{rule}': {e}")))?;
        }
        Ok(options)
    }
}

/// `convert`: `input` (any format the registry reads) into `output`, in the format `to`
/// names, or else its name: the registry's output side picks the output and writes it, with
/// `edits` made on the way.
pub(crate) fn convert(
    input: &Path,
    output: &Path,
    to: Option<&str>,
    shard_size: Option<u64>,
    keep_quantized: bool,
    edits: &Edits,
) -> Result<u8, Failure> {
    let options = edits.apply(
        OutputOptions::new()
            .shard_size(shard_size)
            .keep_quantized(keep_quantized),
    )?;
    let target = output_for(output, to, &options).map_err(|e| match e {
        OutputError::UnknownName { .. } => Failure::usage(format!("{e}; use --to")),
        e => failed(&e),
    })?;
    let source = open(input)?;
    refuse_onto_input(source.as_ref(), input, output, target.sharded)?;
    let description = source.describe();
    // A source spread over several files (shards, an incremental checkpoint's data files)
    // becomes one: not a no-op even in its own format.
    let incremental = description.fields.iter().any(|(k, _)| *k == "referred");
    let same = description.shards.is_empty()
        && !incremental
        && !options.edits()
        && target.format == description.format;
    if same && !is_url(input) && !is_url(output) {
        return Err(Failure::usage(format!(
            "{} is already in the requested format",
            input.display()
        )));
    }
    // A source that opened but holds nothing to convert (a Burn record without a tensor).
    if let Some(why) = source.unusable() {
        return Err(Failure::file(why));
    }
    let total: u64 = source
        .as_tensor_source()
        .tensors()
        .iter()
        .map(burnpack::format::TensorInfo::len)
        .sum();
    let bar = Bar::new(total, &format!("-> {}", output.display()));
    // Tensors are read as the writer reaches them, so that a conversion holds a tensor per
    // writer thread, never the model.
    let source: Arc<dyn DescribedSource> = Arc::from(source);
    let progress = if target.reports_progress {
        Some(Arc::new(bar.counter()) as burnpack::interop::Progress)
    } else {
        bar.working();
        None
    };
    let written = target
        .write(&source, input, output, &options, progress)
        .map_err(|e| failed(&e))?;
    bar.finish();
    Ok(converted_to(input, output, &written.paths, written.size))
}

/// The failure of an output that could not be picked (exit 2) or written (exit 1 where the
/// input was found damaged, 3 otherwise); the message names the file at fault.
fn failed(e: &OutputError) -> Failure {
    let code = if e.is_usage() {
        2
    } else if e.is_damaged() {
        1
    } else {
        3
    };
    Failure {
        code,
        message: e.to_string(),
    }
}

/// Refuses an output that is the input or one of its parts: the conversion would replace
/// what it reads (a usage error, exit 2).
pub(crate) fn refuse_onto_input(
    source: &dyn DescribedSource,
    input: &Path,
    output: &Path,
    sharded: bool,
) -> Result<(), Failure> {
    if is_url(output) {
        return Ok(());
    }
    let mut inputs = source.describe().shards;
    inputs.push(input.to_path_buf());
    let inputs: Vec<PathBuf> = inputs
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    if let Ok(out) = std::fs::canonicalize(output)
        && inputs.contains(&out)
    {
        return Err(Failure::usage(format!(
            "{}: is the input (or one of its parts); converting onto it would destroy it",
            output.display()
        )));
    }
    // A sharded output also writes `<stem>-NNNNN-of-NNNNN.<ext>` and `<name>.index.json`
    // beside `output`: none of those may be a part of the input either.
    if sharded && let Some(part) = shard_named_like(&inputs, output) {
        return Err(Failure::usage(format!(
            "{}: the sharded output {} writes files of that name beside it, and it is the input \
             (or one of its parts); converting onto it would destroy it (choose another output \
             name)",
            part.display(),
            output.display()
        )));
    }
    Ok(())
}

/// The part of the input (canonical paths) that a sharded output at `output` could write over:
/// one in the same folder named `<output's stem>-...` or `<output's name>....`.
fn shard_named_like<'a>(inputs: &'a [PathBuf], output: &Path) -> Option<&'a PathBuf> {
    let folder = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => std::fs::canonicalize(p).ok()?,
        _ => std::env::current_dir().ok()?,
    };
    let name = output.file_name()?.to_string_lossy().into_owned();
    let stem = output.file_stem()?.to_string_lossy().into_owned();
    inputs.iter().find(|part| {
        part.parent() == Some(folder.as_path())
            && part.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with(&format!("{stem}-")) || n.starts_with(&format!("{name}."))
            })
    })
}

/// Says what a conversion wrote: `IN -> OUT (size)`.
pub(crate) fn converted(input: &Path, output: &Path, size: u64) -> u8 {
    println!(
        "{} -> {} ({})",
        input.display(),
        output.display(),
        human_bytes(size)
    );
    0
}

/// Says what a conversion wrote (one file, or shards and their index, `size` in all).
pub(crate) fn converted_to(input: &Path, output: &Path, written: &[PathBuf], size: u64) -> u8 {
    if written.len() > 1 {
        println!(
            "{} -> {} shards and {} ({})",
            input.display(),
            written.len() - 1,
            written
                .last()
                .map_or_else(String::new, |p| p.display().to_string()),
            human_bytes(size)
        );
        0
    } else {
        converted(input, output, size)
    }
}
