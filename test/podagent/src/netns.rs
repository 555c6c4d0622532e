//! Sockets inside the test's network namespace, from a process that lives in the host's.
//!
//! Linux keeps the network namespace per thread, and a socket stays in the namespace it was
//! created in. So one dedicated thread enters the namespace (setns) and creates every socket the
//! agent needs there; the async runtime's threads stay in the host's namespace (where the API
//! server listens on loopback) and just use the sockets. Nothing here can create a socket in the
//! host's namespace for a pod address: pod addresses exist only inside the namespace, and the
//! host has an `unreachable` route for the whole pod range.

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::mpsc;

use tokio::sync::oneshot;

enum Job {
    Bind(
        SocketAddr,
        oneshot::Sender<io::Result<std::net::TcpListener>>,
    ),
    Connect(SocketAddr, oneshot::Sender<io::Result<std::net::TcpStream>>),
}

/// A handle on the thread that creates sockets inside the namespace.
#[derive(Clone)]
pub struct Netns {
    jobs: mpsc::Sender<Job>,
}

impl Netns {
    /// Enters `/var/run/netns/<name>` on a new thread. Fails (and nothing is ever sent) when the
    /// namespace does not exist or cannot be entered.
    pub fn open(name: &str) -> io::Result<Self> {
        let path = format!("/var/run/netns/{name}");
        let file =
            File::open(&path).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
        let (jobs, rx) = mpsc::channel::<Job>();
        let (entered_tx, entered_rx) = mpsc::channel::<io::Result<()>>();
        std::thread::Builder::new()
            .name("netns".into())
            .spawn(move || {
                // setns: changes only this thread's network namespace.
                if let Err(err) = rustix::thread::move_into_link_name_space(
                    file.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                ) {
                    let _ = entered_tx.send(Err(err.into()));
                    return;
                }
                let _ = entered_tx.send(Ok(()));
                for job in rx {
                    match job {
                        Job::Bind(addr, reply) => {
                            let _ = reply.send(std::net::TcpListener::bind(addr));
                        }
                        // Connections go to loopback or pod addresses of this namespace only, which
                        // are local: connect returns at once, so blocking this thread is fine.
                        Job::Connect(addr, reply) => {
                            let _ = reply.send(std::net::TcpStream::connect(addr));
                        }
                    }
                }
            })?;
        entered_rx
            .recv()
            .map_err(|_| io::Error::other("netns thread ended"))?
            .map_err(|e| io::Error::new(e.kind(), format!("setns {path}: {e}")))?;
        Ok(Netns { jobs })
    }

    pub async fn bind(&self, addr: SocketAddr) -> io::Result<tokio::net::TcpListener> {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Job::Bind(addr, tx))
            .map_err(|_| io::Error::other("netns thread ended"))?;
        let l = rx
            .await
            .map_err(|_| io::Error::other("netns thread ended"))??;
        l.set_nonblocking(true)?;
        tokio::net::TcpListener::from_std(l)
    }

    pub async fn connect(&self, addr: SocketAddr) -> io::Result<tokio::net::TcpStream> {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Job::Connect(addr, tx))
            .map_err(|_| io::Error::other("netns thread ended"))?;
        let s = rx
            .await
            .map_err(|_| io::Error::other("netns thread ended"))??;
        s.set_nonblocking(true)?;
        s.set_nodelay(true)?;
        tokio::net::TcpStream::from_std(s)
    }
}
