//! `format::PackSlice`: the `no_std` reader (pack bytes in memory, validated; tensors as
//! windows, checked against their checksums on request), run here on the host; `.ci/run`
//! type-checks it for a bare-metal target (`tools/nostd-check`).

use burn::tensor::{Bytes, DType};
use burnpack::format::{FormatError, Limits, PackSlice, TensorInfo};
use burnpack::{Entry, Writer};

fn pack() -> Vec<u8> {
    let w: Vec<f32> = (0..6).map(|i| i as f32 * 0.5).collect();
    Writer::new(vec![
        Entry::resident("w", DType::F32, vec![2, 3], Bytes::from_elems(w)),
        Entry::resident("b", DType::I64, vec![2], Bytes::from_elems(vec![7i64, -7])),
    ])
    .metadata("arch", "tiny")
    .into_bytes()
    .unwrap()
    .to_vec()
}

#[test]
fn a_pack_in_memory_hands_out_its_tensors_checked() {
    let bytes = pack();
    let slice = PackSlice::new(&bytes, &Limits::default()).unwrap();
    assert_eq!(slice.layout().metadata()["arch"], "tiny");
    let names: Vec<&str> = slice.tensors().iter().map(TensorInfo::name).collect();
    assert_eq!(names, ["b", "w"]);
    let w = slice.tensor("w").unwrap();
    let data = slice.checked(w).unwrap();
    let values: Vec<f32> = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(values, [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
    // A window of the bytes, not a copy.
    let range = bytes.as_ptr_range();
    assert!(range.contains(&data.as_ptr()));
}

#[test]
fn damage_is_an_error_naming_the_tensor() {
    let bytes = pack();
    let slice = PackSlice::new(&bytes, &Limits::default()).unwrap();
    let at = slice.tensor("b").unwrap().offset() as usize;
    let mut flipped = bytes.clone();
    flipped[at] ^= 4;
    let slice = PackSlice::new(&flipped, &Limits::default()).unwrap();
    let b = slice.tensor("b").unwrap();
    // Unchecked, the window is handed out as it is; checked, the flip is found.
    assert!(slice.data(b).is_ok());
    let err = slice.checked(b).unwrap_err();
    assert!(
        matches!(err, FormatError::TensorChecksum { ref tensor, .. } if tensor == "b"),
        "{err}"
    );
    assert!(err.to_string().contains("tensor 'b'"));
    // A tensor that is not this pack's: refused, not read out of bounds.
    let foreign = TensorInfo::external("x".into(), DType::F32, vec![4], bytes.len() as u64, 16);
    assert!(matches!(
        slice.data(&foreign),
        Err(FormatError::PastEnd { .. })
    ));
    // Cut short, or with a damaged header: refused when made.
    assert!(PackSlice::new(&bytes[..bytes.len() - 1], &Limits::default()).is_err());
    let mut header = bytes.clone();
    header[0] ^= 1;
    assert!(PackSlice::new(&header, &Limits::default()).is_err());
    // Within the limits only.
    let tight = Limits::default().with_max_tensor_count(1);
    assert!(matches!(
        PackSlice::new(&bytes, &tight),
        Err(FormatError::LimitExceeded { .. })
    ));
}
