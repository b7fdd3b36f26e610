//! One initializer's row: its `TensorProto` decoded without its data, the place of its values
//! (`raw_data`, a typed field, or external data in the model's folder) found and checked
//! against its dtype and shape before anything is kept.

use std::path::{Component, Path, PathBuf};

use prost::Message;

use super::model;
use super::proto::TensorHeader;
use super::types;
use crate::format::TensorInfo;
use crate::source::data::Source;
use crate::source::{OpenOptions, SourceError};

/// Where a tensor's values are.
#[derive(Clone, Copy, Debug)]
pub(super) enum Place {
    /// `raw_data`, or a window of an external file (`Some(index)`).
    Raw(Option<usize>, u64),
    /// A typed field of the tensor message (absolute offset and length): decoded when read.
    Typed { message: (u64, usize), field: u32 },
    /// No elements.
    Empty,
}

#[derive(Clone, Debug)]
pub(super) struct Stored {
    pub data_type: i32,
    pub place: Place,
    /// The graph holding it (in errors: two initializers of one name).
    pub graph: std::sync::Arc<str>,
}

/// One initializer's row: its header decoded, its values' place found and checked.
pub(super) fn tensor(
    path: &Path,
    folder: Option<&Path>,
    message: &[u8],
    at: u64,
    graph: &std::sync::Arc<str>,
    external: &mut Vec<External>,
    options: &OpenOptions,
) -> Result<(TensorInfo, Stored), SourceError> {
    let header = TensorHeader::decode(message).map_err(|e| {
        SourceError::invalid(path)(format!(
            "the initializer at byte {at} of {graph}: {}",
            super::proto::plain(&e)
        ))
    })?;
    let name = header.name.clone().unwrap_or_default();
    let err = |reason: String| SourceError::Tensor {
        path: path.to_path_buf(),
        tensor: name.clone(),
        reason,
    };
    if name.is_empty() {
        return Err(SourceError::invalid(path)(format!(
            "the initializer at byte {at} of {graph} has no name"
        )));
    }
    if header.segment.is_some() {
        return Err(err(
            "a segment of a tensor (TensorProto.segment), which this crate does not read".into(),
        ));
    }
    let data_type = header.data_type.unwrap_or(0);
    let dtype = types::burn_dtype(data_type).ok_or_else(|| {
        err(format!(
            "stored as ONNX {}, which has no Burn dtype",
            types::name(data_type)
        ))
    })?;
    if header.dims.len() > 64 {
        return Err(err(format!("{} dimensions", header.dims.len())));
    }
    let mut elements = 1u64;
    let mut shape = Vec::with_capacity(header.dims.len());
    for &d in &header.dims {
        let d = u64::try_from(d)
            .map_err(|_| err(format!("a negative dimension in {:?}", header.dims)))?;
        elements = elements
            .checked_mul(d)
            .ok_or_else(|| err(format!("dimensions {:?} overflow", header.dims)))?;
        shape.push(
            usize::try_from(d)
                .map_err(|_| err("a dimension past this platform's memory".into()))?,
        );
    }
    let bytes = elements
        .checked_mul(types::size(dtype))
        .ok_or_else(|| err(format!("dimensions {:?} overflow", header.dims)))?;
    if bytes > options.limits.max_tensor_size {
        return Err(err(format!(
            "{bytes} bytes, over the tensor-size limit of {}",
            options.limits.max_tensor_size
        )));
    }
    let found = model::data_fields(message, at).map_err(&err)?;
    let place = match header.data_location.unwrap_or(0) {
        0 => {
            if !header.external_data.is_empty() {
                return Err(err(
                    "external_data entries on a tensor whose data_location is DEFAULT".into(),
                ));
            }
            inline_place(
                &found,
                data_type,
                &shape,
                elements,
                bytes,
                (at, message.len()),
            )
            .map_err(&err)?
        }
        1 => {
            if found.raw.is_some() || found.typed.is_some() {
                return Err(err("values in the model as well as in external data".into()));
            }
            external_place(folder, &header, bytes, external, options).map_err(&err)?
        }
        other => {
            return Err(err(format!(
                "data_location {other}, which ONNX does not define"
            )));
        }
    };
    let offset = match place {
        Place::Raw(_, start) => start,
        Place::Typed { message, .. } => message.0,
        Place::Empty => 0,
    };
    let info = TensorInfo::external(name.clone(), dtype, shape, offset, bytes);
    Ok((
        info,
        Stored {
            data_type,
            place,
            graph: graph.clone(),
        },
    ))
}

/// An external data file: its location as the model writes it, its path, its data, its
/// length when opened.
pub(super) struct External {
    pub location: String,
    pub path: PathBuf,
    pub data: Source,
    pub len: u64,
}

/// The place of a tensor's values held in the model: `raw_data` of the right length, or the
/// typed field of its type with one value per element (`message`: the tensor's place).
fn inline_place(
    found: &model::DataFields,
    data_type: i32,
    shape: &[usize],
    elements: u64,
    bytes: u64,
    message: (u64, usize),
) -> Result<Place, String> {
    Ok(match (found.raw, found.typed) {
        (Some(_), Some((field, _))) => {
            return Err(format!(
                "values in both raw_data and {}",
                types::field_name(field)
            ));
        }
        (Some((start, len)), None) => {
            if len != bytes {
                return Err(format!(
                    "raw_data holds {len} bytes, but {} of shape {shape:?} needs {bytes}",
                    types::name(data_type)
                ));
            }
            Place::Raw(None, start)
        }
        (None, Some((field, count))) => {
            if Some(field) != types::typed_field(data_type) {
                return Err(format!(
                    "{} values in {}, which does not hold that type",
                    types::name(data_type),
                    types::field_name(field)
                ));
            }
            if count != elements {
                return Err(format!(
                    "{} holds {count} values, but shape {shape:?} has {elements}",
                    types::field_name(field)
                ));
            }
            Place::Typed { message, field }
        }
        (None, None) if elements == 0 => Place::Empty,
        (None, None) => {
            return Err(format!(
                "no values (no raw_data, no typed field) for {elements} elements"
            ));
        }
    })
}

/// The place of an external tensor: its file (in the model's folder, opened once), offset
/// and length checked against the file.
fn external_place(
    folder: Option<&Path>,
    header: &TensorHeader,
    bytes: u64,
    external: &mut Vec<External>,
    options: &OpenOptions,
) -> Result<Place, String> {
    let Some(folder) = folder else {
        return Err(
            "external data, which a model in memory cannot reach (open the model by its path)"
                .into(),
        );
    };
    let (mut location, mut offset, mut length) = (None, 0u64, None);
    let mut seen: Vec<&str> = Vec::new();
    for entry in &header.external_data {
        let key = entry.key.as_deref().unwrap_or("");
        let value = entry.value.as_deref().unwrap_or("");
        // A key given twice: onnx's loader takes the last, another reader could take the
        // first.
        if seen.contains(&key) {
            return Err(format!("external_data key '{key}' given twice"));
        }
        seen.push(key);
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("external_data {key} '{value}' is not a number"))
        };
        match key {
            "location" => location = Some(value.to_string()),
            "offset" => offset = number()?,
            "length" => length = Some(number()?),
            // `basepath` is ignored by onnx's own loader too (the model's folder is the base).
            "checksum" | "basepath" => {}
            _ => {
                return Err(format!(
                    "external_data key '{key}', which ONNX does not define"
                ));
            }
        }
    }
    let location = location.ok_or("external data without a location")?;
    let index = if let Some(i) = external.iter().position(|e| e.location == location) {
        i
    } else {
        let file_path = inside(folder, &location)?;
        let (file, len) =
            crate::source::data::opened_within_limits(&file_path, None, &options.limits)
                .map_err(|e| format!("external data '{location}': {e}"))?;
        let data = crate::source::data::file_data(&file, options.verify)
            .map_err(|(action, e)| format!("external data '{location}': {action}: {e}"))?;
        external.push(External {
            location: location.clone(),
            path: file_path,
            data,
            len,
        });
        external.len() - 1
    };
    let file_len = external[index].len;
    if offset > file_len {
        return Err(format!(
            "external data '{location}' at offset {offset}, past its end ({file_len} bytes)"
        ));
    }
    let Some(length) = length else {
        // No length: the rest of the file, which must be the tensor's.
        let rest = file_len - offset;
        if rest != bytes {
            return Err(format!(
                "external data '{location}' has {rest} bytes from offset {offset} to its end \
                 and no length, but the tensor needs {bytes}"
            ));
        }
        return Ok(Place::Raw(Some(index), offset));
    };
    if offset.checked_add(length).is_none_or(|end| end > file_len) {
        return Err(format!(
            "external data '{location}' at offset {offset}, {length} bytes, past its end \
             ({file_len} bytes)"
        ));
    }
    if length != bytes {
        return Err(format!(
            "external data '{location}' says its length is {length} bytes, but the tensor needs \
             {bytes}"
        ));
    }
    Ok(Place::Raw(Some(index), offset))
}

/// `location` resolved in `folder`: relative, without `..`, and (links followed) still in the
/// folder.
fn inside(folder: &Path, location: &str) -> Result<PathBuf, String> {
    let relative = Path::new(location);
    if location.is_empty()
        || !relative
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "external data location '{location}' is not a plain path inside the model's folder"
        ));
    }
    let base = if folder.as_os_str().is_empty() {
        Path::new(".")
    } else {
        folder
    };
    let joined = base.join(relative);
    let real_base = std::fs::canonicalize(base).map_err(|e| format!("the model's folder: {e}"))?;
    let real =
        std::fs::canonicalize(&joined).map_err(|e| format!("external data '{location}': {e}"))?;
    if !real.starts_with(&real_base) {
        return Err(format!(
            "external data location '{location}' leads out of the model's folder (to {})",
            real.display()
        ));
    }
    Ok(joined)
}
