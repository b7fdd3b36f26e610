//! A pack written in stages: groups of entries go to the file as they become available, each
//! after the last, while the next group is still being produced elsewhere; the head, planned
//! once every entry is known, goes last.
//!
//! The head's size depends on every name, so the data section's start is reserved up front
//! (an estimate) and the final metadata is padded to end exactly there
//! ([`Plan::with_data_start`]). Should the estimate be short, the written data is moved
//! further into the file before the head is written: slower, never wrong. The file is the
//! same pack a [`Writer`](super::Writer) of all the entries (in stage order) and the padded
//! metadata would write.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::chunk::Checksums;
use super::commit::Target;
use super::entry::Entry;
use super::error::WriteError;
use super::options::WriteOptions;
use super::plan::{Plan, Slot, lay_out};
use super::slots::batches;
use super::slots::write_slots;
use super::writer::stamped;
use crate::format::{HEADER_SIZE, Scalar, align_up};
use crate::platform::{read_exact_at, write_all_at};

/// Tensor bytes from which a checkpoint part is written while the others are still being
/// serialized (below it, one pass costs less than a thread).
pub(crate) const STAGED_BYTES: u64 = 64 << 20;

/// Head bytes reserved per tensor name byte and per tensor (descriptor, checksum) when the
/// caller does not know the final head.
const PER_TENSOR: u64 = 96;

/// A pack being written in stages to one file (see the module docs).
pub(crate) struct Staged {
    target: Target,
    dest: PathBuf,
    options: WriteOptions,
    /// Where the data section starts (reserved).
    data_start: u64,
    /// End of the data written so far, relative to the data section.
    next: u64,
    /// Every entry written so far (name, dtype, shape, id, length), in file order.
    written: Vec<Entry>,
    /// Their checksums, in the same order.
    sums: Vec<u64>,
}

impl Staged {
    /// Opens the destination (a scratch sibling in atomic mode) with `head` bytes reserved
    /// for the head.
    pub(crate) fn create(
        dest: &Path,
        options: WriteOptions,
        head: u64,
    ) -> Result<Self, WriteError> {
        let data_start = align_up(head.max(HEADER_SIZE as u64 + 1))
            .ok_or_else(|| WriteError::Layout("the reserved head overflows u64".into()))?;
        Ok(Self {
            target: Target::open(dest, &options)?,
            dest: dest.to_path_buf(),
            options,
            data_start,
            next: 0,
            written: Vec::new(),
            sums: Vec::new(),
        })
    }

    /// A generous estimate of the head of a pack holding the tensors `known` describes (each
    /// as its name's length and its rank) and about `more` further tensors whose names are
    /// not known yet, plus `extra` bytes of metadata and scalars.
    pub(crate) fn estimate(
        known: impl ExactSizeIterator<Item = (usize, usize)>,
        more: usize,
        extra: u64,
    ) -> u64 {
        let count = known.len() as u64;
        let bytes: u64 = known
            .map(|(name, rank)| name as u64 + 8 * rank as u64 + PER_TENSOR)
            .sum();
        let average = bytes.checked_div(count).unwrap_or(PER_TENSOR) + PER_TENSOR;
        HEADER_SIZE as u64 + 64 + bytes + average * more as u64 + extra
    }

    /// Writes `entries` after everything written so far (in parallel, as a [`Writer`]
    /// would) and keeps what the head needs of them.
    ///
    /// [`Writer`]: super::Writer
    pub(crate) fn append(&mut self, entries: Vec<Entry>) -> Result<(), WriteError> {
        if entries.is_empty() {
            return Ok(());
        }
        let (slots, next) = lay_out(&entries, self.next)?;
        let slots: Vec<Slot> = slots
            .into_iter()
            .map(|s| Slot {
                offset: s.offset + self.data_start,
                len: s.len,
            })
            .collect();
        let end = self.data_start + next;
        self.target
            .file()
            .set_len(end)
            .map_err(|e| WriteError::io("size", self.target.path(), e))?;
        self.written.extend(entries.iter().map(Entry::husk));
        let sums = Checksums::sized(entries.len(), self.options.checksums);
        let total = end - slots[0].offset;
        let jobs = batches(entries, &slots, |i| i);
        write_slots(jobs, total, &self.target, self.options.threads, &sums, None)?;
        self.sums.extend(sums.values());
        self.next = next;
        Ok(())
    }

    /// Plans the head of everything written with `metadata` and `scalars`, writes it, and
    /// publishes the file (atomic mode: fsync, rename, directory fsync). Returns the size.
    pub(crate) fn finish(
        self,
        metadata: &BTreeMap<String, String>,
        scalars: &BTreeMap<String, Scalar>,
    ) -> Result<u64, WriteError> {
        let checksums = self.options.checksums;
        let metadata = stamped(metadata, checksums);
        let padded = Plan::with_data_start(
            &self.written,
            &metadata,
            scalars,
            checksums,
            self.data_start,
        )?;
        let plan = if let Some(plan) = padded {
            plan
        } else {
            let plan = Plan::new(&self.written, &metadata, scalars, checksums)?;
            self.relocate(plan.data_start())?;
            plan
        };
        let file = self.target.file();
        file.set_len(plan.total_size())
            .map_err(|e| WriteError::io("size", self.target.path(), e))?;
        let mut ranked = vec![0; if checksums { self.written.len() } else { 0 }];
        for (i, sum) in self.sums.iter().enumerate() {
            ranked[plan.rank(i)] = *sum;
        }
        write_all_at(file, &plan.seal(&ranked), 0)
            .map_err(|e| WriteError::io("write", self.target.path(), e))?;
        self.target
            .finish_when(&self.dest, self.options.overwrite, || {
                Ok::<(), WriteError>(())
            })?;
        Ok(plan.total_size())
    }

    /// Moves the data section from the reserved start to `to` (further into the file), last
    /// bytes first so that nothing is overwritten before it is copied; the bytes left behind
    /// are zeroed.
    fn relocate(&self, to: u64) -> Result<(), WriteError> {
        let (file, path) = (self.target.file(), self.target.path());
        // The head only ever needs more room than was reserved: a plan whose data section
        // starts before the reserved start leaves room for the padding (see
        // `Plan::with_data_start`), so the data never moves back.
        if to <= self.data_start {
            return Err(WriteError::Layout(format!(
                "the head cannot be fitted in front of the data at {} (it ends before {to})",
                self.data_start
            )));
        }
        let io = |e| WriteError::io("move the data of", path, e);
        let mut buffer = vec![0u8; (8 << 20).min(usize::try_from(self.next).unwrap_or(8 << 20))];
        let mut end = self.next;
        while end > 0 {
            let n = (buffer.len() as u64).min(end);
            let start = end - n;
            let chunk = &mut buffer[..n as usize];
            read_exact_at(file, chunk, self.data_start + start).map_err(io)?;
            write_all_at(file, chunk, to + start).map_err(io)?;
            end = start;
        }
        // What was data before the new start is now padding: zeros.
        buffer.fill(0);
        let mut at = self.data_start;
        let stop = to.min(self.data_start + self.next);
        while at < stop {
            let n = (buffer.len() as u64).min(stop - at);
            write_all_at(file, &buffer[..n as usize], at).map_err(io)?;
            at += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use burn::tensor::{Bytes, DType};

    use super::{Staged, WriteOptions};
    use crate::format::Scalar;
    use crate::read::Reader;
    use crate::write::{Entry, WriteMode, Writer};

    fn entry(name: &str, len: usize, seed: u8) -> Entry {
        let bytes: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect();
        Entry::resident(name, DType::U8, vec![len], Bytes::from_bytes_vec(bytes))
            .with_param_id(u64::from(seed))
    }

    /// Two stages of entries (names in no sorted order, odd lengths, one empty), the second
    /// with a deferred one.
    fn stages() -> (Vec<Entry>, Vec<Entry>) {
        (
            vec![
                entry("z.first", 1000, 1),
                entry("a.second", 3, 2),
                entry("m.empty", 0, 3),
            ],
            vec![
                entry("b.third", 70_000, 4),
                Entry::deferred("c.fourth", DType::U8, vec![5], 5, || {
                    Ok(Bytes::from_bytes_vec(vec![9; 5]))
                }),
            ],
        )
    }

    fn maps() -> (BTreeMap<String, String>, BTreeMap<String, Scalar>) {
        (
            BTreeMap::from([("kind".to_string(), "test".to_string())]),
            BTreeMap::from([("step".to_string(), Scalar::UInt(7))]),
        )
    }

    /// Writes the stages with `reserve` bytes of head; returns the file's bytes.
    fn staged(reserve: u64, options: WriteOptions) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("staged.bpk");
        let (first, second) = stages();
        let mut staged = Staged::create(&path, options, reserve).unwrap();
        staged.append(first).unwrap();
        staged.append(second).unwrap();
        let (metadata, scalars) = maps();
        let size = staged.finish(&metadata, &scalars).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(size, bytes.len() as u64);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no scratch file is left");
        bytes
    }

    /// What a one-pass writer of the same entries writes with `metadata`.
    fn one_pass(metadata: &BTreeMap<String, String>, checksums: bool) -> Vec<u8> {
        let (mut all, second) = stages();
        all.extend(second);
        let (_, scalars) = maps();
        let mut writer = Writer::new(all).checksums(checksums);
        for (k, v) in metadata {
            writer = writer.metadata(k.clone(), v.clone());
        }
        for (k, v) in scalars {
            writer = writer.scalar(k, v);
        }
        writer.into_bytes().unwrap().to_vec()
    }

    /// The file a staged write makes is the file a `Writer` makes of the same entries with
    /// the metadata the staged writer ended with (its padding included), and every check and
    /// Burn's own reader accept it.
    fn check(bytes: Vec<u8>, checksums: bool) -> Reader {
        let reader = Reader::from_bytes(Bytes::from_bytes_vec(bytes.clone())).unwrap();
        let metadata: BTreeMap<String, String> = reader.metadata().clone();
        assert_eq!(bytes, one_pass(&metadata, checksums));
        if checksums {
            assert_eq!(reader.verify_all().unwrap(), 5);
        }
        let burn = burn_pack::Reader::from_bytes(Bytes::from_bytes_vec(bytes)).unwrap();
        assert_eq!(burn.tensor_names().len(), 5);
        assert_eq!(burn.tensor_data("b.third").unwrap().len(), 70_000);
        assert_eq!(burn.scalars()["step"], burn_pack::Scalar::UInt(7));
        reader
    }

    #[test]
    fn a_reserved_head_is_padded_to_the_byte() {
        for reserve in [600, 1000, 4096, 70_000] {
            let reader = check(staged(reserve, WriteOptions::new()), true);
            let data_start = reader.tensors_by_position().next().unwrap().offset();
            assert_eq!(data_start, reserve.div_ceil(256) * 256, "reserve {reserve}");
            assert!(
                reader
                    .metadata()
                    .contains_key(super::super::plan::PADDING_KEY)
            );
        }
    }

    #[test]
    fn a_short_reservation_moves_the_data_and_zeroes_what_it_left() {
        // 11 bytes: nothing fits, the data moves behind the real head.
        let reader = check(staged(11, WriteOptions::new()), true);
        assert!(
            !reader
                .metadata()
                .contains_key(super::super::plan::PADDING_KEY)
        );
    }

    #[test]
    fn without_checksums_and_in_place() {
        check(staged(4096, WriteOptions::new().checksums(false)), false);
        check(staged(11, WriteOptions::new().checksums(false)), false);
        check(
            staged(4096, WriteOptions::new().mode(WriteMode::InPlace)),
            true,
        );
    }

    #[test]
    fn a_failing_stage_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("staged.bpk");
        std::fs::write(&path, b"previous").unwrap();
        let mut staged = Staged::create(&path, WriteOptions::new(), 4096).unwrap();
        staged.append(vec![entry("a", 10, 1)]).unwrap();
        let failing = Entry::deferred("b", DType::U8, vec![4], 4, || Err("no bytes today".into()));
        let err = staged.append(vec![failing]).unwrap_err();
        assert!(err.to_string().contains("'b'"), "{err}");
        drop(staged);
        assert_eq!(std::fs::read(&path).unwrap(), b"previous");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_duplicate_name_across_stages_is_refused_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("staged.bpk");
        let mut staged = Staged::create(&path, WriteOptions::new(), 4096).unwrap();
        staged.append(vec![entry("a", 10, 1)]).unwrap();
        staged.append(vec![entry("a", 3, 2)]).unwrap();
        let (metadata, scalars) = maps();
        let err = staged.finish(&metadata, &scalars).unwrap_err();
        assert!(err.to_string().contains("'a'"), "{err}");
        assert!(!path.exists());
    }
}
