//! Replays the committed fuzz corpus (`fuzz/corpus/reader`) and a few thousand seeded
//! mutations of each file through the same checks as the fuzz target, under a time bound.
//! Set `BURNPACK_WRITE_CORPUS=1` to regenerate the corpus files.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use burn::tensor::{Bytes, DType};
use burnpack::read::Reader;
use common::{Spec, every_dtype, ours, ours_checked, pattern};

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/reader")
}

/// The fuzz target's body: never panics on any input.
fn exercise(data: &[u8]) {
    let Ok(reader) = Reader::from_bytes(Bytes::from_bytes_vec(data.to_vec())) else {
        return;
    };
    for info in reader.tensors() {
        assert_eq!(reader.read(info).unwrap().len() as u64, info.len());
    }
    let _ = reader.verify_all();
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let small = vec![
        Spec::new("w", DType::F32, &[3], Some(1)),
        Spec::new("b", DType::U8, &[5], None),
    ];
    vec![
        ("empty.bpk", ours(&[])),
        ("small-burn-identical.bpk", ours(&small)),
        ("small-checksums.bpk", ours_checked(&small)),
        ("every-dtype.bpk", ours_checked(&every_dtype())),
        (
            "metadata-only.bpk",
            burnpack::Writer::new(vec![])
                .with_metadata("k", "v")
                .with_scalar("s", 1u8)
                .into_bytes()
                .unwrap()
                .to_vec(),
        ),
    ]
}

#[test]
fn corpus_and_mutations_never_panic() {
    if std::env::var_os("BURNPACK_WRITE_CORPUS").is_some() {
        std::fs::create_dir_all(corpus_dir()).unwrap();
        for (name, bytes) in seeds() {
            std::fs::write(corpus_dir().join(name), bytes).unwrap();
        }
    }
    let mut files: Vec<Vec<u8>> = std::fs::read_dir(corpus_dir())
        .expect("the committed corpus")
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    assert!(files.len() >= 5, "the corpus is committed");
    files.extend(seeds().into_iter().map(|(_, b)| b));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut runs = 0;
    for (f, file) in files.iter().enumerate() {
        exercise(file);
        let noise = pattern(f as u64 + 1, 4 * 1500);
        for (i, r) in noise.chunks(4).enumerate() {
            if Instant::now() > deadline {
                break;
            }
            let mut m = file.clone();
            let at = (usize::from(r[0]) << 8 | usize::from(r[1])) % m.len().max(1);
            match i % 4 {
                0 if !m.is_empty() => m[at] ^= r[2] | 1,
                1 => m.truncate(at),
                2 if !m.is_empty() => m[at] = r[3],
                _ => m.insert(at.min(m.len()), r[2]),
            }
            exercise(&m);
            runs += 1;
        }
    }
    assert!(runs >= 1000, "only {runs} mutations ran");
}
