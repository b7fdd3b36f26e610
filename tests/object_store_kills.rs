//! Incremental checkpoints on object storage under kills: a child process saving incremental
//! checkpoints (a LoRA-shaped model: a frozen base, a large tensor that changes now and then,
//! trained adapters and their Adam state) to an S3 server is SIGKILLed at random moments, again
//! and again; an S3 server is SIGKILLed in the middle of a save's data upload and of its
//! manifest upload, then restarted. After each: every listed checkpoint opens, verifies (every
//! tensor against its checksum and recorded hash) and loads the model it saved, and the next
//! save deletes only the data objects no checkpoint names, all of them.
//!
//! Against the server `AWS_ENDPOINT` points to (`BURNPACK_S3_BUCKET`) and servers of the
//! tests' own (`BURNPACK_S3S_FS`); `.ci/run` provides both, and under CI a missing one fails.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burn::module::{Module, Param, ParamId};
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor, TensorData};
use burnpack::checkpoint::{Progress, SaveReport, Storage, TrainingState, content_hash};
use burnpack::interop::object_store::{
    ObjectLocation, ObjectPrefix, RemoteCheckpointManager, UploadOptions,
};
use common::s3::{OwnServer, s3s_fs};
use common::s3_bucket;

/// A frozen base under a trained rank-16 adapter; every [`HEAD_EVERY`] steps, a large new
/// tensor beside them (a save's data object that goes up in several parts).
#[derive(Module, Debug)]
struct Lora {
    base: Param<Tensor<2>>,
    head: Option<Param<Tensor<2>>>,
    down: Param<Tensor<2>>,
    up: Param<Tensor<2>>,
}

/// The base's input and output width: a 1 MiB base.
const WIDTH: usize = 256;
const OUT: usize = 1024;
const RANK: usize = 16;
/// `head` is 5.25 MiB: more than one 5 MiB part.
const HEAD_ROWS: usize = 1344;
const HEAD_EVERY: u64 = 4;

/// Whether the model of `step` has a head.
fn has_head(step: u64) -> bool {
    step % HEAD_EVERY == 0
}

fn ramp(n: usize, seed: u64) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            ((i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(97)) % 1000) as f32 / 1000.0 - 0.5
        })
        .collect()
}

/// A parameter of deterministic values, and of the id `id` (the optimizer's state is keyed by
/// ids: the same in every process).
fn param(
    shape: [usize; 2],
    id: u64,
    seed: u64,
    trained: bool,
    device: &Device,
) -> Param<Tensor<2>> {
    let data = TensorData::new(ramp(shape[0] * shape[1], seed), shape);
    let mut param = Param::from_tensor(Tensor::from_data(data, device)).set_require_grad(trained);
    param.id = ParamId::from(id);
    param
}

impl Lora {
    /// The model before the training step of `step`: the same base always, a head of its own
    /// where [`has_head`], adapters of `step`.
    fn before(step: u64, device: &Device) -> Self {
        Self {
            base: param([WIDTH, OUT], 1, 1, false, device),
            head: has_head(step).then(|| param([HEAD_ROWS, OUT], 2, 1000 + step, false, device)),
            down: param([WIDTH, RANK], 3, 2000 + step, true, device),
            up: param([RANK, OUT], 4, 3000 + step, true, device),
        }
    }

    /// The shapes of the model of `step`, to load into.
    fn empty(step: u64, device: &Device) -> Self {
        let zeros = |shape: [usize; 2]| Param::from_tensor(Tensor::zeros(shape, device));
        Self {
            base: zeros([WIDTH, OUT]),
            head: has_head(step).then(|| zeros([HEAD_ROWS, OUT])),
            down: zeros([WIDTH, RANK]),
            up: zeros([RANK, OUT]),
        }
    }

    /// The hash of each parameter's bytes.
    fn hashes(&self) -> Vec<u128> {
        [
            Some(&self.base),
            self.head.as_ref(),
            Some(&self.down),
            Some(&self.up),
        ]
        .into_iter()
        .flatten()
        .map(|p| content_hash(&p.val().into_data().into_bytes()))
        .collect()
    }
}

/// What is saved at `step`: [`Lora::before`] after one Adam step on a batch of `step`, and the
/// optimizer with its state (the adapters' moments). The same in every process.
fn state(step: u64) -> (Lora, ModuleOptimizer) {
    let device = Device::flex().autodiff();
    let model = Lora::before(step, &device);
    let xs = TensorData::new(ramp(8 * WIDTH, 5000 + step), [8, WIDTH]);
    let x: Tensor<2> = Tensor::from_data(xs, &device);
    let y = x.clone().matmul(model.base.val()) + x.matmul(model.down.val()).matmul(model.up.val());
    let loss = y.powf_scalar(2.0).mean();
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    let mut optim: ModuleOptimizer = AdamConfig::new().init();
    let model = optim.step(1e-2, model, grads);
    (model, optim)
}

fn parts() -> UploadOptions {
    UploadOptions::new().part_size(5 << 20).parts_in_flight(2)
}

/// The manager every process of a test uses: incremental, the last 3 kept.
fn configured(manager: RemoteCheckpointManager) -> RemoteCheckpointManager {
    manager
        .incremental(true)
        .keep_last(3)
        .upload_options(parts())
}

fn save(manager: &RemoteCheckpointManager, step: u64) -> SaveReport<ObjectLocation> {
    let (model, optim) = state(step);
    manager
        .save(TrainingState::new(&model, Progress::new(0, step)).optimizer(&optim))
        .unwrap_or_else(|e| panic!("the save of step {step}: {e}"))
}

fn names(storage: &ObjectPrefix) -> BTreeSet<String> {
    storage.names().unwrap().into_iter().collect()
}

fn data_objects(names: &BTreeSet<String>) -> BTreeSet<String> {
    names
        .iter()
        .filter(|n| n.starts_with("data-"))
        .cloned()
        .collect()
}

/// The hashes of each step's parameters and of its optimizer's record, computed once.
#[derive(Default)]
struct Expected(HashMap<u64, (Vec<u128>, u128)>);

impl Expected {
    fn of(&mut self, step: u64) -> &(Vec<u128>, u128) {
        self.0.entry(step).or_insert_with(|| {
            let (model, optim) = state(step);
            (model.hashes(), record_hash(&optim))
        })
    }
}

/// The optimizer's state: each tensor of its record by name, with its checksum (the record's
/// bytes list its tensors in no fixed order).
fn record_hash(optim: &ModuleOptimizer) -> u128 {
    let bytes = optim.to_record().into_bytes().unwrap();
    let reader = burnpack::read::Reader::from_bytes(bytes).unwrap();
    let mut tensors: Vec<String> = reader
        .layout()
        .tensors()
        .iter()
        .map(|t| format!("{} {:?} {:?}", t.name(), t.shape(), t.checksum()))
        .collect();
    tensors.sort();
    assert!(tensors.len() >= 4, "no Adam moments: {tensors:?}");
    content_hash(tensors.join("\n").as_bytes())
}

/// Every checkpoint `manager` lists opens, verifies every tensor (checksum and recorded hash),
/// loads the model it saved (bit for bit) and its optimizer state. Returns the data objects
/// the checkpoints name, and the steps listed.
fn all_load(
    manager: &RemoteCheckpointManager,
    expected: &mut Expected,
    when: &str,
) -> (BTreeSet<String>, Vec<u64>) {
    let device = Device::flex();
    let mut named = BTreeSet::new();
    let steps: Vec<u64> = manager.list().unwrap().iter().map(|c| c.step).collect();
    for &step in &steps {
        let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
            panic!("{when}: checkpoint {step} of {steps:?}: {what}: {e}")
        };
        let ckpt = manager
            .checkpoint(step)
            .unwrap_or_else(|e| fail("does not open", &e));
        let chain = ckpt.chain().expect("an incremental checkpoint");
        named.extend(chain.data_files().map(|(name, _)| name.to_string()));
        let checked = ckpt
            .verify()
            .unwrap_or_else(|e| fail("does not verify", &e));
        assert!(checked >= 3, "{when}: {checked} tensors checked in {step}");
        let model = ckpt
            .load_model(Lora::empty(step, &device))
            .unwrap_or_else(|e| fail("the model does not load", &e));
        let (params, record) = expected.of(step);
        assert!(
            model.hashes() == *params,
            "{when}: checkpoint {step} holds another model than the one saved"
        );
        let optim = ckpt
            .load_optimizer(AdamConfig::new().init())
            .unwrap_or_else(|e| fail("the optimizer does not load", &e));
        assert!(
            record_hash(&optim) == *record,
            "{when}: checkpoint {step} holds another optimizer state than the one saved"
        );
    }
    (named, steps)
}

/// Saves `step` (after a kill; `named` the data objects the checkpoints name, as
/// [`all_load`] found them): the save deletes only data objects no remaining checkpoint names,
/// and every data object that no checkpoint named before it; afterwards every checkpoint
/// loads, and every data object is named. Returns how many data objects it deleted.
fn next_save_collects_only_unnamed(
    manager: &RemoteCheckpointManager,
    step: u64,
    named: &BTreeSet<String>,
    expected: &mut Expected,
    when: &str,
) -> usize {
    let before = data_objects(&names(manager.storage()));
    let strays: BTreeSet<&String> = before.difference(named).collect();
    save(manager, step);
    let after = data_objects(&names(manager.storage()));
    let when = format!("{when}, after the save of {step}");
    let (named_after, steps) = all_load(manager, expected, &when);
    assert_eq!(steps.last(), Some(&step), "{when}");
    let missing: Vec<_> = named_after.difference(&after).collect();
    assert!(missing.is_empty(), "{when}: named but gone: {missing:?}");
    let deleted: Vec<&String> = before.difference(&after).collect();
    for gone in &deleted {
        assert!(
            !named_after.contains(*gone),
            "{when}: {gone} was deleted, and a checkpoint names it"
        );
    }
    let kept: Vec<_> = strays.iter().filter(|s| after.contains(**s)).collect();
    assert!(
        kept.is_empty(),
        "{when}: unnamed data objects left: {kept:?}"
    );
    let unnamed: Vec<_> = after.difference(&named_after).collect();
    assert!(
        unnamed.is_empty(),
        "{when}: unnamed data objects: {unnamed:?}"
    );
    deleted.len()
}

const CHILD_PREFIX: &str = "BURNPACK_S3_KILL_PREFIX";
const CHILD_LOG: &str = "BURNPACK_S3_KILL_LOG";

fn millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// The saving process: from the latest step on, saves the checkpoint of each step (at most
/// 500), logging `save <step> <ms>` before and `saved <step> <ms>` after each (unbuffered, so
/// that the log survives the kill).
#[test]
#[ignore = "run by killed_incremental_savers_lose_nothing_on_s3"]
fn incremental_saving_child() {
    let (Ok(url), Ok(log)) = (std::env::var(CHILD_PREFIX), std::env::var(CHILD_LOG)) else {
        return;
    };
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(log)
        .unwrap();
    let manager = configured(RemoteCheckpointManager::parse(&url).unwrap());
    let mut step = manager.list().unwrap().last().map_or(0, |c| c.step);
    writeln!(log, "ready 0 {}", millis()).unwrap();
    for _ in 0..500 {
        step += 1;
        let (model, optim) = state(step);
        writeln!(log, "save {step} {}", millis()).unwrap();
        manager
            .save(TrainingState::new(&model, Progress::new(0, step)).optimizer(&optim))
            .unwrap();
        writeln!(log, "saved {step} {}", millis()).unwrap();
    }
}

/// A small xorshift: the kills' moments (the seed is printed, and `BURNPACK_KILL_SEED` replays
/// it).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// The lines of a child's log: `(word, step, ms)`.
fn log_lines(path: &Path) -> Vec<(String, u64, u128)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.split(' ');
            Some((
                w.next()?.to_string(),
                w.next()?.parse().ok()?,
                w.next()?.parse().ok()?,
            ))
        })
        .collect()
}

const KILLS: usize = 24;

/// A child process, killed when dropped (a failing test leaves no saver behind).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A child saving incremental checkpoints to the bucket, SIGKILLed 24 times: a third at random
/// moments (landing in hashing, data uploads, manifest uploads, retention, collection, or
/// between saves), the others while one of its requests is held half sent by a proxy: a data
/// object's upload, a manifest's, retention's delete of a checkpoint, the collection's delete
/// of a data object (4 each). After each kill, every listed checkpoint loads and verifies, and
/// the next save (here) collects only unnamed data objects, all of them.
#[cfg(unix)]
#[test]
fn killed_incremental_savers_lose_nothing_on_s3() {
    let Some(bucket) = s3_bucket() else { return };
    let started = Instant::now();
    let url = format!("s3://{bucket}/{}-kills/run", std::process::id());
    let manager = configured(RemoteCheckpointManager::parse(&url).unwrap());
    let seed = std::env::var("BURNPACK_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(millis() as u64 | 1);
    eprintln!("kill seed {seed} (BURNPACK_KILL_SEED replays it)");
    let mut rng = Rng(seed);
    let mut expected = Expected::default();
    let dir = tempfile::tempdir().unwrap();
    // Where the kills landed, by phase.
    let mut phases: HashMap<&str, usize> = HashMap::new();
    // The mean time from one save's start to the next's, as measured in the children.
    let mut save_ms: Vec<u128> = Vec::new();
    let mut deleted = 0;
    // The child's requests through a proxy (the server is plain HTTP, as `.ci/run` starts it).
    let proxy = std::env::var("AWS_ENDPOINT")
        .ok()
        .and_then(|e| Some(e.strip_prefix("http://")?.trim_end_matches('/').to_string()))
        .map(Proxy::start);
    if proxy.is_none() {
        common::skip("AWS_ENDPOINT is no http:// address: the kills are at random moments only");
    }
    let in_bucket = format!("{}-kills/run/", std::process::id());
    let on_the_wire = format!("/{bucket}/{in_bucket}");
    // Deletes go as bulk deletes (`POST /<bucket>?delete`), the keys in the body.
    let targets = [
        (
            "held in a data object's upload",
            format!("PUT {on_the_wire}data-"),
        ),
        (
            "held in a manifest's upload",
            format!("PUT {on_the_wire}ckpt-"),
        ),
        (
            "held in retention's delete of a checkpoint",
            format!("<Key>{in_bucket}ckpt-"),
        ),
        (
            "held in the collection's delete of a data object",
            format!("<Key>{in_bucket}data-"),
        ),
    ];
    for kill in 0..KILLS {
        let target = proxy.as_ref().filter(|_| kill % 3 != 0).map(|proxy| {
            let (phase, marker) = &targets[(kill - kill / 3 - 1) % targets.len()];
            (*phase, proxy.arm(marker))
        });
        let log = dir.path().join(format!("log-{kill}"));
        let mut child = Reaped(
            std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "incremental_saving_child", "--ignored"])
                .args(["--nocapture", "--test-threads=1"])
                .env(CHILD_PREFIX, &url)
                .env(CHILD_LOG, &log)
                .envs(
                    proxy
                        .as_ref()
                        .map(|p| ("AWS_ENDPOINT", format!("http://127.0.0.1:{}", p.port))),
                )
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        let child = &mut child.0;
        let deadline = Instant::now() + Duration::from_secs(60);
        while log_lines(&log).is_empty() {
            assert!(Instant::now() < deadline, "the child never started");
            assert!(
                child.try_wait().unwrap().is_none(),
                "the child exited early"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let cycle = if save_ms.is_empty() {
            300
        } else {
            save_ms.iter().sum::<u128>() / save_ms.len() as u128
        };
        if let Some((phase, held)) = &target {
            held.recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("kill {kill}: the child's saves never got {phase}"));
        } else {
            // Within the first few saves: a moment anywhere in them.
            std::thread::sleep(Duration::from_millis(rng.below(3 * cycle as u64)));
        }
        child.kill().unwrap(); // SIGKILL
        assert!(!child.wait().unwrap().success());
        if let Some(proxy) = &proxy {
            proxy.disarm();
        }

        let lines = log_lines(&log);
        save_ms.extend(
            lines
                .windows(2)
                .filter_map(|w| (w[0].0 == "save" && w[1].0 == "saved").then(|| w[1].2 - w[0].2)),
        );
        let all = names(manager.storage());
        let when = format!("kill {kill}");
        let (named, steps) = all_load(&manager, &mut expected, &when);
        let unnamed = data_objects(&all).difference(&named).count();
        let phase = match lines.last().unwrap() {
            (word, _, _) if target.is_some() => {
                assert_eq!(word, "save", "kill {kill}: held, and not in a save");
                target.as_ref().unwrap().0
            }
            (word, _, _) if word != "save" => "between saves",
            (_, step, _) if all.contains(&format!("ckpt-{step:020}.bpk")) => {
                if steps.len() > 3 {
                    "after its manifest, before retention had deleted (reopen, retention)"
                } else if unnamed > 0 {
                    "in the collection of data objects"
                } else {
                    "after the manifest (its reopening, or once all was done)"
                }
            }
            (_, step, _)
                if all
                    .iter()
                    .any(|n| n.starts_with(&format!("data-{step:020}-"))) =>
            {
                "after a data object, before the manifest was up"
            }
            _ => "before its data objects were up (hashing, uploads)",
        };
        *phases.entry(phase).or_default() += 1;
        let when = format!("kill {kill} ({phase})");
        let next = steps.last().map_or(1, |s| s + 1);
        deleted += next_save_collects_only_unnamed(&manager, next, &named, &mut expected, &when);
    }
    let mid_save: usize = phases
        .iter()
        .filter(|(p, _)| **p != "between saves" && !p.starts_with("held"))
        .map(|(_, n)| n)
        .sum();
    eprintln!(
        "{KILLS} kills in {:.1} s ({mid_save} at random moments mid-save; a save took {} ms on \
         average): {phases:?}; \
         the next saves deleted {deleted} unnamed data objects",
        started.elapsed().as_secs_f64(),
        save_ms.iter().sum::<u128>() / save_ms.len().max(1) as u128,
    );
    let random = if proxy.is_some() { KILLS / 3 } else { KILLS };
    assert!(
        mid_save >= random / 2,
        "only {mid_save} of {random} kills at random moments landed in a save: {phases:?}"
    );
}

/// A TCP proxy in front of a server: forwards both ways, and once armed with a marker, holds
/// the first request that contains it part sent and says so, so that the server or the client
/// can be killed mid-request: a request with a body is held halfway through its body (its
/// headers and part of its body reach the server), one without in its request line.
struct Proxy {
    port: u16,
    armed: Arc<Mutex<Option<(String, Sender<()>)>>>,
}

impl Proxy {
    /// A proxy to `upstream` (`host:port`).
    fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed: Arc<Mutex<Option<(String, Sender<()>)>>> = Arc::default();
        let shared = Arc::clone(&armed);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let (armed, upstream) = (Arc::clone(&shared), upstream.clone());
                std::thread::spawn(move || pump(client, &upstream, &armed));
            }
        });
        Self { port, armed }
    }

    /// Holds the next request containing `marker`; the receiver hears when it is held.
    fn arm(&self, marker: &str) -> Receiver<()> {
        let (tx, rx) = std::sync::mpsc::channel();
        *self.armed.lock().unwrap() = Some((marker.to_string(), tx));
        rx
    }

    /// Holds nothing.
    fn disarm(&self) {
        self.armed.lock().unwrap().take();
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Whether the request whose headers are `head` has a body.
fn has_body(head: &[u8]) -> bool {
    String::from_utf8_lossy(head).lines().any(|line| {
        let line = line.to_ascii_lowercase();
        line.strip_prefix("content-length:")
            .is_some_and(|n| n.trim().parse::<u64>().is_ok_and(|n| n > 0))
    })
}

fn pump(mut client: TcpStream, upstream: &str, armed: &Mutex<Option<(String, Sender<()>)>>) {
    let Ok(mut server) = TcpStream::connect(upstream) else {
        return;
    };
    let (Ok(mut back_from), Ok(mut back_to)) = (server.try_clone(), client.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut back_from, &mut back_to);
        let _ = back_to.shutdown(std::net::Shutdown::Both);
    });
    let mut buf = vec![0u8; 64 << 10];
    // A held request whose body has not come yet: held in its first chunk of body.
    let mut in_body: Option<Sender<()>> = None;
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let (upto, held) = if let Some(held) = in_body.take() {
            (n / 2, held)
        } else {
            let hit = {
                let mut armed = armed.lock().unwrap();
                let here = armed
                    .as_ref()
                    .and_then(|(marker, _)| Some((find(chunk, marker.as_bytes())?, marker.len())));
                here.and_then(|at| Some((at, armed.take()?.1)))
            };
            let Some(((at, len), held)) = hit else {
                if server.write_all(chunk).is_err() {
                    return;
                }
                continue;
            };
            match find(&chunk[at..], b"\r\n\r\n").map(|end| at + end + 4) {
                Some(body) if has_body(&chunk[at..body]) && body == n => {
                    // The headers now, the body in the next chunk.
                    if server.write_all(chunk).is_err() {
                        return;
                    }
                    in_body = Some(held);
                    continue;
                }
                Some(body) if has_body(&chunk[at..body]) => (body + (n - body) / 2, held),
                _ => (at + len, held),
            }
        };
        let _ = server.write_all(&chunk[..upto]);
        let _ = held.send(());
        // The rest never leaves: the connection stays open until its client or server dies.
        std::thread::sleep(Duration::from_secs(30));
        return;
    }
}

/// Kills `server` (SIGKILL) while the proxy holds the request of a save of `step` that
/// contains `marker`: the save fails.
fn kill_server_during(
    server: &mut OwnServer,
    proxy: &Proxy,
    manager: &RemoteCheckpointManager,
    step: u64,
    marker: &str,
) {
    let held = proxy.arm(marker);
    let saving = manager.clone();
    let saver = std::thread::spawn(move || {
        let (model, optim) = state(step);
        saving
            .save(TrainingState::new(&model, Progress::new(0, step)).optimizer(&optim))
            .map(|r| r.location.to_string())
    });
    held.recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|_| panic!("no request with {marker:?} in the save of {step}"));
    std::thread::sleep(Duration::from_millis(50)); // the server is reading the request
    server.kill();
    match saver.join().unwrap() {
        Ok(at) => panic!("the save of {step} returned Ok ({at}) with the server killed"),
        Err(e) => assert!(e.to_string().contains("run/"), "{e}"),
    }
}

/// The server killed (SIGKILL) while an incremental save uploads a data object, then while it
/// uploads the manifest, and restarted: each save fails, every listed checkpoint still loads
/// and verifies, and the next save succeeds and collects only unnamed data objects (the dead
/// save's), all of them.
#[test]
fn a_server_killed_mid_save_loses_no_checkpoint() {
    let Some(bin) = s3s_fs() else { return };
    let mut server = OwnServer::start(bin, "ckpts");
    let proxy = Proxy::start(format!("127.0.0.1:{}", server.port));
    let manager = configured(RemoteCheckpointManager::new(
        OwnServer::client(proxy.port, "ckpts"),
        "run",
    ));
    let mut expected = Expected::default();
    for step in 1..=3 {
        save(&manager, step);
    }
    // Step 4 has a head (5.25 MiB: a multipart upload); the kill comes in its first part.
    kill_server_during(&mut server, &proxy, &manager, 4, "PUT /ckpts/run/data-");
    // Mid-upload: the server had begun to store the part (s3s-fs writes what it receives
    // into `.tmp.<n>.internal.part` files, removed when it starts again).
    let receiving = std::fs::read_dir(server.root.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".part"))
        })
        .count();
    assert!(
        receiving > 0,
        "the server was not receiving the data object"
    );
    server.restart();
    let (named, steps) = all_load(
        &manager,
        &mut expected,
        "the server killed in a data upload",
    );
    assert_eq!(steps, [1, 2, 3], "no checkpoint of 4");
    next_save_collects_only_unnamed(&manager, 4, &named, &mut expected, "after a data upload");

    // The manifest's upload: the data objects are up, the manifest never arrives.
    kill_server_during(&mut server, &proxy, &manager, 5, "PUT /ckpts/run/ckpt-");
    server.restart();
    let strays = data_objects(&names(manager.storage()))
        .into_iter()
        .filter(|n| n.starts_with(&format!("data-{:020}-", 5)))
        .count();
    assert!(strays > 0, "the save of 5 had written no data object");
    let (named, steps) = all_load(
        &manager,
        &mut expected,
        "the server killed in a manifest upload",
    );
    assert_eq!(steps, [2, 3, 4], "no checkpoint of 5");
    let deleted = next_save_collects_only_unnamed(
        &manager,
        5,
        &named,
        &mut expected,
        "after a manifest upload",
    );
    assert!(deleted >= strays, "{deleted} deleted, {strays} strays");
}
