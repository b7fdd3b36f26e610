//! `LoadReport` names names: what a load applied, what kept its initial value (missing, or
//! withheld by the source, with why), what of the source went unused, what the filter
//! skipped, what was read under another name, cast or copied; its `Display` stays bounded;
//! the strict error still lists every problem at once; every door returns it, and
//! `PackStore`'s `ApplyResult` lists agree with it.

use std::path::Path;

use burn::module::{Module, Param};
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::{Bytes, DType, Device, Tensor};
use burnpack::interop::safetensors::SafetensorsSource;
use burnpack::module::{DTypePolicy, LoadOptions, LoadReport, ModuleError, PackModule};
use burnpack::read::Reader;
use burnpack::source::CopyReason;
use burnpack::write::{Entry, Writer};

#[derive(Module, Debug)]
struct Body {
    encoder: Linear,
    pooler: Linear,
    frozen: Param<Tensor<1>>,
}

/// A downloaded model: everything under `bert.`.
#[derive(Module, Debug)]
struct Pretrained {
    bert: Body,
}

/// What is fine-tuned from it: the encoder, a frozen parameter kept as initialized, a new head.
#[derive(Module, Debug)]
struct FineTune {
    encoder: Linear,
    frozen: Param<Tensor<1>>,
    head: Linear,
}

fn pretrained(device: &Device) -> Pretrained {
    Pretrained {
        bert: Body {
            encoder: LinearConfig::new(3, 2).init(device),
            pooler: LinearConfig::new(2, 2).init(device),
            frozen: Param::from_data([5.0], device),
        },
    }
}

fn fine_tune(device: &Device) -> FineTune {
    FineTune {
        encoder: LinearConfig::new(3, 2).init(device),
        frozen: Param::from_data([0.0], device),
        head: LinearConfig::new(2, 4).init(device),
    }
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(ToString::to_string).collect()
}

#[test]
fn a_fine_tuning_load_names_what_it_applied_kept_skipped_renamed_and_cast() {
    let device = Device::flex();
    let source = pretrained(&device);
    let reader = Reader::from_bytes(source.to_pack_bytes().unwrap()).unwrap();
    let options = LoadOptions::new()
        .rename(r"^bert\.", "")
        .unwrap()
        .filter(|path| path != "frozen")
        .allow_partial(true)
        .allow_unused(true)
        .dtype(DTypePolicy::CastFloatsTo(DType::F16));
    let (model, report) = fine_tune(&device)
        .load_from_source_with_report(&reader, &options)
        .unwrap();

    assert_eq!(
        report.applied(),
        strings(&["encoder.weight", "encoder.bias"])
    );
    let missing: Vec<(&str, Option<&str>)> = report
        .missing()
        .iter()
        .map(|m| (m.path.as_str(), m.reason.as_deref()))
        .collect();
    assert_eq!(missing, [("head.weight", None), ("head.bias", None)]);
    // The file's tensors outside the module (the filter's are not counted), after renaming.
    assert_eq!(report.unused(), strings(&["pooler.bias", "pooler.weight"]));
    assert_eq!(report.skipped(), strings(&["frozen"]));
    let mut renamed: Vec<(String, String)> = report
        .renamed()
        .iter()
        .map(|r| (r.from.clone(), r.to.clone()))
        .collect();
    renamed.sort();
    let mut want: Vec<(String, String)> = [
        "encoder.bias",
        "encoder.weight",
        "frozen",
        "pooler.bias",
        "pooler.weight",
    ]
    .iter()
    .map(|p| (format!("bert.{p}"), (*p).to_string()))
    .collect();
    want.sort();
    assert_eq!(renamed, want);
    let cast: Vec<(&str, DType, DType)> = report
        .cast()
        .iter()
        .map(|c| (c.path.as_str(), c.from, c.to))
        .collect();
    assert_eq!(
        cast,
        [
            ("encoder.weight", DType::F32, DType::F16),
            ("encoder.bias", DType::F32, DType::F16)
        ]
    );
    assert_eq!(report.copied().len(), 2);
    assert_eq!(
        report.copied()[0].reason,
        CopyReason::Cast {
            from: DType::F32,
            to: DType::F16
        }
    );

    // The values are the file's (cast), the skipped and missing parameters kept theirs.
    let f16 = |t: Tensor<2>| t.cast(DType::F16).into_data();
    assert_eq!(
        model.encoder.weight.val().into_data(),
        f16(source.bert.encoder.weight.val())
    );
    assert_eq!(
        model.frozen.val().into_data().try_to_vec::<f32>().unwrap(),
        [0.0]
    );

    // What a user prints: the counts, then each list.
    let printed = report.to_string();
    assert!(
        printed.starts_with(
            "2 tensors loaded: 0 views, 2 copied (2 cast from F32 to F16); 2 missing, \
             2 unused, 1 skipped by the filter, 5 renamed, 2 cast"
        ),
        "{printed}"
    );
    for line in [
        "missing, kept their initial value (2):\n  head.weight\n  head.bias",
        "unused, in the source only (2):\n  pooler.bias\n  pooler.weight",
        "skipped by the filter (1):\n  frozen",
        "  bert.encoder.weight -> encoder.weight",
        "cast (2):\n  encoder.weight (F32 -> F16)",
    ] {
        assert!(printed.contains(line), "{line:?} in\n{printed}");
    }
    assert_eq!(report.summary(), printed.lines().next().unwrap());
}

#[test]
fn the_strict_error_still_lists_every_problem_at_once() {
    let device = Device::flex();
    let reader = Reader::from_bytes(pretrained(&device).to_pack_bytes().unwrap()).unwrap();
    let options = LoadOptions::new().rename(r"^bert\.", "").unwrap();
    let err = fine_tune(&device)
        .load_from_source(&reader, &options)
        .unwrap_err();
    let ModuleError::Mismatch { mismatch, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(mismatch.missing, strings(&["head.weight", "head.bias"]));
    assert_eq!(mismatch.unused, strings(&["pooler.bias", "pooler.weight"]));
    let text = err.to_string();
    for name in ["head.weight", "head.bias", "pooler.bias", "pooler.weight"] {
        assert!(text.contains(name), "{text}");
    }
}

/// Many names: `{}` prints at most `LoadReport::LINES` per list and says how many more;
/// `{:#}` prints them all.
#[test]
fn printing_is_bounded_and_the_alternate_form_is_complete() {
    #[derive(Module, Debug)]
    struct Many {
        w: Vec<Param<Tensor<1>>>,
    }
    let device = Device::flex();
    let many = |n: usize, v: f32| Many {
        w: (0..n).map(|_| Param::from_data([v], &device)).collect(),
    };
    let reader = Reader::from_bytes(many(25, 1.0).to_pack_bytes().unwrap()).unwrap();
    // 25 in the file, 40 in the module: 15 missing.
    let options = LoadOptions::new().allow_partial(true);
    let (_, report) = many(40, 0.0)
        .load_from_source_with_report(&reader, &options)
        .unwrap();
    assert_eq!((report.loaded(), report.missing().len()), (25, 15));
    let short = report.to_string();
    let lines: Vec<&str> = short.lines().collect();
    // Summary, then "applied (25):" + 10 + "... and 15 more", "missing ... (15):" + 10 +
    // "... and 5 more".
    assert_eq!(lines.len(), 1 + 12 + 12, "{short}");
    assert!(short.contains("applied (25):\n  w.0\n"), "{short}");
    assert!(short.contains("  w.9\n  ... and 15 more\n"), "{short}");
    assert!(short.contains("  w.34\n  ... and 5 more"), "{short}");
    assert!(!short.contains("w.10\n"), "{short}");
    let full = format!("{report:#}");
    assert_eq!(full.lines().count(), 1 + 26 + 16, "{full}");
    assert!(!full.contains("more"), "{full}");
    assert!(full.ends_with("  w.39"), "{full}");
    assert_eq!(LoadReport::LINES, 10);
}

/// A tensor the source lists but withholds (FP8 in a safetensors file) that a partial load
/// wants: missing, with why; one it does not want: unused.
#[test]
fn a_withheld_tensor_wanted_by_a_partial_load_is_missing_with_its_reason() {
    #[derive(Module, Debug)]
    struct Pair {
        a: Param<Tensor<1>>,
        b: Param<Tensor<2>>,
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f6.safetensors");
    let a: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    // F6: a dtype Burn has no equivalent of (FP8 loads now), so the source withholds it.
    let b = [0u8; 3];
    let c = [0x3cu8, 0x40, 0x42];
    use safetensors::{Dtype, tensor::TensorView};
    let views = [
        ("a", TensorView::new(Dtype::F32, vec![2], &a).unwrap()),
        (
            "b",
            TensorView::new(Dtype::F6_E2M3, vec![2, 2], &b).unwrap(),
        ),
        ("c", TensorView::new(Dtype::F8_E5M2, vec![3], &c).unwrap()),
    ];
    safetensors::serialize_to_file(views, None, &path).unwrap();
    let source = SafetensorsSource::open(&path).unwrap();
    let device = Device::flex();
    let pair = Pair {
        a: Param::from_data([0.0, 0.0], &device),
        b: Param::from_data([[7.0, 7.0], [7.0, 7.0]], &device),
    };
    let options = LoadOptions::new().allow_partial(true).allow_unused(true);
    let (pair, report) = pair
        .load_from_source_with_report(&source, &options)
        .unwrap();
    assert_eq!(report.applied(), strings(&["a"]));
    assert_eq!(report.missing().len(), 1);
    assert_eq!(report.missing()[0].path, "b");
    let why = report.missing()[0].reason.as_deref().unwrap();
    assert!(why.contains("F6_E2M3") && why.contains('b'), "{why}");
    assert!(why.contains(&path.display().to_string()), "{why}");
    assert_eq!(report.unused(), strings(&["c"]));
    assert!(report.to_string().contains("  b ("), "{report}");
    assert_eq!(
        pair.b.val().into_data().try_to_vec::<f32>().unwrap(),
        [7.0; 4]
    );
}

/// A convention's lookups under another name (`PyTorch`'s `weight` / `bias` for a norm's
/// `gamma` / `beta`) are renames too, composed with the rename rules.
#[test]
fn a_convention_s_lookups_are_reported_as_renames() {
    #[derive(Module, Debug)]
    struct Net {
        norm: LayerNorm,
    }
    let f32s = |v: &[f32]| Bytes::from_elems(v.to_vec());
    let pack = Writer::new(vec![
        Entry::resident("model.norm.weight", DType::F32, vec![2], f32s(&[2.0, 3.0])),
        Entry::resident("model.norm.bias", DType::F32, vec![2], f32s(&[0.5, 0.25])),
    ])
    .into_bytes()
    .unwrap();
    let reader = Reader::from_bytes(pack).unwrap();
    let device = Device::flex();
    let options = LoadOptions::new()
        .pytorch(true)
        .rename(r"^model\.", "")
        .unwrap();
    let (net, report) = Net {
        norm: LayerNormConfig::new(2).init(&device),
    }
    .load_from_source_with_report(&reader, &options)
    .unwrap();
    let mut renamed: Vec<(&str, &str)> = report
        .renamed()
        .iter()
        .map(|r| (r.from.as_str(), r.to.as_str()))
        .collect();
    renamed.sort_unstable();
    assert_eq!(
        renamed,
        [
            ("model.norm.bias", "norm.beta"),
            ("model.norm.weight", "norm.gamma")
        ]
    );
    assert_eq!(
        net.norm
            .gamma
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
        [2.0, 3.0]
    );
}

/// Each door that loads a module returns the same report.
#[test]
fn every_door_returns_the_report() {
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pretrained.bpk");
    let source = pretrained(&device);
    source.save_pack(&file).unwrap();
    let options = LoadOptions::new()
        .rename(r"^bert\.", "")
        .unwrap()
        .allow_partial(true)
        .allow_unused(true);
    let (_, from_file) = fine_tune(&device)
        .load_pack_with_report(&file, &options)
        .unwrap();
    let (_, from_bytes) = fine_tune(&device)
        .load_pack_bytes_with_report(source.to_pack_bytes().unwrap(), &options)
        .unwrap();
    let reader = Reader::open(&file).unwrap();
    let (_, from_source) = fine_tune(&device)
        .load_from_source_with_report(&reader, &options)
        .unwrap();
    // A checkpoint's model part, the same partial load.
    let ckpt = dir.path().join("step-1.bpk");
    burnpack::checkpoint::TrainingState::new(&source, burnpack::checkpoint::Progress::new(0, 1))
        .save(&ckpt)
        .unwrap();
    let (_, from_checkpoint) = burnpack::checkpoint::Checkpoint::open(&ckpt)
        .unwrap()
        .load_model_with_report(fine_tune(&device), &options)
        .unwrap();
    assert_eq!(from_checkpoint.applied(), from_source.applied());
    assert_eq!(from_checkpoint.missing(), from_source.missing());
    assert_eq!(from_checkpoint.unused(), from_source.unused());
    assert_eq!(from_file, from_source);
    assert_eq!(from_bytes.applied(), from_source.applied());
    assert_eq!(from_bytes.missing(), from_source.missing());
    assert_eq!(from_bytes.unused(), from_source.unused());
    assert_eq!(
        from_file.applied(),
        strings(&["encoder.weight", "encoder.bias", "frozen"])
    );
}

/// `PackStore` (burn-store's applier underneath) and this crate's load name the same
/// parameters applied, missing and unused for the same partial load.
#[cfg(feature = "store")]
#[test]
fn the_store_s_apply_result_agrees_with_the_load_report() {
    use burn::store::{KeyRemapper, ModuleSnapshot};
    use burnpack::store::PackStore;
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pretrained.bpk");
    pretrained(&device).save_pack(&file).unwrap();
    let options = LoadOptions::new()
        .rename(r"^bert\.", "")
        .unwrap()
        .allow_partial(true)
        .allow_unused(true);
    let (_, report) = fine_tune(&device)
        .load_pack_with_report(&file, &options)
        .unwrap();
    let mut model = fine_tune(&device);
    let remap = KeyRemapper::new().add_pattern(r"^bert\.", "").unwrap();
    let result = model
        .load_from(&mut PackStore::from_file(&file).remap(remap).allow_partial(true))
        .unwrap();
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(
        sorted(result.applied.clone()),
        sorted(report.applied().to_vec())
    );
    assert_eq!(
        sorted(result.missing.iter().map(|(p, _)| p.clone()).collect()),
        sorted(report.missing().iter().map(|m| m.path.clone()).collect())
    );
    assert_eq!(
        sorted(result.unused.clone()),
        sorted(report.unused().to_vec())
    );
    let _ = Path::new(""); // keep the import used without the store feature
}

/// Names come from files: a newline in one cannot forge a line of the printed report, and a
/// long one is cut (whole with `{:#}`, escaped either way).
#[test]
fn names_from_the_file_are_escaped_and_cut_when_printed() {
    #[derive(Module, Debug)]
    struct One {
        w: Param<Tensor<1>>,
    }
    let device = Device::flex();
    let long = "x".repeat(20_000);
    let forged = "evil\napplied (1):\n  w";
    let entries = [forged, long.as_str(), "w"]
        .iter()
        .map(|name| {
            Entry::resident(
                *name,
                DType::F32,
                vec![1],
                Bytes::from_bytes_vec(1f32.to_le_bytes().to_vec()),
            )
        })
        .collect();
    let reader = Reader::from_bytes(Writer::new(entries).into_bytes().unwrap()).unwrap();
    let one = One {
        w: Param::from_data([0.0], &device),
    };
    let (_, report) = one
        .load_from_source_with_report(&reader, &LoadOptions::new().allow_unused(true))
        .unwrap();
    assert_eq!(report.unused().len(), 2);
    let short = report.to_string();
    assert!(short.contains("  evil\\napplied (1):\\n  w"), "{short}");
    let headers = |text: &str| text.lines().filter(|l| l.starts_with("applied (")).count();
    assert_eq!(headers(&short), 1, "{short}");
    assert!(short.len() < 2_000, "{}", short.len());
    assert!(short.contains("... (+19760 characters)"), "{short}");
    let full = format!("{report:#}");
    assert!(full.contains(&long));
    assert_eq!(headers(&full), 1);
}

/// The strict error names every problem, each name escaped and cut as in the report: a
/// newline in a name cannot forge a line of it, a long name does not make it unbounded.
#[test]
fn the_strict_error_escapes_and_cuts_names_from_the_file() {
    #[derive(Module, Debug)]
    struct One {
        w: Param<Tensor<1>>,
    }
    let device = Device::flex();
    let long = "y".repeat(50_000);
    let entries = ["evil\nname\u{202E}", long.as_str(), "w"]
        .iter()
        .map(|name| {
            Entry::resident(
                *name,
                DType::F32,
                vec![1],
                Bytes::from_bytes_vec(1f32.to_le_bytes().to_vec()),
            )
        })
        .collect();
    let reader = Reader::from_bytes(Writer::new(entries).into_bytes().unwrap()).unwrap();
    let one = One {
        w: Param::from_data([0.0], &device),
    };
    let err = one
        .load_from_source(&reader, &LoadOptions::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("2 unused"), "{err}");
    assert!(err.contains("evil\\nname\\u{202e}"), "{err}");
    assert!(!err.contains('\n') && !err.contains('\u{202E}'));
    assert!(err.len() < 2_000, "{}", err.len());
}
