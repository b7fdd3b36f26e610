//! An `s3s-fs` server of a test's own (feature `object-store`): started on a free port of
//! 127.0.0.1 with its objects in a temporary directory, killed with SIGKILL and restarted on
//! the same data, for the tests of object storage under failures.

use std::sync::Arc;

use burnpack::interop::object_store::Bucket;

/// The path of an `s3s-fs` binary (an S3 server that keeps objects on disk, so it can be
/// killed and restarted), from `BURNPACK_S3S_FS`; `None` (said on stderr) outside CI.
pub fn s3s_fs() -> Option<std::path::PathBuf> {
    let bin = std::env::var_os("BURNPACK_S3S_FS").map(Into::into);
    if bin.is_none() {
        super::skip("BURNPACK_S3S_FS is not set (.ci/run installs s3s-fs)");
    }
    bin
}

/// An S3 server of this test's own, on 127.0.0.1, with its objects in a temporary directory.
pub struct OwnServer {
    bin: std::path::PathBuf,
    /// The directory holding its buckets (each a directory) and objects.
    pub root: tempfile::TempDir,
    /// The port it listens on.
    pub port: u16,
    child: Option<std::process::Child>,
}

impl OwnServer {
    pub fn start(bin: std::path::PathBuf, bucket: &str) -> Self {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join(bucket)).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut server = Self {
            bin,
            root,
            port,
            child: None,
        };
        server.restart();
        server
    }

    /// Starts the server (again, on the same directory) and waits until it listens.
    pub fn restart(&mut self) {
        let child = std::process::Command::new(&self.bin)
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", "burnpack", "--secret-key", "burnpack"])
            .arg(self.root.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "s3s-fs did not start");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// SIGKILL: the server dies with whatever it was doing.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// A client of `bucket` that gives up quickly on a dead server (one retry, two seconds).
    pub fn bucket(&self, bucket: &str) -> Arc<dyn Bucket> {
        Self::client(self.port, bucket)
    }

    /// A client of `bucket` on whatever listens on `port` of 127.0.0.1 (this server, or a
    /// proxy in front of it), giving up quickly as [`bucket`](Self::bucket)'s does.
    pub fn client(port: u16, bucket: &str) -> Arc<dyn Bucket> {
        let store = ::object_store::aws::AmazonS3Builder::new()
            .with_endpoint(format!("http://127.0.0.1:{port}"))
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id("burnpack")
            .with_secret_access_key("burnpack")
            .with_bucket_name(bucket)
            .with_retry(::object_store::RetryConfig {
                max_retries: 1,
                retry_timeout: std::time::Duration::from_secs(2),
                ..Default::default()
            })
            .build()
            .unwrap();
        Arc::new(store)
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.kill();
    }
}
