//! A real S3-compatible server for tests: moto's server, `python3 -m moto.server` (installed
//! by .ci/run with `pip install 'moto[server]'`), started on a free port of 127.0.0.1 and
//! stopped on drop.
//! Buckets are created and files uploaded with plain HTTP requests written here, so the data
//! a test reads through signalql did not go in through signalql.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The credentials tests give the engine (moto accepts any).
pub const ACCESS_KEY: &str = "signalql-test";
pub const SECRET_KEY: &str = "signalql-secret";

/// The `signalql` binary with exactly the AWS variables in `env` (none inherited from the
/// test's own environment).
pub fn signalql_command(env: &[(&str, String)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_signalql"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    cmd
}

/// moto does not check signatures, but it wants a signed-looking request to treat it as S3
/// from a known account (an anonymous GET is refused).
const AUTHORIZATION: &str = "AWS4-HMAC-SHA256 Credential=signalql-test/20260101/us-east-1/s3/\
    aws4_request, SignedHeaders=host, Signature=0";

pub struct S3Server {
    child: Child,
    port: u16,
}

impl S3Server {
    pub fn start() -> S3Server {
        super::python_package("moto.server", "moto[server]>=5.1,<6");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = Command::new("python3")
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start python3 -m moto.server ({e}): the S3 tests need it; \
                     install it with pip install 'moto[server]' (.ci/run does)"
                )
            });
        let server = S3Server { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while server.request("GET", "/", &[]).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto did not start; is it installed? pip install 'moto[server]' (.ci/run does)"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        server
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Environment variables that point the CLI at this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }

    /// Engine storage options that point at this server (for in-process tests, which cannot
    /// set environment variables).
    pub fn storage(&self) -> signalql::catalog::StorageOptions {
        signalql::catalog::StorageOptions {
            s3_endpoint: Some(self.endpoint()),
            s3: vec![
                ("aws_access_key_id".into(), ACCESS_KEY.into()),
                ("aws_secret_access_key".into(), SECRET_KEY.into()),
                ("aws_allow_http".into(), "true".into()),
            ],
        }
    }

    /// One HTTP/1.1 request; the status code and body.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\n\
             Content-Type: application/octet-stream\r\nAuthorization: {AUTHORIZATION}\r\n\
             Connection: close\r\n\r\n",
            self.port,
            body.len()
        )?;
        stream.write_all(body)?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response)?;
        let text = String::from_utf8_lossy(&response);
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad response: {text}")))?;
        let body_at = text.find("\r\n\r\n").map_or(response.len(), |i| i + 4);
        Ok((status, response[body_at..].to_vec()))
    }

    pub fn create_bucket(&self, bucket: &str) {
        let (status, body) = self.request("PUT", &format!("/{bucket}"), &[]).unwrap();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }

    pub fn put(&self, bucket: &str, key: &str, bytes: &[u8]) {
        let (status, body) = self
            .request("PUT", &format!("/{bucket}/{key}"), bytes)
            .unwrap();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }

    /// The object's bytes, or None (404).
    pub fn get(&self, bucket: &str, key: &str) -> Option<Vec<u8>> {
        let (status, body) = self
            .request("GET", &format!("/{bucket}/{key}"), &[])
            .unwrap();
        match status {
            200 => Some(body),
            404 => None,
            s => panic!("GET {key}: {s} {}", String::from_utf8_lossy(&body)),
        }
    }

    /// The keys under `prefix/` (one page, which is plenty for tests).
    pub fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let (status, body) = self
            .request(
                "GET",
                &format!("/{bucket}?list-type=2&prefix={prefix}"),
                &[],
            )
            .unwrap();
        assert_eq!(status, 200);
        let text = String::from_utf8_lossy(&body);
        text.split("<Key>")
            .skip(1)
            .filter_map(|s| s.split("</Key>").next())
            .map(str::to_string)
            .collect()
    }

    /// Uploads every file under the local folder `dir` to `bucket/prefix/<relative path>`.
    pub fn upload_dir(&self, dir: &Path, bucket: &str, prefix: &str) {
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let rel = path
                    .strip_prefix(dir)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                self.put(
                    bucket,
                    &format!("{prefix}/{rel}"),
                    &std::fs::read(&path).unwrap(),
                );
            }
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
