//! What a load did with each tensor: handed over as a view of the source, or copied and why.

use crate::source::CopyReason;

/// How a load reached its parameters: how many were loaded, and which of them were copied
/// (with the reason) instead of becoming views of the source's memory. Returned by
/// [`PackModule::load_from_source_with_report`](super::PackModule::load_from_source_with_report).
///
/// "View" is about the host: on flex and ndarray a view is the parameter's storage itself; a
/// GPU backend (wgpu, CUDA) still uploads each tensor to its device, from the view.
///
/// ```
/// use burn::module::{Module, Param};
/// use burn::tensor::{DType, Device, Tensor};
/// use burnpack::module::{DTypePolicy, LoadOptions, PackModule};
/// use burnpack::read::Reader;
/// use burnpack::source::CopyReason;
///
/// #[derive(Module, Debug)]
/// struct Tiny { w: Param<Tensor<1>> }
/// let device = Device::flex();
/// let bytes = Tiny { w: Param::from_data([1.0, 2.0], &device) }.to_pack_bytes().unwrap();
/// let reader = Reader::from_bytes(bytes).unwrap();
///
/// let fresh = || Tiny { w: Param::from_data([0.0, 0.0], &device) };
/// let (_, report) = fresh().load_from_source_with_report(&reader, &LoadOptions::new()).unwrap();
/// assert_eq!((report.loaded(), report.views()), (1, 1));
///
/// let f16 = LoadOptions::new().dtype(DTypePolicy::CastFloatsTo(DType::F16));
/// let (_, report) = fresh().load_from_source_with_report(&reader, &f16).unwrap();
/// assert_eq!(report.copied()[0].reason, CopyReason::Cast { from: DType::F32, to: DType::F16 });
/// println!("{report}"); // 1 tensor loaded: 0 views, 1 copied (1 cast from F32 to F16)
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    loaded: usize,
    copied: Vec<Copied>,
}

/// One parameter that was copied on its way in, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    /// The parameter's path in the module.
    pub path: String,
    /// Why it could not be a view of the source.
    pub reason: CopyReason,
}

impl LoadReport {
    pub(crate) fn record(&mut self, path: &str, reason: Option<CopyReason>) {
        self.loaded += 1;
        if let Some(reason) = reason {
            self.copied.push(Copied {
                path: path.to_string(),
                reason,
            });
        }
    }

    /// How many parameters were loaded.
    #[must_use]
    pub fn loaded(&self) -> usize {
        self.loaded
    }

    /// How many were handed over as views of the source (no host copy).
    #[must_use]
    pub fn views(&self) -> usize {
        self.loaded - self.copied.len()
    }

    /// The parameters that were copied, in visiting order, each with its reason.
    #[must_use]
    pub fn copied(&self) -> &[Copied] {
        &self.copied
    }
}

impl std::fmt::Display for LoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = if self.loaded == 1 { "" } else { "s" };
        write!(
            f,
            "{} tensor{plural} loaded: {} views, {} copied",
            self.loaded,
            self.views(),
            self.copied.len()
        )?;
        if self.copied.is_empty() {
            return Ok(());
        }
        // One count per distinct reason kind, in order of first appearance; unaligned
        // offsets differ per tensor, so they are counted together.
        let mut counts: Vec<(String, usize)> = Vec::new();
        for copied in &self.copied {
            let label = match copied.reason {
                CopyReason::Unaligned { .. } => "unaligned".to_string(),
                other => other.to_string(),
            };
            match counts.iter_mut().find(|(l, _)| *l == label) {
                Some((_, n)) => *n += 1,
                None => counts.push((label, 1)),
            }
        }
        let parts: Vec<String> = counts.iter().map(|(l, n)| format!("{n} {l}")).collect();
        write!(f, " ({})", parts.join(", "))
    }
}
