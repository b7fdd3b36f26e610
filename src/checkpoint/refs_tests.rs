//! Unit tests of `refs`: the reference lines, the table, the hex and decimal fields.
use super::*;

/// A reference line without a recorded place.
#[allow(clippy::too_many_arguments)]
fn line(
    name: &str,
    file: String,
    stored_as: &str,
    param_id: Option<u64>,
    dtype: &str,
    shape: &[usize],
    hash: u128,
    checksum: Option<u64>,
) -> Ref {
    Ref {
        name: name.into(),
        file,
        stored_as: stored_as.into(),
        param_id,
        dtype: dtype.into(),
        shape: shape.to_vec(),
        hash,
        checksum,
        at: None,
    }
}

/// What an incremental save relies on to hash the bytes it writes once: past 240 bytes,
/// XXH3-64 (a data file's checksum) is the low half of XXH3-128 (the content hash).
#[test]
fn past_240_bytes_the_checksum_is_the_content_hash_s_low_half() {
    let bytes: Vec<u8> = (0..(1usize << 20) + 300)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
        .collect();
    for len in (241..1200).chain([4096, 65_536, 65_537, 1 << 20]) {
        for start in [0, 1, 7] {
            let window = &bytes[start..start + len];
            assert_eq!(
                crate::format::checksum(window),
                content_hash(window) as u64,
                "{len} bytes from {start}"
            );
        }
    }
}

#[test]
fn references_round_trip() {
    let refs = vec![
        Ref {
            at: Some(Where {
                offset: 1024,
                head: u64::MAX,
            }),
            ..line(
                "model.w",
                data_name(3, 0xabc),
                "model.w",
                Some(17),
                "F32",
                &[2, 3],
                u128::MAX - 5,
                Some(0x0123_4567_89ab_cdef),
            )
        },
        line(
            "model.v",
            data_name(1, 0),
            "model.w",
            None,
            "QFloat(x, y)",
            &[],
            0,
            None,
        ),
    ];
    assert_eq!(parse(&encode(&refs)).unwrap(), refs);
    // A line of the first layout (7 fields, no checksum) still parses.
    let old = format!(
        "model.w\t{}\t\t17\tF32\t2,3\t{:032x}\n",
        data_name(3, 0xabc),
        9
    );
    assert_eq!(parse(&old).unwrap()[0].checksum, None);
    // Where is written only with a checksum, and read back exactly.
    let text = encode(&refs);
    assert!(
        text.lines()
            .next()
            .unwrap()
            .ends_with("\t1024\tffffffffffffffff")
    );
    for bad in [
        "\t01\t0000000000000000",
        "\t-1\t0000000000000000",
        "\t1\t00",
        "\t1",
    ] {
        let line = format!(
            "model.w\t{}\t\t\tF32\t2\t{:032x}\t{:016x}{bad}\n",
            data_name(3, 0xabc),
            9,
            9
        );
        assert!(parse(&line).is_err(), "{bad:?}");
    }
    let no_checksum = format!(
        "model.w\t{}\t\t\tF32\t2\t{:032x}\t\t0\t{:016x}\n",
        data_name(3, 0xabc),
        9,
        9
    );
    assert!(
        parse(&no_checksum)
            .unwrap_err()
            .contains("without the data file's checksum")
    );
}

#[test]
fn the_table_copies_nothing_and_sorts() {
    let refs = vec![
        line(
            "model.w",
            data_name(3, 0xabc),
            "model.w",
            Some(17),
            "F32",
            &[2, 3],
            7,
            Some(9),
        ),
        line(
            "model.b",
            data_name(1, 0),
            "model.v",
            None,
            "F16",
            &[],
            8,
            None,
        ),
        line(
            "model.a",
            data_name(3, 0xabc),
            "model.a",
            Some(1),
            "F32",
            &[4],
            1,
            None,
        ),
    ];
    let text = encode(&refs);
    let mut table = Table::parse(&text).unwrap();
    assert_eq!(table.files(), [data_name(3, 0xabc), data_name(1, 0)]);
    assert_eq!(table.sort_by_name(), None);
    let names: Vec<&str> = (0..table.len()).map(|i| table.name(i)).collect();
    assert_eq!(names, ["model.a", "model.b", "model.w"]);
    // The names copied into one buffer: each row's name, and its name in its data file
    // (the same range where the line leaves it empty).
    let (buffer, ranges) = table.names();
    let at = |(start, end): (usize, usize)| &buffer[start..end];
    assert_eq!(&*buffer, "model.amodel.bmodel.vmodel.w");
    assert_eq!(
        (at(ranges[1].name), at(ranges[1].stored_as)),
        ("model.b", "model.v")
    );
    assert_eq!(ranges[0].name, ranges[0].stored_as);
    assert_eq!(table.stored_as(1), "model.v");
    assert_eq!(table.stored_as(0), "model.a");
    assert_eq!((table.shape(1), table.shape(2)), (&[][..], &[2, 3][..]));
    assert_eq!((table.file_index(0), table.file_index(1)), (0, 1));
    assert_eq!(
        (table.param_id(2), table.hash(2), table.checksum(2)),
        (Some(17), 7, Some(9))
    );
    assert_eq!(table.dtype(1), "F16");
    let twice = format!("{text}{}", encode(&refs[..1]));
    assert_eq!(
        Table::parse(&twice).unwrap().sort_by_name(),
        Some("model.w")
    );
}

#[test]
fn dtypes_compare_as_written() {
    use burn::tensor::DType;
    assert!(dtype_is(DType::F32, "F32"));
    assert!(!dtype_is(DType::F32, "F3"));
    assert!(!dtype_is(DType::F32, "F32 "));
    assert!(!dtype_is(DType::F16, "F32"));
    let q = DType::QFloat(burn::tensor::quantization::QuantScheme::default());
    assert!(dtype_is(q, &dtype_text(q)));
    assert!(!dtype_is(q, "QFloat"));
}

#[test]
fn data_names_are_strict() {
    assert_eq!(data_step(&data_name(42, 7)), Some(42));
    for bad in [
        "data-1-0.bpk",
        "../data-00000000000000000001-0000000000000000.bpk",
        "data-00000000000000000001-000000000000000G.bpk",
        "ckpt-00000000000000000001.bpk",
    ] {
        assert_eq!(data_step(bad), None, "{bad}");
    }
}

#[test]
fn malformed_lines_are_named() {
    let file = data_name(1, 1);
    for (text, what) in [
        ("a\tb".to_string(), "2 fields"),
        (
            format!("a\t{file}\t\t\tF32\t1\t{:032x}\tzz", 1),
            "16 hex digits",
        ),
        (
            format!("a\t{file}\t\t\tF32\t1\t{:032x}\t{:016x}\tx", 1, 2),
            "9 fields",
        ),
        (
            format!(
                "a\t{file}\t\t\tF32\t1\t{:032x}\t{:016x}\t0\t{:016x}\tx",
                1, 2, 3
            ),
            "11 or more fields",
        ),
        (
            format!("\t{file}\t\t\tF32\t1\t{:032x}", 1),
            "empty tensor name",
        ),
        (
            format!("a\t../x\t\t\tF32\t1\t{:032x}", 1),
            "not the name of a data file",
        ),
        (
            format!("a\t{file}\t\tx\tF32\t1\t{:032x}", 1),
            "parameter id",
        ),
        (
            format!("a\t{file}\t\t+7\tF32\t1\t{:032x}", 1),
            "decimal digits",
        ),
        (
            format!("a\t{file}\t\t07\tF32\t1\t{:032x}", 1),
            "decimal digits",
        ),
        (format!("a\t{file}\t\t\tF32\t1\t12"), "32 hex digits"),
        (format!("a\t{file}\t\t\t\t1\t{:032x}", 1), "empty dtype"),
        (
            format!("a\t{file}\t\t\tF32\t1,x\t{:032x}", 1),
            "shape '1,x'",
        ),
    ] {
        let e = parse(&text).unwrap_err();
        assert!(e.contains(what) && e.contains("line 1"), "{e}");
    }
}
