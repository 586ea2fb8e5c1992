//! Workers of a cluster (`signalql worker`), served in this process on 127.0.0.1:0, for the
//! tests that run statements distributed (docs/cluster.md).

use std::net::SocketAddr;

/// Workers serving on their own runtime until dropped.
pub struct Workers {
    pub addresses: Vec<String>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Workers {
    /// `n` workers, each on a free loopback port.
    pub fn start(n: usize) -> Workers {
        Workers::start_with(n, signalql::catalog::StorageOptions::default())
    }

    /// `n` workers that read S3 with `storage`.
    pub fn start_with(n: usize, storage: signalql::catalog::StorageOptions) -> Workers {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the workers");
        let addresses = (0..n)
            .map(|_| {
                // Bound without blocking on the runtime: callers may be inside another one.
                let std_listener =
                    std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
                std_listener.set_nonblocking(true).expect("non-blocking");
                let addr: SocketAddr = std_listener.local_addr().expect("its address");
                let _in_runtime = runtime.enter();
                let listener =
                    tokio::net::TcpListener::from_std(std_listener).expect("a tokio listener");
                runtime.spawn(signalql::distributed::serve(
                    listener,
                    storage.clone(),
                    std::future::pending(),
                ));
                addr.to_string()
            })
            .collect();
        Workers {
            addresses,
            runtime: Some(runtime),
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}
