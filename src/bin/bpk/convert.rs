//! `bpk convert`: anything the registry reads into a pack or safetensors (sharded with
//! `--shard-size`), files and URLs; a pack also copies to or from object storage.

use std::path::{Path, PathBuf};

use burnpack::read::{DescribedSource, human_bytes};

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
    if to == Format::Safetensors {
        bar.working();
        let written = to_safetensors(source.as_ref(), output, shard_size)?;
        bar.finish();
        return Ok(converted_to_safetensors(input, output, &written));
    }
    let counter = bar.counter();
    let writer = source
        .to_writer()
        .map_err(|e| Failure::of(&e))?
        .progress(counter);
    let size = if is_url(output) {
        upload(writer, output)?
    } else {
        writer.write_to_file(output).map_err(|e| Failure::of(&e))?
    };
    bar.finish();
    Ok(converted(input, output, size))
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

/// Writes `source` as safetensors: its metadata kept (a pack's or what another format's
/// source carries into a pack, a GGUF file's, say; `producer` aside), each tensor of a pack
/// checked against its checksum.
fn to_safetensors(
    source: &dyn DescribedSource,
    output: &Path,
    shard_size: Option<u64>,
) -> Result<Vec<PathBuf>, Failure> {
    use burnpack::interop::safetensors::{pack_to_safetensors, writer_to_safetensors};
    match source.as_pack() {
        Some(pack) => pack_to_safetensors(pack, output, shard_size),
        None => {
            let tensors = source.as_tensor_source();
            let writer = source.to_writer().map_err(|e| Failure::of(&e))?;
            writer_to_safetensors(writer, tensors.file(), output, shard_size)
        }
    }
    .map_err(|e| Failure::of(&e))
}

/// A pack streamed to object storage as a multipart upload.
#[cfg(feature = "object-store")]
fn upload(writer: burnpack::Writer, output: &Path) -> Result<u64, Failure> {
    use burnpack::interop::object_store::{ObjectLocation, UploadOptions, upload};
    let location = ObjectLocation::parse(&output.to_string_lossy()).map_err(Failure::usage)?;
    upload(writer, &location, &UploadOptions::new()).map_err(|e| Failure::of(&e))
}

/// Without the `object-store` feature, a URL is a usage error saying how to get it.
#[cfg(not(feature = "object-store"))]
fn upload(_: burnpack::Writer, output: &Path) -> Result<u64, Failure> {
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
