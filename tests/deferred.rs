//! The parallel writer's memory bound: deferred entries are produced only when written, each
//! exactly once, and never more at once than the producer threads hold, the chunk being
//! written included (small neighbours travel together, up to 1 MiB a chunk).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use burn::tensor::{AllocationProperty, Bytes, DType};
use burnpack::{Entry, Writer, read::Reader};

/// Counts live materialized entries and the peak.
#[derive(Default)]
struct Gauge {
    live: AtomicUsize,
    peak: AtomicUsize,
    produced: AtomicUsize,
}

/// An entry's backing that leaves the gauge when dropped.
struct Tracked {
    data: Vec<u8>,
    gauge: Arc<Gauge>,
}

impl AsRef<[u8]> for Tracked {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.gauge.live.fetch_sub(1, Ordering::SeqCst);
    }
}

fn tracked_entries(gauge: &Arc<Gauge>, count: usize, len: usize) -> Vec<Entry> {
    (0..count)
        .map(|i| {
            let gauge = gauge.clone();
            Entry::deferred(
                format!("layer.{i}"),
                DType::U8,
                vec![len],
                len as u64,
                move || {
                    let now = gauge.live.fetch_add(1, Ordering::SeqCst) + 1;
                    gauge.peak.fetch_max(now, Ordering::SeqCst);
                    gauge.produced.fetch_add(1, Ordering::SeqCst);
                    // Stay alive long enough for other workers to overlap.
                    std::thread::sleep(Duration::from_millis(5));
                    let data = vec![i as u8; len];
                    Ok(Bytes::from_shared(
                        bytes::Bytes::from_owner(Tracked {
                            data,
                            gauge: gauge.clone(),
                        }),
                        AllocationProperty::Native,
                    ))
                },
            )
        })
        .collect()
}

#[test]
fn at_most_one_materialized_chunk_per_thread_the_one_written_included() {
    let dir = tempfile::tempdir().unwrap();
    // Entries of 1 MiB and more are chunks of their own; 64 KiB ones go 16 to a chunk.
    for (len, per_chunk) in [(1 << 20, 1), (64 << 10, 16)] {
        for threads in [1, 3] {
            let gauge = Arc::new(Gauge::default());
            let path = dir.path().join(format!("t{threads}.bpk"));
            Writer::new(tracked_entries(&gauge, 40, len))
                .threads(threads)
                .write_to_file(&path)
                .unwrap();
            let peak = gauge.peak.load(Ordering::SeqCst);
            assert!(
                peak <= threads * per_chunk,
                "{peak} entries of {len} bytes were live at once with {threads} threads"
            );
            assert_eq!(
                gauge.live.load(Ordering::SeqCst),
                0,
                "every entry was dropped"
            );
            assert_eq!(
                gauge.produced.load(Ordering::SeqCst),
                40,
                "every provider ran once"
            );
            if threads > 1 {
                assert!(peak >= 2, "entries were never written in parallel");
            }
            let reader = Reader::open(&path).unwrap();
            for i in 0..40 {
                assert!(
                    reader
                        .bytes(&format!("layer.{i}"))
                        .unwrap()
                        .iter()
                        .all(|&b| b == i as u8)
                );
            }
        }
    }
}

#[test]
fn nothing_is_produced_before_the_write() {
    let gauge = Arc::new(Gauge::default());
    let writer = Writer::new(tracked_entries(&gauge, 5, 1024));
    let size = writer.size().unwrap();
    let plan = writer.plan().unwrap();
    assert_eq!(plan.total_size(), size);
    assert_eq!(
        gauge.produced.load(Ordering::SeqCst),
        0,
        "planning must not produce bytes"
    );
    let bytes = writer.threads(2).into_bytes().unwrap();
    assert_eq!(bytes.len() as u64, size);
    assert_eq!(gauge.produced.load(Ordering::SeqCst), 5);
}

/// Burn's writer contract: with one thread, each deferred tensor is freed before the next is
/// produced (a model larger than memory is written one tensor at a time), to a file in both
/// modes and to memory.
#[test]
fn with_one_thread_each_tensor_is_freed_before_the_next_is_produced() {
    use burnpack::WriteMode;
    let dir = tempfile::tempdir().unwrap();
    for sink in ["atomic", "in place", "memory"] {
        let gauge = Arc::new(Gauge::default());
        let writer = Writer::new(tracked_entries(&gauge, 4, 1 << 20)).threads(1);
        let path = dir.path().join(format!("{sink}.bpk"));
        match sink {
            "atomic" => drop(writer.write_to_file(&path).unwrap()),
            "in place" => drop(
                writer
                    .mode(WriteMode::InPlace)
                    .write_to_file(&path)
                    .unwrap(),
            ),
            _ => drop(writer.into_bytes().unwrap()),
        }
        assert_eq!(gauge.produced.load(Ordering::SeqCst), 4, "{sink}");
        assert_eq!(
            gauge.peak.load(Ordering::SeqCst),
            1,
            "{sink}: a tensor was produced while the previous one was alive"
        );
        assert_eq!(gauge.live.load(Ordering::SeqCst), 0, "{sink}");
    }
}
