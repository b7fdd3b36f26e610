//! NumPy's `.npy` arrays and `.npz` archives as a [`TensorSource`](crate::source::TensorSource)
//! (feature `numpy`): what JAX/Flax, scikit-learn and research code hand over as weights
//! (`np.save`, `np.savez`, `np.savez_compressed`).
//!
//! A `.npy` file is a magic (`\x93NUMPY`), a version (1.0, 2.0 or 3.0), a header (a Python
//! dict literal: `descr`, `fortran_order`, `shape`) and the array's bytes. The header is parsed
//! strictly by hand, never evaluated: exactly those three keys, each once, literals only; its
//! length is checked against `max_metadata_size` before it is read, the array's length (from
//! the shape, overflow checked) against the file and the [`Limits`](crate::format::Limits).
//! Every dtype with a Burn equivalent is read in either byte order: `f2`, `f4`, `f8`,
//! `i1`-`i8`, `u1`-`u8` and `b1` (bool); object arrays (pickles), complex numbers, strings,
//! records and dates are refused by name. A `b1` array's bytes must be 0 or 1 (refused when
//! read otherwise).
//!
//! A `.npz` file is a zip archive of `<name>.npy` members; each is a tensor named `<name>`.
//! The archive is held to the rules the `PyTorch` reader keeps (no two members of one name, no
//! encryption, local headers agreeing with the central directory, offsets as the end record
//! writes them), read with the `zip` crate as that reader does (its zip checks live in the
//! `PyTorch` folder and are not part of the source core, so they are restated here, not
//! shared). Stored members (`np.savez`) are windows of the mapping where aligned, their CRC-32
//! checked by verified loads and `bpk verify`; deflated members (`np.savez_compressed`) are
//! inflated when the file is opened (in parallel), within `max_inflation` (all deflated members
//! together: what they inflate to against what they take in the file) and the tensor-size
//! limit (checked from the zip's sizes before anything is allocated), each into exactly the
//! bytes its header states, and checked against its CRC-32 there: a damaged member is an error
//! naming it when the file is opened.
//!
//! Little-endian C-order arrays are zero-copy; a big-endian array is swapped and a
//! Fortran-order array laid out in C order, each into memory of its own, reported by
//! [`copy_reason`](crate::source::TensorSource::copy_reason).
//!
//! ```no_run
//! use burnpack::interop::numpy::NumpySource;
//! use burnpack::source::TensorSource;
//! let source = NumpySource::open("weights.npz")?;
//! for info in source.tensors() {
//!     println!("{} {:?} {:?} {:?}", info.name(), source.descr(info), info.dtype(), info.shape());
//! }
//! # Ok::<(), burnpack::source::SourceError>(())
//! ```

mod container;
mod header;
mod inflate;
mod layout;
mod open;
mod source;
/// `write_npy`, public as `interop::write_npy` (one path, naming no format).
pub(super) mod write;
mod zip;

pub(crate) use container::CONTAINER;
pub use source::NumpySource;
