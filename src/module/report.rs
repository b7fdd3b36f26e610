//! What a load did with each tensor and each parameter: applied (as a view of the source, or
//! copied and why), missing, unused, skipped by the filter, renamed, cast.

use burn::tensor::DType;

use crate::source::CopyReason;

/// What a load did, by name: the parameters it applied (how many were views of the source's
/// memory, which were copied and why), the parameters that kept their initial value (missing
/// from the source, or withheld by it, with why), the source's tensors no parameter used, the
/// parameters the filter skipped, the names read under another name, the casts. Returned by
/// the `*_with_report` loads of [`PackModule`](super::PackModule) (such as
/// [`load_from_source_with_report`](super::PackModule::load_from_source_with_report)).
///
/// Paths are the module's (after [`skip_enum_variants`](super::LoadOptions::skip_enum_variants)),
/// except [`unused`](Self::unused), which names the source's tensors after renaming, and the
/// `from` side of [`renamed`](Self::renamed), which is the source's own name.
///
/// "View" is about the host: on flex and ndarray a view is the parameter's storage itself; a
/// GPU backend (wgpu, CUDA) still uploads each tensor to its device, from the view.
///
/// Printed with `{}`, it gives the counts, then each list abridged to
/// [`LoadReport::LINES`] lines (with "... and K more"); with `{:#}` every name.
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
/// assert_eq!(report.applied(), ["w"]);
///
/// let f16 = LoadOptions::new().dtype(DTypePolicy::CastFloatsTo(DType::F16));
/// let (_, report) = fresh().load_from_source_with_report(&reader, &f16).unwrap();
/// assert_eq!(report.copied()[0].reason, CopyReason::Cast { from: DType::F32, to: DType::F16 });
/// assert_eq!((report.cast()[0].from, report.cast()[0].to), (DType::F32, DType::F16));
/// println!("{report}"); // 1 tensor loaded: 0 views, 1 copied (1 cast from F32 to F16); ...
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    applied: Vec<String>,
    copied: Vec<Copied>,
    cast: Vec<Cast>,
    missing: Vec<Missing>,
    unused: Vec<String>,
    skipped: Vec<String>,
    renamed: Vec<Renamed>,
}

/// One parameter that was copied on its way in, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    /// The parameter's path in the module.
    pub path: String,
    /// Why it could not be a view of the source.
    pub reason: CopyReason,
}

/// A parameter that kept its initial value: the source has no tensor for it, or lists one
/// that it cannot hand out (a withheld tensor, such as FP8 in a safetensors file), which
/// `reason` then explains. Only a load with
/// [`allow_partial`](super::LoadOptions::allow_partial) gets this far; a strict one fails with
/// [`Mismatch`](super::Mismatch) instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// The parameter's path in the module.
    pub path: String,
    /// Why the source's tensor of that name could not be loaded; `None` when there is none.
    pub reason: Option<String>,
}

/// A tensor of the source read under another name: by the convention (`PyTorch`'s `weight`
/// for a norm's `gamma`), a [`rename`](super::LoadOptions::rename) rule or
/// [`map_indices_contiguous`](super::LoadOptions::map_indices_contiguous).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renamed {
    /// The tensor's name in the source (inside its namespace, for a checkpoint).
    pub from: String,
    /// The path it was matched with: the parameter's, where one took it.
    pub to: String,
}

/// A parameter loaded with another dtype than the source stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cast {
    /// The parameter's path in the module.
    pub path: String,
    /// The source's dtype.
    pub from: DType,
    /// The parameter's dtype.
    pub to: DType,
}

impl LoadReport {
    /// How many lines each list gets when the report is printed with `{}` (every line with
    /// `{:#}`).
    pub const LINES: usize = 10;

    /// How many characters a line gets when the report is printed with `{}` (a longer one is
    /// cut, saying how many characters were left out; whole with `{:#}`). Control characters
    /// of names are escaped either way.
    ///
    /// ```
    /// assert_eq!(burnpack::module::LoadReport::LINE_CHARS, 240);
    /// ```
    pub const LINE_CHARS: usize = super::shown::LINE_CHARS;

    /// Records an applied parameter, copied for `reason` if it is one, cast from `stored` to
    /// `dtype` if they differ.
    pub(crate) fn record(
        &mut self,
        path: &str,
        reason: Option<CopyReason>,
        stored: DType,
        dtype: DType,
    ) {
        self.applied.push(path.to_string());
        if let Some(reason) = reason {
            self.copied.push(Copied {
                path: path.to_string(),
                reason,
            });
        }
        if stored != dtype {
            self.cast.push(Cast {
                path: path.to_string(),
                from: stored,
                to: dtype,
            });
        }
    }

    pub(crate) fn record_missing(&mut self, path: &str, reason: Option<String>) {
        self.missing.push(Missing {
            path: path.to_string(),
            reason,
        });
    }

    pub(crate) fn record_skipped(&mut self, path: &str) {
        self.skipped.push(path.to_string());
    }

    pub(crate) fn set_unused(&mut self, unused: Vec<String>) {
        self.unused = unused;
    }

    /// Sets the renames: `names` (source name -> table path) composed with `lookups` (table
    /// path -> parameter path, where the convention took another candidate than the path).
    pub(crate) fn set_renamed(
        &mut self,
        names: Vec<(String, String)>,
        mut lookups: Vec<(String, String)>,
    ) {
        let mut renamed: Vec<Renamed> = names
            .into_iter()
            .map(|(from, to)| {
                let to = match lookups.iter().position(|(key, _)| *key == to) {
                    Some(at) => lookups.swap_remove(at).1,
                    None => to,
                };
                Renamed { from, to }
            })
            .collect();
        renamed.extend(lookups.into_iter().map(|(from, to)| Renamed { from, to }));
        self.renamed = renamed;
    }

    /// The report's first line: the counts alone, without the lists.
    ///
    /// ```
    /// # use burnpack::module::LoadReport;
    /// assert_eq!(LoadReport::default().summary(), "0 tensors loaded: 0 views, 0 copied");
    /// ```
    #[must_use]
    pub fn summary(&self) -> String {
        let mut line = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_summary(&mut line);
        line
    }

    fn write_summary(&self, f: &mut impl std::fmt::Write) -> std::fmt::Result {
        let loaded = self.loaded();
        let plural = if loaded == 1 { "" } else { "s" };
        write!(
            f,
            "{loaded} tensor{plural} loaded: {} views, {} copied",
            self.views(),
            self.copied.len()
        )?;
        if !self.copied.is_empty() {
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
            write!(f, " ({})", parts.join(", "))?;
        }
        let counts = [
            (self.missing.len(), "missing"),
            (self.unused.len(), "unused"),
            (self.skipped.len(), "skipped by the filter"),
            (self.renamed.len(), "renamed"),
            (self.cast.len(), "cast"),
        ];
        let parts: Vec<String> = counts
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect();
        if !parts.is_empty() {
            write!(f, "; {}", parts.join(", "))?;
        }
        Ok(())
    }

    /// How many parameters were loaded.
    #[must_use]
    pub fn loaded(&self) -> usize {
        self.applied.len()
    }

    /// How many were handed over as views of the source (no host copy).
    #[must_use]
    pub fn views(&self) -> usize {
        self.applied.len() - self.copied.len()
    }

    /// The parameters that were copied, in visiting order, each with its reason.
    #[must_use]
    pub fn copied(&self) -> &[Copied] {
        &self.copied
    }

    /// The parameters loaded from the source, in visiting order.
    ///
    /// ```
    /// # use burnpack::module::LoadReport;
    /// let report = LoadReport::default();
    /// assert!(report.applied().is_empty());
    /// ```
    #[must_use]
    pub fn applied(&self) -> &[String] {
        &self.applied
    }

    /// The parameters that kept their initial value (a partial load), in visiting order: the
    /// source has no tensor for them, or withholds it (with the reason).
    ///
    /// ```
    /// use burn::module::{Module, Param};
    /// use burn::tensor::{Device, Tensor};
    /// use burnpack::module::{LoadOptions, PackModule};
    /// use burnpack::read::Reader;
    ///
    /// #[derive(Module, Debug)]
    /// struct Body { w: Param<Tensor<1>> }
    /// #[derive(Module, Debug)]
    /// struct WithHead { w: Param<Tensor<1>>, head: Param<Tensor<1>> }
    /// let device = Device::flex();
    /// let bytes = Body { w: Param::from_data([1.0], &device) }.to_pack_bytes().unwrap();
    /// let reader = Reader::from_bytes(bytes).unwrap();
    /// let model = WithHead { w: Param::from_data([0.0], &device), head: Param::from_data([0.0], &device) };
    /// let options = LoadOptions::new().allow_partial(true);
    /// let (_, report) = model.load_from_source_with_report(&reader, &options).unwrap();
    /// assert_eq!(report.missing()[0].path, "head");
    /// assert_eq!(report.missing()[0].reason, None);
    /// ```
    #[must_use]
    pub fn missing(&self) -> &[Missing] {
        &self.missing
    }

    /// The source's tensors (by their name after renaming) that no parameter used, sorted
    /// (an [`allow_unused`](super::LoadOptions::allow_unused) load; tensors outside the filter
    /// are not counted).
    ///
    /// ```
    /// use burn::module::{Module, Param};
    /// use burn::tensor::{Device, Tensor};
    /// use burnpack::module::{LoadOptions, PackModule};
    /// use burnpack::read::Reader;
    ///
    /// #[derive(Module, Debug)]
    /// struct Full { w: Param<Tensor<1>>, pooler: Param<Tensor<1>> }
    /// #[derive(Module, Debug)]
    /// struct Body { w: Param<Tensor<1>> }
    /// let device = Device::flex();
    /// let full = Full { w: Param::from_data([1.0], &device), pooler: Param::from_data([2.0], &device) };
    /// let reader = Reader::from_bytes(full.to_pack_bytes().unwrap()).unwrap();
    /// let options = LoadOptions::new().allow_unused(true);
    /// let body = Body { w: Param::from_data([0.0], &device) };
    /// let (_, report) = body.load_from_source_with_report(&reader, &options).unwrap();
    /// assert_eq!(report.unused(), ["pooler"]);
    /// ```
    #[must_use]
    pub fn unused(&self) -> &[String] {
        &self.unused
    }

    /// The parameters the filter left out (they keep their values), in visiting order.
    ///
    /// ```
    /// use burn::module::{Module, Param};
    /// use burn::tensor::{Device, Tensor};
    /// use burnpack::module::{LoadOptions, PackModule};
    /// use burnpack::read::Reader;
    ///
    /// #[derive(Module, Debug)]
    /// struct Two { a: Param<Tensor<1>>, b: Param<Tensor<1>> }
    /// let device = Device::flex();
    /// let two = |v: f32| Two { a: Param::from_data([v], &device), b: Param::from_data([v], &device) };
    /// let reader = Reader::from_bytes(two(1.0).to_pack_bytes().unwrap()).unwrap();
    /// let options = LoadOptions::new().filter_regex("^a$").unwrap();
    /// let (_, report) = two(0.0).load_from_source_with_report(&reader, &options).unwrap();
    /// assert_eq!((report.applied(), report.skipped()), (&["a".to_string()][..], &["b".to_string()][..]));
    /// ```
    #[must_use]
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }

    /// The source's tensors read under another name, in the source's order (then the
    /// convention's lookups).
    ///
    /// ```
    /// use burn::module::{Module, Param};
    /// use burn::tensor::{Device, Tensor};
    /// use burnpack::module::{LoadOptions, PackModule};
    /// use burnpack::read::Reader;
    ///
    /// #[derive(Module, Debug)]
    /// struct Tiny { w: Param<Tensor<1>> }
    /// #[derive(Module, Debug)]
    /// struct Prefixed { model: Tiny }
    /// let device = Device::flex();
    /// let saved = Prefixed { model: Tiny { w: Param::from_data([1.0], &device) } };
    /// let reader = Reader::from_bytes(saved.to_pack_bytes().unwrap()).unwrap();
    /// let options = LoadOptions::new().rename(r"^model\.", "").unwrap();
    /// let tiny = Tiny { w: Param::from_data([0.0], &device) };
    /// let (_, report) = tiny.load_from_source_with_report(&reader, &options).unwrap();
    /// assert_eq!((report.renamed()[0].from.as_str(), report.renamed()[0].to.as_str()), ("model.w", "w"));
    /// ```
    #[must_use]
    pub fn renamed(&self) -> &[Renamed] {
        &self.renamed
    }

    /// The parameters loaded with another dtype than stored, in visiting order (see
    /// [`DTypePolicy`](super::DTypePolicy)).
    ///
    /// ```
    /// # use burnpack::module::LoadReport;
    /// assert!(LoadReport::default().cast().is_empty());
    /// ```
    #[must_use]
    pub fn cast(&self) -> &[Cast] {
        &self.cast
    }
}

/// One list of the printed report: its title, then at most `limit` lines and a "... and K
/// more" line for the rest.
fn list<T>(
    f: &mut std::fmt::Formatter<'_>,
    title: &str,
    items: &[T],
    limit: usize,
    line: impl Fn(&T) -> String,
) -> std::fmt::Result {
    if items.is_empty() {
        return Ok(());
    }
    write!(f, "\n{title} ({}):", items.len())?;
    let bounded = limit != usize::MAX;
    for item in items.iter().take(limit) {
        write!(f, "\n  {}", super::shown::shown(&line(item), bounded))?;
    }
    if items.len() > limit {
        write!(f, "\n  ... and {} more", items.len() - limit)?;
    }
    Ok(())
}

impl std::fmt::Display for LoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.write_summary(f)?;
        let limit = if f.alternate() {
            usize::MAX
        } else {
            Self::LINES
        };
        list(f, "applied", &self.applied, limit, Clone::clone)?;
        list(
            f,
            "missing, kept their initial value",
            &self.missing,
            limit,
            |m| match &m.reason {
                Some(why) => format!("{} ({why})", m.path),
                None => m.path.clone(),
            },
        )?;
        list(
            f,
            "unused, in the source only",
            &self.unused,
            limit,
            Clone::clone,
        )?;
        list(
            f,
            "skipped by the filter",
            &self.skipped,
            limit,
            Clone::clone,
        )?;
        list(f, "renamed", &self.renamed, limit, |r| {
            format!("{} -> {}", r.from, r.to)
        })?;
        list(f, "cast", &self.cast, limit, |c| {
            format!("{} ({:?} -> {:?})", c.path, c.from, c.to)
        })?;
        list(f, "copied", &self.copied, limit, |c| {
            format!("{} ({})", c.path, c.reason)
        })
    }
}
