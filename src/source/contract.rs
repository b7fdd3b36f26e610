//! The contract every [`TensorSource`] keeps, as a check: for this crate's tests and fuzz
//! targets, and for the tests of a source of your own.

use super::{ReadError, TensorSource};
use crate::format::TensorInfo;

/// Panics, saying which rule, unless `source` keeps the contract of a [`TensorSource`]:
///
/// - its tensors are sorted by name and the names are unique, and
///   [`tensor(name)`](TensorSource::tensor) finds each one;
/// - every tensor reads with exactly its declared length (or is refused by name as
///   [`ReadError::Unsupported`], a storage the source lists but does not read or values it
///   cannot hand on, or as [`ReadError::Checksum`], bytes the read found damaged), and
///   [`check`](TensorSource::check)
///   of its bytes says true wherever the tensor has a checksum, or fails naming it (damaged
///   bytes);
/// - a [`TensorInfo`] that is not one of its own (another source's, a changed copy) is
///   answered with an error, never read as whatever its offset says;
/// - [`copy_reason`](TensorSource::copy_reason) is honest: a tensor it calls a view
///   (`None`) is a window of the source's memory, handed out at the same address each time.
///
/// ```
/// use burn::tensor::{Bytes, DType};
/// use burnpack::read::Reader;
/// use burnpack::source::assert_source_contract;
/// use burnpack::write::{Entry, Writer};
/// let pack = Writer::new(vec![
///     Entry::resident("b", DType::F32, vec![2], Bytes::from_elems(vec![1.0f32, 2.0])),
///     Entry::resident("a", DType::U8, vec![3], Bytes::from_bytes_vec(vec![1, 2, 3])),
/// ])
/// .into_bytes()
/// .unwrap();
/// assert_source_contract(&Reader::from_bytes(pack).unwrap());
/// ```
///
/// # Panics
/// When a rule is broken, naming the source, the tensor and the rule.
pub fn assert_source_contract(source: &dyn TensorSource) {
    let file = source.file();
    let tensors = source.tensors();
    for pair in tensors.windows(2) {
        assert!(
            pair[0].name() < pair[1].name(),
            "{file}: tensors not sorted by unique names: '{}' then '{}'",
            pair[0].name(),
            pair[1].name()
        );
    }
    for info in tensors {
        let name = info.name();
        assert_eq!(
            source.tensor(name),
            Some(info),
            "{file}: tensor('{name}') does not find it"
        );
        let bytes = match source.read(info) {
            Ok(bytes) => bytes,
            // Listed, and refused by name: a storage the source says it does not read.
            Err(ReadError::Unsupported { tensor, .. }) if tensor == name => {
                assert_not_mine(source, info);
                continue;
            }
            // Damaged bytes found by the read itself (a bool byte that is no bool, whose
            // checksum the source asks first), naming the tensor.
            Err(ReadError::Checksum { tensor, .. }) if tensor == name => {
                assert_not_mine(source, info);
                continue;
            }
            Err(e) => panic!("{file}: tensor '{name}' of the table cannot be read: {e}"),
        };
        assert_eq!(
            bytes.len() as u64,
            info.len(),
            "{file}: tensor '{name}' reads {} bytes, declares {}",
            bytes.len(),
            info.len()
        );
        match source.check(info, &bytes) {
            Ok(checked) => assert!(
                checked || info.checksum().is_none(),
                "{file}: tensor '{name}' has a checksum that check does not check"
            ),
            // Damaged bytes (a hostile file) fail their check naming the tensor.
            Err(ReadError::Checksum { tensor, .. } | ReadError::Reference { tensor, .. })
                if tensor == name => {}
            Err(e) => panic!("{file}: tensor '{name}': its check fails without naming it: {e}"),
        }
        if source.copy_reason(info).is_none() && !bytes.is_empty() {
            let again = source.read(info).expect("read once, read twice");
            assert_eq!(
                bytes.as_ptr(),
                again.as_ptr(),
                "{file}: tensor '{name}' is said to be a view but is a new copy each read"
            );
        }
        assert_not_mine(source, info);
    }
    let stranger = TensorInfo::external(
        "\u{1}not a tensor of this source".into(),
        burn::tensor::DType::U8,
        vec![1],
        0,
        1,
    );
    assert!(
        source.read(&stranger).is_err(),
        "{file}: a tensor of no such name was read"
    );
}

/// A changed copy of `info` (one byte further, one byte longer) must be refused.
fn assert_not_mine(source: &dyn TensorSource, info: &TensorInfo) {
    let changed = TensorInfo::external(
        info.name().to_string(),
        burn::tensor::DType::U8,
        vec![
            usize::try_from(info.len())
                .unwrap_or(usize::MAX)
                .saturating_add(1),
        ],
        info.offset().saturating_add(1),
        info.len().saturating_add(1),
    );
    match source.read(&changed) {
        Err(ReadError::NotMine { .. } | ReadError::NotFound { .. }) => {}
        Err(e) => panic!(
            "{}: a changed copy of tensor '{}' is refused with another error than \"not mine\": {e}",
            source.file(),
            info.name()
        ),
        Ok(_) => panic!(
            "{}: a changed copy of tensor '{}' was read",
            source.file(),
            info.name()
        ),
    }
}
