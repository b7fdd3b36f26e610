//! `bpk convert`: anything the registry reads into a pack or safetensors (sharded with
//! `--shard-size`), files and URLs; a pack also copies to or from object storage.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use burnpack::interop::safetensors::{ConvertError, writer_to_safetensors};
use burnpack::source::{DescribedSource, human_bytes};
use burnpack::write::WriteError;
use burnpack::write::Writer;

use crate::open::{is_url, open};
use crate::progress::Bar;
use crate::{Failure, Format};

pub(crate) fn convert(
    input: &Path,
    output: &Path,
    to: Option<Format>,
    shard_size: Option<u64>,
    keep_quantized: bool,
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
    if keep_quantized && to != Format::Burnpack {
        return Err(Failure::usage(
            "--keep-quantized applies to burnpack output only (safetensors has no quantized dtype)",
        ));
    }
    if to == Format::Safetensors && is_url(output) {
        return Err(Failure::usage(format!(
            "{}: safetensors are written to local files only; convert to a local file, then \
             copy it",
            output.display()
        )));
    }
    let source = open(input)?;
    refuse_onto_input(source.as_ref(), input, output)?;
    let description = source.describe();
    let format = description.format;
    // A source spread over several files (shards, an incremental checkpoint's data files)
    // becomes one: not a no-op even in its own format.
    let incremental = description.fields.iter().any(|(k, _)| *k == "referred");
    let same = description.shards.is_empty()
        && !incremental
        && match to {
            Format::Burnpack => format == "burnpack",
            Format::Safetensors => format == "safetensors",
        };
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
    // Tensors are read as the writer reaches them (deferred entries), so that a conversion
    // holds a tensor per writer thread, never the model (`Writer::streaming`).
    let source: Arc<dyn DescribedSource> = Arc::from(source);
    let writer = Writer::streaming(&source).map_err(Failure::file)?;
    if to == Format::Safetensors {
        bar.working();
        let written = writer_to_safetensors(writer, source.file(), output, shard_size)
            .map_err(|e| naming(input, output, e))?;
        bar.finish();
        return Ok(converted_to_safetensors(input, output, &written));
    }
    let writer = writer.progress(bar.counter());
    let size = if is_url(output) {
        upload(writer, output)?
    } else {
        writer
            .write_to_file(output)
            .map_err(|e| naming(input, output, e))?
    };
    bar.finish();
    Ok(converted(input, output, size))
}

/// A failed conversion's error, naming the file at fault: the output where writing it failed
/// (an I/O error names its path), the input where what it holds cannot be written (too many
/// metadata entries, a tensor name the output reserves...). A tensor that could not be read
/// is the reader's error, which names the input already.
fn naming(input: &Path, output: &Path, e: impl Into<ConvertError>) -> Failure {
    let e = e.into();
    let names_a_file = match &e {
        ConvertError::Write(w) => matches!(
            w,
            WriteError::Io { .. } | WriteError::AlreadyExists { .. } | WriteError::Provider { .. }
        ),
        ConvertError::Read(_)
        | ConvertError::Source(_)
        | ConvertError::Io { .. }
        | ConvertError::Dtype { .. }
        | ConvertError::Name { .. }
        | ConvertError::Header { .. }
        | ConvertError::Safetensors { .. } => true,
        _ => false,
    };
    // The exit code by the contract (1 where a read found the input damaged, 3 otherwise).
    let failure = Failure::of(&e);
    // A tensor that could not be read: the reader's error, which starts with the input's
    // name, rather than the writer's wrapping of it ("tensor 'w': provider failed: ...").
    if let ConvertError::Write(WriteError::Provider { source, .. }) = &e {
        return Failure {
            code: failure.code,
            message: source.to_string(),
        };
    }
    if names_a_file {
        failure
    } else {
        Failure {
            code: failure.code,
            message: format!(
                "{}: cannot be written as {}: {e}",
                input.display(),
                output.display()
            ),
        }
    }
}

/// Refuses an output that is the input or one of its parts: the conversion would replace
/// what it reads (a usage error, exit 2).
fn refuse_onto_input(
    source: &dyn DescribedSource,
    input: &Path,
    output: &Path,
) -> Result<(), Failure> {
    if is_url(output) {
        return Ok(());
    }
    let Ok(out) = std::fs::canonicalize(output) else {
        return Ok(()); // Not there yet: not the input.
    };
    let mut inputs = source.describe().shards;
    inputs.push(input.to_path_buf());
    if inputs
        .iter()
        .any(|p| std::fs::canonicalize(p).is_ok_and(|p| p == out))
    {
        return Err(Failure::usage(format!(
            "{}: is the input (or one of its parts); converting onto it would destroy it",
            output.display()
        )));
    }
    Ok(())
}

/// A pack streamed to object storage as a multipart upload.
#[cfg(feature = "object-store")]
fn upload(writer: burnpack::write::Writer, output: &Path) -> Result<u64, Failure> {
    use burnpack::interop::object_store::{ObjectLocation, UploadOptions, upload};
    let location = ObjectLocation::parse(&output.to_string_lossy()).map_err(Failure::usage)?;
    upload(writer, &location, &UploadOptions::new()).map_err(|e| Failure::of(&e))
}

/// Without the `object-store` feature, a URL is a usage error saying how to get it.
#[cfg(not(feature = "object-store"))]
fn upload(_: burnpack::write::Writer, output: &Path) -> Result<u64, Failure> {
    Err(Failure::usage(format!(
        "{}: this bpk was built without object storage; install it with \
         `--features cli,object-store`",
        output.display()
    )))
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

/// Says what a conversion to safetensors wrote (one file, or shards and their index).
pub(crate) fn converted_to_safetensors(input: &Path, output: &Path, written: &[PathBuf]) -> u8 {
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
            human_bytes(size)
        );
        0
    } else {
        converted(input, output, size)
    }
}
