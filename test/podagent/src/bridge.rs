//! Plain TCP forwarding between the host's loopback and the namespace's loopback: the two
//! places the cluster's processes listen (see docs/local-cluster.md).

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

use crate::netns::Netns;

/// Where a bridge forwards each accepted connection.
pub enum Target {
    Host(SocketAddr),
    Netns(Netns, SocketAddr),
}

/// Serves one bound bridge listener until the process ends.
pub async fn run(listener: TcpListener, target: Target) {
    let target = std::sync::Arc::new(target);
    loop {
        let Ok((mut down, _)) = listener.accept().await else {
            continue;
        };
        let target = target.clone();
        tokio::spawn(async move {
            let _ = down.set_nodelay(true);
            let up = match &*target {
                Target::Host(addr) => TcpStream::connect(addr).await.inspect(|s| {
                    let _ = s.set_nodelay(true);
                }),
                Target::Netns(ns, addr) => ns.connect(*addr).await,
            };
            match up {
                Ok(mut up) => {
                    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                }
                // Dropping `down` closes the client's connection: it sees the failure.
                Err(e) => eprintln!("bridge: connect failed: {e}"),
            }
        });
    }
}
