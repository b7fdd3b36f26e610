//! `bpk convert`: safetensors to burnpack and back (sharded with `--shard-size`), files and URLs;
//! Burn 0.14-0.21 records to packs; `torch.save` files to packs or safetensors.

use std::path::{Path, PathBuf};

use burnpack::interop::burn_record::LegacySource;
use burnpack::interop::pytorch::PytorchSource;
use burnpack::read::TensorSource;

use crate::open::*;
use crate::print::*;
use crate::remote;
use crate::{Failure, Format};

pub(crate) fn convert(
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
    // A torch.save file or a Burn 0.14-0.21 record becomes a pack (its origin kept as
    // metadata: `pytorch.*`, `burn.record.*`) or safetensors.
    if crate::pytorch::is_pytorch(input) {
        let source = crate::pytorch::open(input)?;
        return convert_source(
            &source,
            PytorchSource::to_writer,
            input,
            output,
            to,
            shard_size,
        );
    }
    if crate::legacy::is_legacy(input) {
        let source = crate::legacy::open(input)?;
        if source.tensors().is_empty() {
            return Err(Failure::file(crate::legacy::no_tensors(input)));
        }
        return convert_source(
            &source,
            LegacySource::to_writer,
            input,
            output,
            to,
            shard_size,
        );
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

/// Writes `source` (a file of another format) as a pack, with `writer` (which adds the
/// source's metadata), or as safetensors.
fn convert_source<S: TensorSource + ?Sized>(
    source: &S,
    writer: impl FnOnce(&S) -> Result<burnpack::Writer, burnpack::read::ReadError>,
    input: &Path,
    output: &Path,
    to: Format,
    shard_size: Option<u64>,
) -> Result<u8, Failure> {
    if to == Format::Safetensors {
        let written =
            burnpack::interop::safetensors::source_to_safetensors(source, output, shard_size)
                .map_err(Failure::file)?;
        return Ok(converted_to_safetensors(input, output, &written));
    }
    let size = writer(source)
        .map_err(Failure::file)?
        .write_to_file(output)
        .map_err(Failure::file)?;
    Ok(converted(input, output, size))
}

/// Says what a conversion wrote: `IN -> OUT (size)`.
pub(crate) fn converted(input: &Path, output: &Path, size: u64) -> u8 {
    println!(
        "{} -> {} ({})",
        input.display(),
        output.display(),
        mib(size)
    );
    0
}

/// Whether a local file starts with burnpack's magic (else it is taken for safetensors).
pub(crate) fn is_burnpack_file(input: &Path) -> Result<bool, Failure> {
    let mut magic = [0u8; 4];
    burnpack::read::open_regular_file(input)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .map(|()| u32::from_le_bytes(magic) == burnpack::format::MAGIC)
        .map_err(|e| Failure::file(format!("{}: cannot read: {e}", input.display())))
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
pub(crate) fn convert_remote(
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
pub(crate) fn convert_remote(
    input: &Path,
    output: &Path,
    _: Format,
    _: Option<u64>,
) -> Result<u8, Failure> {
    match remote::open(if is_url(input) { input } else { output })? {}
}
