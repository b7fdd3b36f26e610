//! Files written here are byte-identical to Burn 0.22's `burn_pack::Writer` and read back in
//! `burn_pack::Reader`; files Burn writes read here with every field intact.

mod common;

use burn::tensor::Bytes;
use burnpack::{Writer, read::Reader};
use common::{Spec, burns, every_dtype, ours};

fn with_extras(specs: &[Spec]) -> (Vec<u8>, Vec<u8>) {
    let mine = Writer::new(specs.iter().map(Spec::entry).collect())
        .checksums(false)
        .with_metadata("producer", "burnpack tests")
        .with_metadata("ключ", "значение")
        .with_scalar("epoch", 12u64)
        .with_scalar("loss", 0.25f64)
        .with_scalar("offset", -3i64)
        .with_scalar("done", true)
        .into_bytes()
        .unwrap()
        .to_vec();
    let theirs = burn_pack::Writer::new(specs.iter().map(Spec::burn_tensor).collect())
        .with_metadata("producer", "burnpack tests")
        .with_metadata("ключ", "значение")
        .with_scalar("epoch", burn_pack::Scalar::UInt(12))
        .with_scalar("loss", burn_pack::Scalar::Float(0.25))
        .with_scalar("offset", burn_pack::Scalar::Int(-3))
        .with_scalar("done", burn_pack::Scalar::Bool(true))
        .into_bytes()
        .unwrap()
        .to_vec();
    (mine, theirs)
}

#[test]
fn every_dtype_is_byte_identical_to_burn() {
    let specs = every_dtype();
    assert_eq!(ours(&specs), burns(&specs));
}

#[test]
fn metadata_and_scalars_are_byte_identical_to_burn() {
    let (mine, theirs) = with_extras(&every_dtype());
    assert_eq!(mine, theirs);
}

#[test]
fn empty_pack_is_byte_identical_to_burn() {
    assert_eq!(ours(&[]), burns(&[]));
    let (mine, theirs) = with_extras(&[]);
    assert_eq!(mine, theirs);
}

#[test]
fn deferred_parallel_file_write_is_byte_identical_to_burn() {
    let specs = every_dtype();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deferred.bpk");
    Writer::new(specs.iter().map(Spec::deferred_entry).collect())
        .threads(4)
        .checksums(false)
        .write_to_file(&path)
        .unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), burns(&specs));
}

fn assert_burn_reads(bytes: Vec<u8>, specs: &[Spec]) {
    let reader = burn_pack::Reader::from_bytes(Bytes::from_bytes_vec(bytes)).unwrap();
    assert_eq!(reader.metadata()["producer"], "burnpack tests");
    assert_eq!(reader.scalars()["epoch"], burn_pack::Scalar::UInt(12));
    assert_eq!(reader.scalars()["loss"], burn_pack::Scalar::Float(0.25));
    let tensors = reader.into_tensors().unwrap();
    assert_eq!(tensors.len(), specs.len());
    for spec in specs {
        let t = tensors.iter().find(|t| t.name == spec.name).unwrap();
        assert_eq!(t.dtype, spec.dtype, "{}", spec.name);
        assert_eq!(t.shape.to_vec(), spec.shape, "{}", spec.name);
        assert_eq!(t.param_id, spec.param_id, "{}", spec.name);
        assert_eq!(&t.to_bytes().unwrap()[..], &spec.data[..], "{}", spec.name);
    }
}

#[test]
fn burn_reads_files_written_here() {
    let specs = every_dtype();
    let (mine, _) = with_extras(&specs);
    assert_burn_reads(mine, &specs);
    // With checksums (the default): Burn ignores the extra metadata key.
    let checked = Writer::new(specs.iter().map(Spec::entry).collect())
        .with_metadata("producer", "burnpack tests")
        .with_scalar("epoch", 12u64)
        .with_scalar("loss", 0.25)
        .into_bytes()
        .unwrap();
    assert!(
        Reader::from_bytes(checked.clone())
            .unwrap()
            .layout()
            .has_checksums()
    );
    assert_burn_reads(checked.to_vec(), &specs);

    // Through a real file, written in parallel from deferred entries.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.bpk");
    Writer::new(specs.iter().map(Spec::deferred_entry).collect())
        .with_metadata("producer", "burnpack tests")
        .with_scalar("epoch", 12u64)
        .with_scalar("loss", 0.25)
        .write_to_file(&path)
        .unwrap();
    let reader = burn_pack::Reader::from_file(&path).unwrap();
    assert_eq!(reader.tensor_names().len(), specs.len());
    for spec in &specs {
        assert_eq!(
            reader.tensor_data(&spec.name).unwrap(),
            spec.data,
            "{}",
            spec.name
        );
    }
}

fn assert_we_read(reader: &Reader, specs: &[Spec]) {
    assert_eq!(reader.tensors().len(), specs.len());
    for spec in specs {
        let info = reader.tensor(&spec.name).unwrap();
        assert_eq!(info.dtype(), spec.dtype, "{}", spec.name);
        assert_eq!(info.shape(), &spec.shape[..], "{}", spec.name);
        assert_eq!(info.param_id(), spec.param_id, "{}", spec.name);
        assert_eq!(
            &reader.bytes(&spec.name).unwrap()[..],
            &spec.data[..],
            "{}",
            spec.name
        );
        assert!(info.is_aligned(), "{}", spec.name);
    }
}

#[test]
fn files_written_by_burn_read_here() {
    let specs = every_dtype();
    let (_, theirs) = with_extras(&specs);

    let reader = Reader::from_bytes(Bytes::from_bytes_vec(theirs.clone())).unwrap();
    assert_we_read(&reader, &specs);
    assert_eq!(reader.metadata()["producer"], "burnpack tests");
    assert_eq!(reader.metadata()["ключ"], "значение");
    assert_eq!(reader.scalars()["epoch"], burnpack::Scalar::UInt(12));
    assert_eq!(reader.scalars()["loss"], burnpack::Scalar::Float(0.25));
    assert_eq!(reader.scalars()["offset"], burnpack::Scalar::Int(-3));
    assert_eq!(reader.scalars()["done"], burnpack::Scalar::Bool(true));

    // Burn's own file writer, read mapped and buffered.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("burn.bpk");
    burn_pack::Writer::new(specs.iter().map(Spec::burn_tensor).collect())
        .write_to_file(&path)
        .unwrap();
    assert_we_read(&Reader::open(&path).unwrap(), &specs);
    assert_we_read(&Reader::open_buffered(&path).unwrap(), &specs);
}

#[test]
fn burn_order_by_name_and_by_position_agree_with_the_writer() {
    let specs = vec![
        Spec::new("z.last", burn::tensor::DType::F32, &[3], None),
        Spec::new("a.first", burn::tensor::DType::F32, &[5], None),
        Spec::new("m.middle", burn::tensor::DType::U8, &[1], None),
    ];
    let reader = Reader::from_bytes(Bytes::from_bytes_vec(burns(&specs))).unwrap();
    let by_name: Vec<_> = reader
        .tensors()
        .iter()
        .map(|t| t.name().to_string())
        .collect();
    let by_position: Vec<_> = reader
        .tensors_by_position()
        .map(|t| t.name().to_string())
        .collect();
    assert_eq!(by_name, ["a.first", "m.middle", "z.last"]);
    assert_eq!(by_position, ["z.last", "a.first", "m.middle"]);
}
