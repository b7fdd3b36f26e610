//! Every file Burn 0.22's reader accepts loads here, except the deliberate differences the
//! README lists ("What verification refuses"), each shown here: Burn's reader accepts the file,
//! this crate refuses it, with the reason.

mod common;

use burn::tensor::{Bytes, DType};
use burnpack::format::{FormatError, Header, data_start};
use burnpack::read::Reader;
use burnpack::source::ReadError;
use common::{Spec, burns, ours_checked, with_metadata_edited};

fn specs() -> Vec<Spec> {
    vec![
        Spec::new("a", DType::F32, &[3, 5], Some(7)),
        Spec::new("b", DType::F16, &[9], None),
        Spec::new("c", DType::U8, &[4], Some(8)),
    ]
}

/// The tensors Burn's reader reads from `file`: `(name, bytes)`, sorted by name.
fn burn_reads(file: &[u8]) -> Vec<(String, Vec<u8>)> {
    burn_pack::Reader::from_bytes(Bytes::from_bytes_vec(file.to_vec()))
        .unwrap_or_else(|e| panic!("Burn refuses the file: {e:?}"))
        .into_tensors()
        .unwrap()
        .into_iter()
        .map(|t| (t.name.clone(), t.to_bytes().unwrap().to_vec()))
        .collect()
}

/// The tensors this crate reads from `file`, the same way.
fn we_read(file: &[u8]) -> Result<Vec<(String, Vec<u8>)>, ReadError> {
    let reader = Reader::from_bytes(Bytes::from_bytes_vec(file.to_vec()))?;
    Ok(reader
        .tensors()
        .iter()
        .map(|t| (t.name().to_string(), reader.read(t).unwrap().to_vec()))
        .collect())
}

/// The top-level map of Burn's metadata (one entry, `tensors`), made indefinite-length.
fn indefinite(mut metadata: Vec<u8>) -> Vec<u8> {
    assert_eq!(metadata[0], 0xA1, "Burn writes a definite map of one entry");
    metadata[0] = 0xBF;
    metadata.push(0xFF);
    metadata
}

#[test]
fn files_burn_accepts_with_lenient_metadata_load_here() {
    let burn = burns(&specs());
    let expected = burn_reads(&burn);
    assert_eq!(expected.len(), 3);
    // Indefinite-length CBOR maps.
    let file = with_metadata_edited(&burn, indefinite);
    assert_eq!(burn_reads(&file), expected);
    assert_eq!(we_read(&file).unwrap(), expected, "indefinite-length map");
    // Padding after the map, inside metadata_size: loaded, and named by verification.
    for padding in [1, 7, 300] {
        let file = with_metadata_edited(&burn, |mut m| {
            m.extend(std::iter::repeat_n(0, padding));
            m
        });
        assert_eq!(burn_reads(&file), expected);
        assert_eq!(
            we_read(&file).unwrap(),
            expected,
            "{padding} bytes of padding"
        );
        let reader = Reader::from_bytes(Bytes::from_bytes_vec(file)).unwrap();
        assert_eq!(reader.layout().extras().trailing, padding);
        assert_eq!(reader.verify_all().unwrap(), 0, "a warning, not an error");
        let warnings = reader.layout().check_extras().unwrap();
        assert!(
            warnings[0].contains(&format!("{padding} bytes after")),
            "{warnings:?}"
        );
    }
    // A map that ends early (a damaged count in a file without checksums): the tensors the
    // map holds, as Burn reads them.
    let file = with_metadata_edited(&burn, |mut m| {
        let at = 1 + 1 + b"tensors".len();
        assert_eq!(m[at], 0xA3, "three tensors");
        m[at] = 0xA2;
        m
    });
    let short = burn_reads(&file);
    assert_eq!(short.len(), 2);
    assert_eq!(we_read(&file).unwrap(), short, "a map that ends early");
    // An unknown top-level key in another writer's file: loaded, a warning.
    let file = with_metadata_edited(&burn, |mut m| {
        m[0] = 0xA2;
        m.extend_from_slice(b"\x66future\x82\x01\x02");
        m
    });
    assert_eq!(burn_reads(&file), expected);
    assert_eq!(we_read(&file).unwrap(), expected, "unknown key");
    let reader = Reader::from_bytes(Bytes::from_bytes_vec(file)).unwrap();
    assert_eq!(reader.layout().extras().unknown_keys, ["future"]);
    reader.verify_all().unwrap();
    let warnings = reader.layout().check_extras().unwrap();
    assert!(warnings[0].contains("'future'"), "{warnings:?}");
}

#[test]
fn the_same_in_a_file_of_this_crate_is_refused() {
    let ours = ours_checked(&specs());
    // Bytes after the map of a file with checksums: its writer ends the metadata with them.
    let file = with_metadata_edited(&ours, |mut m| {
        m.push(0);
        m
    });
    let err = we_read(&file).unwrap_err();
    assert!(
        err.to_string()
            .contains("follow the end of the metadata map"),
        "{err}"
    );
    // An unknown key in a file whose producer is this crate: a damaged key.
    let mut flipped = ours.clone();
    let at = flipped.windows(9).position(|w| w == b"checksums").unwrap();
    flipped[at + 8] ^= 1;
    let reader = Reader::from_bytes(Bytes::from_bytes_vec(flipped)).unwrap();
    let err = reader.verify_all().unwrap_err();
    assert!(
        matches!(&err, ReadError::Invalid { source: FormatError::UnknownKey { key, .. }, .. } if key == "checksumr"),
        "{err}"
    );
}

/// The deliberate differences: files Burn's reader accepts and this crate refuses.
#[test]
fn deliberate_differences_from_burns_reader() {
    let burn = burns(&specs());
    let refused =
        |label: &str, file: Vec<u8>, check: &dyn Fn(&FormatError) -> bool| match we_read(&file) {
            Err(ReadError::Invalid { source, .. }) => {
                assert!(check(&source), "{label}: {source:?}");
            }
            other => panic!("{label}: expected a refusal, got {other:?}"),
        };
    // 1. A tensor name twice: Burn keeps one of them silently.
    let file = with_metadata_edited(&burn, |mut m| {
        let at = m.windows(2).position(|w| w == b"\x61b").unwrap();
        m[at + 1] = b'a';
        m
    });
    assert_eq!(burn_reads(&file).len(), 2, "Burn drops one of the two");
    refused("duplicate", file, &|e| {
        matches!(e, FormatError::DuplicateKey { .. })
    });
    // 2. Overlapping tensors: two names for the same bytes, or a damaged offset.
    let file = {
        let mut specs = specs();
        specs.truncate(2);
        let mut m = burnpack::format::Metadata::default();
        for (i, s) in specs.iter().enumerate() {
            m.tensors.push((
                s.name.clone(),
                burnpack::format::Descriptor {
                    dtype: DType::U8,
                    shape: vec![8],
                    data_offsets: (i as u64 * 4, i as u64 * 4 + 8),
                    param_id: None,
                },
            ));
        }
        let cbor = m.encode().unwrap();
        let mut out = Header::new(cbor.len() as u32).to_bytes().to_vec();
        out.extend_from_slice(&cbor);
        out.resize(data_start(cbor.len() as u32) as usize + 12, 1);
        out
    };
    assert_eq!(burn_reads(&file).len(), 2);
    refused("overlap", file, &|e| {
        matches!(e, FormatError::Overlap { .. })
    });
    // 3. Format version 0, which no writer produced (a damaged version field).
    let mut file = burn.clone();
    file[4] = 0;
    assert_eq!(burn_reads(&file).len(), 3);
    refused("version 0", file, &|e| {
        matches!(e, FormatError::UnsupportedVersion { found: 0 })
    });
    // 4. A header and metadata that do not match their checksum: Burn ignores checksums.
    let mut file = ours_checked(&specs());
    let at = file.windows(2).position(|w| w == b"\x61b").unwrap();
    file[at + 1] = b'd';
    assert_eq!(burn_reads(&file).len(), 3);
    refused("checksum", file, &|e| {
        matches!(e, FormatError::MetadataChecksum { .. })
    });
}
