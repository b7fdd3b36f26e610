//! Saving a pack to object storage as a multipart upload whose parts follow the layout.

use std::collections::VecDeque;

use ::object_store::multipart::PartId;
use ::object_store::{MultipartId, ObjectStore, PutMode, PutOptions, PutPayload};
use tokio::task::JoinHandle;

use super::{ObjectLocation, RemoteError, block_on, runtime};
use crate::write::{WriteError, Writer};

/// The smallest part S3 takes (every part but the last).
const MIN_PART: usize = 5 << 20;

/// How [`upload`] sends a pack.
///
/// ```
/// use burnpack::interop::object_store::UploadOptions;
/// let options = UploadOptions::new().part_size(8 << 20).parts_in_flight(2).overwrite(false);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct UploadOptions {
    part_size: usize,
    parts_in_flight: usize,
    overwrite: bool,
}

impl Default for UploadOptions {
    fn default() -> Self {
        Self {
            part_size: 16 << 20,
            parts_in_flight: 4,
            overwrite: true,
        }
    }
}

impl UploadOptions {
    /// 16 MiB parts, 4 in flight, replacing an existing object.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes per part (at least 5 MiB, S3's minimum; smaller values are raised to it). A pack
    /// no larger than one part is sent with a single PUT.
    #[must_use]
    pub fn part_size(mut self, bytes: usize) -> Self {
        self.part_size = bytes.max(MIN_PART);
        self
    }

    /// Parts uploading at once (at least 1). Memory held is about (this + 2) parts.
    #[must_use]
    pub fn parts_in_flight(mut self, parts: usize) -> Self {
        self.parts_in_flight = parts.max(1);
        self
    }

    /// Whether an existing object is replaced (default) or the upload refused with
    /// [`RemoteError::AlreadyExists`]. A single-PUT pack is created conditionally (atomic); a
    /// multipart one is checked before it starts (a writer racing in between wins).
    #[must_use]
    pub fn overwrite(mut self, overwrite: bool) -> Self {
        self.overwrite = overwrite;
        self
    }
}

/// Uploads `writer`'s pack to `location`. Returns its size.
///
/// The pack is produced front to back (entries in parallel, as for files) into parts of
/// [`UploadOptions::part_size`]; each full part is uploaded while the next fills, with at
/// most [`UploadOptions::parts_in_flight`] in flight, so memory stays at a few parts whatever
/// the pack's size. The first part, which begins with the head (it carries the checksums,
/// known only at the end), is held and uploaded last. The object appears only when the upload
/// completes: a failing entry, a store error or a killed process leaves no object, and an
/// object already there unchanged (after an error the upload is aborted; after a kill the
/// store discards the parts by its own rules, e.g. an S3 lifecycle rule).
///
/// ```
/// use std::sync::Arc;
/// use burn::tensor::{Bytes, DType};
/// use burnpack::interop::object_store::{ObjectLocation, ObjectSource, UploadOptions, upload};
/// use burnpack::write::{Entry, Writer};
///
/// let location = ObjectLocation::new(Arc::new(object_store::memory::InMemory::new()), "big.bpk");
/// let big = Entry::resident("w", DType::U8, vec![12 << 20], Bytes::from_bytes_vec(vec![7; 12 << 20]));
/// let size = upload(Writer::new(vec![big]), &location, &UploadOptions::new().part_size(5 << 20)).unwrap();
/// assert_eq!(location.size().unwrap(), Some(size)); // three parts
/// assert_eq!(ObjectSource::open(&location).unwrap().layout().tensors()[0].len(), 12 << 20);
/// ```
///
/// # Errors
/// [`RemoteError::AlreadyExists`], [`RemoteError::Write`] (planning or a deferred entry),
/// [`RemoteError::Store`] for a refused request.
pub fn upload(
    writer: Writer,
    location: &ObjectLocation,
    options: &UploadOptions,
) -> Result<u64, RemoteError> {
    let write_error = |source| RemoteError::Write {
        url: location.url.clone(),
        source: Box::new(source),
    };
    let size = writer.size().map_err(write_error)?;
    if size <= options.part_size as u64 {
        // `into_bytes` builds the pack in a vector; handed to the request as it is.
        let payload = match writer
            .into_bytes()
            .map_err(write_error)?
            .try_into_vec::<u8>()
        {
            Ok(vec) => PutPayload::from(vec),
            Err(bytes) => PutPayload::from(bytes::Bytes::copy_from_slice(&bytes)),
        };
        let mode = if options.overwrite {
            PutMode::Overwrite
        } else {
            PutMode::Create
        };
        let put = location
            .store
            .put_opts(&location.path, payload, PutOptions::from(mode));
        return match block_on(put)? {
            Ok(_) => Ok(size),
            Err(::object_store::Error::AlreadyExists { .. }) => Err(RemoteError::AlreadyExists {
                url: location.url.clone(),
            }),
            Err(e) => Err(location.error("put", e)),
        };
    }
    if !options.overwrite && location.size()?.is_some() {
        return Err(RemoteError::AlreadyExists {
            url: location.url.clone(),
        });
    }
    let id = block_on(location.store.create_multipart(&location.path))?
        .map_err(|e| location.error("start a multipart upload of", e))?;
    let head_len = writer.head_len().map_err(write_error)?;
    let mut parts = Parts::new(location, id.clone(), options, head_len);
    let result = parts.send(writer);
    if result.is_err() {
        // Best effort: the store discards an upload that is never completed anyway.
        let _ = block_on(location.store.abort_multipart(&location.path, &id));
    }
    result
}

/// The parts of one multipart upload.
struct Parts<'a> {
    location: &'a ObjectLocation,
    id: MultipartId,
    part_size: usize,
    /// The first part's size: a part, or the head if that is longer (it must fit in it).
    first_size: usize,
    in_flight_max: usize,
    /// The part being filled.
    current: Vec<u8>,
    /// Part 0, held until the head is known.
    first: Option<Vec<u8>>,
    /// Parts after the first: index and upload, oldest first.
    in_flight: VecDeque<(usize, JoinHandle<::object_store::Result<PartId>>)>,
    done: Vec<Option<PartId>>,
    next_index: usize,
    /// The first store error (the writer is stopped with a placeholder).
    failure: Option<RemoteError>,
}

impl<'a> Parts<'a> {
    fn new(
        location: &'a ObjectLocation,
        id: MultipartId,
        options: &UploadOptions,
        head_len: usize,
    ) -> Self {
        Self {
            location,
            id,
            part_size: options.part_size,
            first_size: options.part_size.max(head_len),
            in_flight_max: options.parts_in_flight,
            current: Vec::with_capacity(options.part_size),
            first: None,
            in_flight: VecDeque::new(),
            done: Vec::new(),
            next_index: 0,
            failure: None,
        }
    }

    fn send(&mut self, writer: Writer) -> Result<u64, RemoteError> {
        let streamed = writer.stream(|mut bytes| {
            while !bytes.is_empty() {
                let target = if self.next_index == 0 {
                    self.first_size
                } else {
                    self.part_size
                };
                let room = target - self.current.len();
                let (now, later) = bytes.split_at(room.min(bytes.len()));
                self.current.extend_from_slice(now);
                bytes = later;
                if self.current.len() == target {
                    let full =
                        std::mem::replace(&mut self.current, Vec::with_capacity(self.part_size));
                    self.full(full).map_err(|e| {
                        self.failure.get_or_insert(e);
                        WriteError::Pipeline("the upload failed".into())
                    })?;
                }
            }
            Ok(())
        });
        let (head, total) = match (streamed, self.failure.take()) {
            (_, Some(failure)) => return Err(failure),
            (Err(e), None) => {
                return Err(RemoteError::Write {
                    url: self.location.url.clone(),
                    source: Box::new(e),
                });
            }
            (Ok(done), None) => done,
        };
        // The last part (any size), then the first with its head in place.
        if !self.current.is_empty() {
            let last = std::mem::take(&mut self.current);
            self.full(last)?;
        }
        let mut first = self.first.take().unwrap_or_default();
        first[..head.len()].copy_from_slice(&head);
        self.start(0, first)?;
        while let Some(oldest) = self.in_flight.pop_front() {
            self.finish(oldest)?;
        }
        let parts: Vec<PartId> = self.done.drain(..).flatten().collect();
        let complete = self
            .location
            .store
            .complete_multipart(&self.location.path, &self.id, parts);
        block_on(complete)?.map_err(|e| self.location.error("complete the upload of", e))?;
        Ok(total)
    }

    /// A full part: held if it is the first, uploaded otherwise.
    fn full(&mut self, part: Vec<u8>) -> Result<(), RemoteError> {
        let index = self.next_index;
        self.next_index += 1;
        if index == 0 {
            self.first = Some(part);
            return Ok(());
        }
        self.start(index, part)?;
        while self.in_flight.len() > self.in_flight_max {
            if let Some(oldest) = self.in_flight.pop_front() {
                self.finish(oldest)?;
            }
        }
        Ok(())
    }

    fn start(&mut self, index: usize, part: Vec<u8>) -> Result<(), RemoteError> {
        let store = self.location.store.clone();
        let path = self.location.path.clone();
        let id = self.id.clone();
        let upload = runtime()?.spawn(async move {
            store
                .put_part(&path, &id, index, PutPayload::from(part))
                .await
        });
        self.in_flight.push_back((index, upload));
        Ok(())
    }

    fn finish(
        &mut self,
        (index, upload): (usize, JoinHandle<::object_store::Result<PartId>>),
    ) -> Result<(), RemoteError> {
        let part = block_on(upload)?
            .map_err(|e| RemoteError::Runtime {
                message: format!("part upload task failed: {e}"),
            })?
            .map_err(|e| self.location.error("upload a part of", e))?;
        if self.done.len() <= index {
            self.done.resize(index + 1, None);
        }
        self.done[index] = Some(part);
        Ok(())
    }
}
