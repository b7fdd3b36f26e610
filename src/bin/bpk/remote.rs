//! Packs on object storage (feature `object-store`), or the usage error that says how to get them.

/// Packs on object storage (feature `object-store`).
#[cfg(feature = "object-store")]
mod enabled {
    use std::path::Path;

    use burn::tensor::Bytes;
    use burnpack::interop::object_store::{ObjectLocation, ObjectSource, RemoteError};
    use burnpack::read::{ReadError, Reader};

    use crate::Failure;

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
mod disabled {
    use std::path::Path;

    use crate::Failure;

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

#[cfg(not(feature = "object-store"))]
pub(crate) use disabled::*;
#[cfg(feature = "object-store")]
pub(crate) use enabled::*;
