//! Writes files of N MiB into the page cache from a ready, touched buffer, four ways (one
//! `write`, 8 MiB writes, 8 MiB writes with `sync_file_range` every 32 MiB, one `write` without
//! fsync), four rounds, and prints wall and CPU time (`getrusage(RUSAGE_SELF)`) of the write
//! and of the fsync. Env: `GAP_SECS` (pause before each write, default 0), `WARM=1` (write and
//! delete a file of the same size right before each measured write).
use std::io::Write;
use std::time::{Duration, Instant};
use std::os::unix::io::AsRawFd;
fn cpu() -> Duration {
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
        tv(u.ru_utime) + tv(u.ru_stime)
    }
}
fn main() {
    let n: usize = std::env::args().nth(1).map(|s| s.parse().unwrap()).unwrap_or(512) << 20;
    let dir = std::env::args().nth(2).unwrap_or(".".into());
    let buf = vec![1u8; n];
    let path = format!("{dir}/probe.bin");
    // Seconds between writes (`GAP_SECS`, default 0: back to back).
    let gap: u64 = std::env::var("GAP_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    for round in 0..4 {
        for variant in ["one-write", "chunks-8m", "chunks-8m-sfr", "one-write-no-fsync"] {
            let _ = std::fs::remove_file(&path);
            std::thread::sleep(std::time::Duration::from_secs(gap));
            if std::env::var_os("WARM").is_some() {
                let wp = format!("{dir}/warm.bin");
                let mut wf = std::fs::File::create(&wp).unwrap();
                wf.write_all(&buf).unwrap();
                drop(wf);
                std::fs::remove_file(&wp).unwrap();
            }
            let (t0, c0) = (Instant::now(), cpu());
            let mut f = std::fs::File::create(&path).unwrap();
            match variant {
                "one-write" | "one-write-no-fsync" => f.write_all(&buf).unwrap(),
                _ => {
                    let mut done = 0;
                    for c in buf.chunks(8 << 20) {
                        f.write_all(c).unwrap();
                        done += c.len();
                        if variant == "chunks-8m-sfr" && done % (32 << 20) == 0 {
                            unsafe { libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE); }
                        }
                    }
                }
            }
            let (t1, c1) = (Instant::now(), cpu());
            if variant != "one-write-no-fsync" { f.sync_all().unwrap(); }
            let (t2, c2) = (Instant::now(), cpu());
            println!("{round} {variant:20} write {:6.0} ms cpu {:5.0} | fsync {:6.0} ms cpu {:5.0} | total {:6.0} cpu {:5.0}",
                (t1-t0).as_secs_f64()*1e3, (c1-c0).as_secs_f64()*1e3, (t2-t1).as_secs_f64()*1e3, (c2-c1).as_secs_f64()*1e3,
                (t2-t0).as_secs_f64()*1e3, (c2-c0).as_secs_f64()*1e3);
            drop(f);
            if variant == "one-write-no-fsync" { unsafe { libc::sync(); } }
        }
    }
    let _ = std::fs::remove_file(&path);
}
