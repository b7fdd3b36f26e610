//! Reading a pack from object storage: header and metadata by ranged GETs, tensors fetched in
//! parallel, coalesced, checked as they arrive.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use ::object_store::{GetOptions, GetRange, ObjectStoreExt};
use burn::tensor::{AllocationProperty, Bytes};
use futures::{StreamExt, TryStreamExt};

use super::{ObjectLocation, RemoteError, block_on};
use crate::format::{Layout, OpenError, TensorInfo};
use crate::interop::AsOpenOptions;
use crate::source::data::aligned_words;
use crate::source::{OpenOptions, PackSource, ReadError, TensorSource};

/// Neighbouring tensors whose gap is at most this many bytes are fetched with one request
/// (the gap is fetched too: cheaper than a request's round trip).
const COALESCE_GAP: u64 = 1 << 20;
/// Largest request a coalesced range grows to; a tensor larger than this is one request.
const MAX_REQUEST: u64 = 64 << 20;
/// Requests in flight at once (so at most this many times [`MAX_REQUEST`] bytes arriving).
const CONCURRENCY: usize = 8;

/// A pack on object storage as a [`TensorSource`]: its layout is read with two ranged GETs
/// (the fixed header, then exactly the metadata) and validated as for files; tensors are
/// fetched on demand, or all at once in parallel when the module loader announces what it
/// will read ([`TensorSource::prefetch`]). Every fetched tensor is checked against the pack's
/// checksum before it is handed out (a damaged object is a [`ReadError::Checksum`] naming the
/// tensor). Tensors are held in 8-byte aligned memory that parameters use as is on flex and
/// ndarray (no copy after the network's).
///
/// ```
/// use std::sync::Arc;
/// use burn::tensor::{Bytes, DType};
/// use burnpack::interop::object_store::{ObjectLocation, ObjectSource, UploadOptions, upload};
/// use burnpack::source::TensorSource;
/// use burnpack::write::{Entry, Writer};
///
/// let location = ObjectLocation::new(Arc::new(object_store::memory::InMemory::new()), "m.bpk");
/// let writer = Writer::new(vec![Entry::resident("w", DType::U8, vec![3], Bytes::from_bytes_vec(vec![1, 2, 3]))]);
/// upload(writer, &location, &UploadOptions::new()).unwrap();
///
/// let source = ObjectSource::open(&location).unwrap();
/// assert_eq!(source.requests(), 2); // the header, then the metadata
/// let info = &source.tensors()[0];
/// assert_eq!(&source.read(info).unwrap()[..], &[1, 2, 3]);
/// ```
pub struct ObjectSource {
    fetcher: Fetcher,
    layout: Layout,
    /// Tensors fetched ahead, by offset.
    fetched: Mutex<HashMap<u64, Bytes>>,
}

/// Ranged GETs of one object, counted.
struct Fetcher {
    location: ObjectLocation,
    fetched_bytes: AtomicU64,
    requests: AtomicU64,
    /// The object's version (`ETag`) as first read: every later read asks for that version, so
    /// an object replaced meanwhile is an error, never a mix of two packs.
    version: Mutex<Option<String>>,
}

impl ObjectSource {
    /// Opens the pack at `location` with Burn's default limits.
    ///
    /// # Errors
    /// See [`open_with`](Self::open_with).
    pub fn open(location: &ObjectLocation) -> Result<Self, RemoteError> {
        Self::open_with(location, &OpenOptions::new())
    }

    /// Opens the pack at `location` with options (their limits): two ranged GETs, never the
    /// whole object. The shape of every source's `open_with`; a `&Limits` is still taken for
    /// one release (deprecated: pass `&OpenOptions::new().limits(limits)`). (Bytes of a pack
    /// fetched whole are [`Reader::from_bytes`](crate::read::Reader::from_bytes)'s.)
    ///
    /// # Errors
    /// [`RemoteError::Store`] when the object cannot be read (missing, no access),
    /// [`RemoteError::Invalid`] when it is not a valid pack within the limits.
    pub fn open_with(
        location: &ObjectLocation,
        options: &(impl AsOpenOptions + ?Sized),
    ) -> Result<Self, RemoteError> {
        let options = options.open_options();
        let limits = &options.limits;
        let fetcher = Fetcher {
            location: location.clone(),
            fetched_bytes: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            version: Mutex::new(None),
        };
        let invalid = |source| RemoteError::Invalid {
            url: location.url.clone(),
            source: Box::new(source),
        };
        // Two ranged GETs: the header, then (validated against the limits first) the metadata.
        let read = |range: std::ops::Range<u64>| {
            let what = if range.start == 0 {
                "read the header of"
            } else {
                "read the metadata of"
            };
            let (bytes, size) =
                block_on(fetcher.get(range))?.map_err(|e| location.error(what, e))?;
            // No copy when the body arrived into one buffer of its own.
            let owned = bytes.try_into_vec::<u8>().unwrap_or_else(|b| b.to_vec());
            Ok::<_, RemoteError>((std::borrow::Cow::Owned(owned), size))
        };
        let layout = match Layout::read(limits, read) {
            Ok(layout) => layout,
            Err(OpenError::Read(e)) => return Err(e),
            // Header and metadata from two versions (a server that replaces non-atomically).
            Err(OpenError::Invalid(_)) if block_on(fetcher.changed())? => {
                return Err(location.error("read the metadata of", replaced()));
            }
            Err(OpenError::Invalid(e)) => return Err(invalid(e)),
        };
        Ok(Self {
            fetcher,
            layout,
            fetched: Mutex::new(HashMap::new()),
        })
    }

    /// The validated layout (names, dtypes, shapes, offsets, metadata).
    #[must_use]
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Where the pack is.
    #[must_use]
    pub fn location(&self) -> &ObjectLocation {
        &self.fetcher.location
    }

    /// Bytes fetched from the store so far (header and metadata included).
    #[must_use]
    pub fn fetched_bytes(&self) -> u64 {
        self.fetcher.fetched_bytes.load(Ordering::Relaxed)
    }

    /// Requests made to the store so far.
    #[must_use]
    pub fn requests(&self) -> u64 {
        self.fetcher.requests.load(Ordering::Relaxed)
    }

    fn fetch_error(&self, e: ::object_store::Error) -> ReadError {
        ReadError::Io {
            file: self.fetcher.location.url.clone(),
            action: "fetch tensor data",
            source: std::io::Error::other(e),
        }
    }

    /// Fetches one coalesced group: one request, then each tensor's window, checked.
    async fn fetch_group(&self, group: Vec<&TensorInfo>) -> Result<Vec<(u64, Bytes)>, ReadError> {
        let start = group[0].offset();
        let end = group
            .iter()
            .map(|t| t.offset() + t.len())
            .max()
            .unwrap_or(start);
        let (all, _) = self
            .fetcher
            .get(start..end)
            .await
            .map_err(|e| self.fetch_error(e))?;
        let mut out = Vec::with_capacity(group.len());
        for info in group {
            let at = (info.offset() - start) as usize;
            let window = all.view(at, at + info.len() as usize).map_err(|e| {
                self.fetch_error(::object_store::Error::Generic {
                    store: "burnpack",
                    source: format!("short range: {e:?}").into(),
                })
            })?;
            if let Err(damaged) = self.check(info, &window) {
                // A server that replaces objects non-atomically can answer with the old
                // version's headers and the new one's bytes: if the object changed since it
                // was opened, that is what happened, not damage.
                return Err(if self.fetcher.changed().await {
                    self.fetch_error(replaced())
                } else {
                    damaged
                });
            }
            out.push((info.offset(), window));
        }
        Ok(out)
    }
}

impl Fetcher {
    /// Whether the object's version (`ETag`) is no longer the one first read (`false` when
    /// that cannot be told).
    async fn changed(&self) -> bool {
        let pinned = self
            .version
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        match (pinned, self.location.store.head(&self.location.path).await) {
            (Some(pinned), Ok(meta)) => meta.e_tag.is_some_and(|tag| tag != pinned),
            (Some(_), Err(::object_store::Error::NotFound { .. })) => true,
            _ => false,
        }
    }

    /// `range` of the object into new aligned memory, with the object's size. A range that
    /// runs past the end brings what there is.
    async fn get(&self, range: Range<u64>) -> Result<(Bytes, u64), ::object_store::Error> {
        let version = self
            .version
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let options = GetOptions {
            range: Some(GetRange::Bounded(range.clone())),
            if_match: version.clone(),
            ..GetOptions::default()
        };
        self.requests.fetch_add(1, Ordering::Relaxed);
        let result = self
            .location
            .store
            .get_opts(&self.location.path, options)
            .await
            .map_err(|e| match e {
                ::object_store::Error::Precondition { .. } => replaced(),
                other => other,
            })?;
        match &version {
            None => self
                .version
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone_from(&result.meta.e_tag),
            // A server that ignores `If-Match` still names the version it answered with.
            Some(pinned) if result.meta.e_tag.as_ref().is_some_and(|tag| tag != pinned) => {
                return Err(replaced());
            }
            Some(_) => {}
        }
        let size = result.meta.size;
        let got = result.range.end.saturating_sub(result.range.start);
        let expected = range.end - range.start;
        if result.range.start != range.start || got > expected {
            return Err(::object_store::Error::Generic {
                store: "burnpack",
                source: format!(
                    "asked for bytes {range:?}, the store answered {:?}",
                    result.range
                )
                .into(),
            });
        }
        // `got` is at most the requested length, which the validated layout bounds.
        let len = usize::try_from(got).map_err(|e| ::object_store::Error::Generic {
            store: "burnpack",
            source: Box::new(e),
        })?;
        // Streamed straight into the aligned buffer the tensors will use: one copy, from the
        // network's buffers, and never a second buffer of the whole range.
        let mut words = vec![0u64; len.div_ceil(8)];
        let mut filled = 0;
        let mut stream = result.into_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            let out = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..len];
            let Some(target) = out.get_mut(filled..filled + chunk.len()) else {
                return Err(::object_store::Error::Generic {
                    store: "burnpack",
                    source: format!("the store sent more than the {len} bytes it announced").into(),
                });
            };
            target.copy_from_slice(&chunk);
            filled += chunk.len();
        }
        if filled != len {
            return Err(::object_store::Error::Generic {
                store: "burnpack",
                source: format!("the store sent {filled} of the {len} bytes it announced").into(),
            });
        }
        self.fetched_bytes.fetch_add(got, Ordering::Relaxed);
        Ok((aligned_words(words, len, AllocationProperty::Other), size))
    }
}

impl PackSource for ObjectSource {
    fn layout(&self) -> &Layout {
        &self.layout
    }
}

/// The error of a read that found another version of the object than the one opened.
fn replaced() -> ::object_store::Error {
    ::object_store::Error::Generic {
        store: "burnpack",
        source: "the object was replaced while it was being read (its ETag changed): open it \
                 again"
            .into(),
    }
}

impl TensorSource for ObjectSource {
    fn file(&self) -> &str {
        &self.fetcher.location.url
    }

    fn tensors(&self) -> &[TensorInfo] {
        self.layout.tensors()
    }

    fn read(&self, info: &TensorInfo) -> Result<Bytes, ReadError> {
        if crate::format::owned(self.layout.tensors(), info).is_none() {
            return Err(ReadError::NotMine {
                file: self.fetcher.location.url.clone(),
                tensor: info.name().to_string(),
            });
        }
        let ahead = self
            .fetched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&info.offset());
        if let Some(bytes) = ahead {
            return Ok(bytes);
        }
        if info.is_empty() {
            return Ok(Bytes::from_bytes_vec(Vec::new()));
        }
        let fetched = block_on(self.fetch_group(vec![info])).map_err(|e| ReadError::Io {
            file: self.fetcher.location.url.clone(),
            action: "fetch tensor data",
            source: std::io::Error::other(e),
        })??;
        Ok(fetched
            .into_iter()
            .next()
            .map_or_else(|| Bytes::from_bytes_vec(Vec::new()), |(_, b)| b))
    }

    /// One ranged request for exactly these bytes (a window of the tensor when a prefetch
    /// already brought it). Not checked against the tensor's checksum, which covers the whole.
    fn read_range(&self, info: &TensorInfo, range: Range<u64>) -> Result<Bytes, ReadError> {
        let url = &self.fetcher.location.url;
        if crate::format::owned(self.layout.tensors(), info).is_none() {
            return Err(ReadError::NotMine {
                file: url.clone(),
                tensor: info.name().to_string(),
            });
        }
        crate::source::check_range(url, info, &range)?;
        let ahead = self
            .fetched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&info.offset())
            .cloned();
        if let Some(whole) = ahead {
            return crate::source::window(url, info, whole, range);
        }
        if range.is_empty() {
            return Ok(Bytes::from_bytes_vec(Vec::new()));
        }
        let (start, end) = (info.offset() + range.start, info.offset() + range.end);
        let (bytes, _) = block_on(self.fetcher.get(start..end))
            .map_err(|e| ReadError::Io {
                file: url.clone(),
                action: "fetch tensor data",
                source: std::io::Error::other(e),
            })?
            .map_err(|e| self.fetch_error(e))?;
        if bytes.len() as u64 != end - start {
            return Err(self.fetch_error(::object_store::Error::Generic {
                store: "burnpack",
                source: format!(
                    "tensor '{}': asked for {} bytes, the store answered {}",
                    info.name(),
                    end - start,
                    bytes.len()
                )
                .into(),
            }));
        }
        Ok(bytes)
    }

    fn namespace(&self) -> Option<&str> {
        self.layout.namespace()
    }

    fn wants_prefetch(&self) -> bool {
        true
    }

    fn prefetch(&self, wanted: &[&TensorInfo]) -> Result<(), ReadError> {
        // Tensors fetched by an earlier prefetch and not read yet are not fetched again.
        let mut infos: Vec<&TensorInfo> = {
            let ahead = self
                .fetched
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            wanted
                .iter()
                .copied()
                .filter(|t| !t.is_empty() && !ahead.contains_key(&t.offset()))
                .collect()
        };
        infos.sort_by_key(|t| t.offset());
        infos.dedup_by_key(|t| t.offset());
        let groups = coalesce(infos);
        let fetched = block_on(
            futures::stream::iter(groups)
                .map(|group| self.fetch_group(group))
                .buffer_unordered(CONCURRENCY)
                .try_collect::<Vec<_>>(),
        )
        .map_err(|e| ReadError::Io {
            file: self.fetcher.location.url.clone(),
            action: "fetch tensor data",
            source: std::io::Error::other(e),
        })??;
        let mut ahead = self
            .fetched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ahead.extend(fetched.into_iter().flatten());
        Ok(())
    }
}

/// Tensors sorted by offset, grouped into requests: a tensor joins the previous group when the
/// gap to it is at most [`COALESCE_GAP`] and the group stays within [`MAX_REQUEST`].
fn coalesce(infos: Vec<&TensorInfo>) -> Vec<Vec<&TensorInfo>> {
    let mut groups: Vec<Vec<&TensorInfo>> = Vec::new();
    let mut span = 0..0;
    for info in infos {
        let end = info.offset() + info.len();
        let joins = !groups.is_empty()
            && info.offset().saturating_sub(span.end) <= COALESCE_GAP
            && end - span.start <= MAX_REQUEST;
        if joins {
            span.end = span.end.max(end);
            if let Some(group) = groups.last_mut() {
                group.push(info);
            }
        } else {
            span = info.offset()..end;
            groups.push(vec![info]);
        }
    }
    groups
}

impl std::fmt::Debug for ObjectSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectSource")
            .field("location", &self.fetcher.location)
            .field("tensors", &self.layout.tensors().len())
            .finish_non_exhaustive()
    }
}

impl crate::source::DescribedSource for ObjectSource {
    /// A pack's description, and what opening it cost (header and metadata, no tensor).
    fn describe(&self) -> crate::source::Description {
        let mut about = crate::read::describe_pack(&self.layout);
        let (bytes, requests) = (self.fetched_bytes(), self.requests());
        about.lines.push(format!(
            "fetched: {bytes} bytes in {requests} requests (header and metadata, no tensor data)"
        ));
        about.fields.push(("fetched_bytes", bytes.into()));
        about.fields.push(("requests", requests.into()));
        about
    }

    fn as_pack(&self) -> Option<&dyn crate::source::PackSource> {
        Some(self)
    }
}
