//! `bpk verify`: every structural check the format has, every checksum it keeps, every tensor
//! read, optionally a NaN/Inf scan; the same for every format, and the same exit codes (see
//! `bpk --help`): 0 sound, 1 read and found damaged, 3 cannot be read.

use burnpack::source::{Checksums, human_bytes};
use serde_json::json;
use std::path::Path;

use crate::Failure;
use crate::print::*;
use crate::scan::*;

/// A verdict: what `verify` prints, as text or JSON.
struct Verdict {
    file: String,
    /// The format's short name (`burnpack`, `gguf`...).
    format: &'static str,
    /// What the structure was found, in the format's words (`structure valid`).
    valid: String,
    /// What was checked, in the format's words (empty when the file failed).
    checked: String,
    tensors: usize,
    bytes: u64,
    verified_checksums: usize,
    problems: Vec<String>,
    warnings: Vec<String>,
    notes: Vec<String>,
}

impl Verdict {
    /// Prints the verdict (problems, warnings and notes on stdout; a failure's one line on
    /// stderr) and returns the exit code.
    fn report(self, as_json: bool, nan: bool) -> Result<u8, Failure> {
        let ok = self.problems.is_empty();
        if as_json {
            print_json(&json!({
                "file": self.file,
                "format": self.format,
                "ok": ok,
                "valid": self.valid,
                "checked": self.checked,
                "tensor_count": self.tensors,
                "data_bytes": self.bytes,
                "verified_checksums": self.verified_checksums,
                "nan_scanned": nan,
                "problems": self.problems,
                "warnings": self.warnings,
                "notes": self.notes,
            }));
        } else {
            for problem in &self.problems {
                println!("{}", clean(problem));
            }
            for warning in &self.warnings {
                println!("{}: warning: {}", clean(&self.file), clean(warning));
            }
            if ok {
                println!(
                    "{}: OK: {}, {} tensors ({}) read, {}{}",
                    clean(&self.file),
                    self.valid,
                    self.tensors,
                    human_bytes(self.bytes),
                    self.checked,
                    scanned(nan)
                );
            }
            for note in &self.notes {
                println!("{}", clean(note));
            }
        }
        if ok {
            return Ok(0);
        }
        let n = self.problems.len();
        let s = if n == 1 { "" } else { "s" };
        Err(Failure {
            code: 1,
            message: format!(
                "{}: FAILED: {n} problem{s} (first: {})",
                self.file,
                self.problems[0]
                    .strip_prefix(&format!("{}: ", self.file))
                    .unwrap_or(&self.problems[0])
            ),
        })
    }
}

pub(crate) fn verify(path: &Path, nan: bool, as_json: bool) -> Result<u8, Failure> {
    // A file that cannot be read is exit 3; one that its own checks find damaged as it is
    // opened (a pack's metadata checksum, a .pt pickle's CRC-32) exit 1: both one line.
    // With --json, a failure to open is a JSON verdict too (and the same exit code).
    let refused = |failure: Failure| {
        if as_json {
            print_json(&json!({
                "file": path.display().to_string(),
                "ok": false,
                "opened": false,
                "exit_code": failure.code,
                "problems": [failure.message.clone()],
            }));
        }
        failure
    };
    let source =
        crate::open::open_for_verify(path).map_err(|e| refused(crate::open::failure(&e)))?;
    // A source that opened but holds nothing to verify (a Burn record without a tensor).
    if let Some(why) = source.unusable() {
        return Err(refused(Failure::file(why)));
    }
    let tensors = source.as_tensor_source();
    let about = source.describe();
    let mut verdict = Verdict {
        file: path.display().to_string(),
        format: about.format,
        valid: about.valid.clone(),
        checked: String::new(),
        tensors: tensors.tensors().len(),
        bytes: 0,
        verified_checksums: 0,
        problems: Vec::new(),
        // What the format's reader ignores (an error in this crate's own files, refused
        // below): named, without failing the verification.
        warnings: about.warnings.clone(),
        notes: Vec::new(),
    };
    // The structure beyond what opening checks (a damaged metadata key, non-zero padding, a
    // pickle against its CRC-32): read, and found damaged.
    if let Err(e) = tensors.verify_structure() {
        if e.kind().is_unreadable() && e.kind() != burnpack::source::SourceErrorKind::Invalid {
            return Err(refused(Failure::of(&e)));
        }
        verdict.problems.push(e.to_string());
        return verdict.report(as_json, nan);
    }
    let Scan {
        problems,
        notes,
        verified,
        total,
    } = scan(tensors, path, nan).map_err(refused)?;
    let problems_found = problems.len();
    verdict.problems = problems;
    verdict.bytes = total;
    verdict.verified_checksums = verified;
    verdict.checked = match about.checksums {
        Checksums::PerTensor if problems_found == 0 => {
            format!("header and metadata checksum and all {verified} tensor checksums match")
        }
        Checksums::PerTensor => format!("{verified} tensor checksums match"),
        Checksums::ZipCrc32 => {
            format!("the archive's members and {verified} tensors' storages match their zip CRC-32")
        }
        _ => about.unverified.clone(),
    };
    verdict.notes = notes;
    verdict.notes.extend(
        about
            .notes
            .iter()
            .map(|note| format!("{}: note: {note}", path.display())),
    );
    verdict.report(as_json, nan)
}
