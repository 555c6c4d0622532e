//! One HTTP listener per address in the table, bound inside the namespace; each answer is
//! JSON naming the pod that owns the address at that moment.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::oneshot;

use crate::netns::Netns;
use crate::table::Table;
use crate::vllm::Metrics;

pub struct Server {
    netns: Netns,
    table: Arc<Mutex<Table>>,
    metrics: Arc<Mutex<HashMap<String, Metrics>>>,
    listeners: HashMap<SocketAddr, oneshot::Sender<()>>,
    bind_failed: HashSet<SocketAddr>,
}

#[derive(Clone)]
struct Listener {
    addr: SocketAddr,
    table: Arc<Mutex<Table>>,
    /// Each pod's serving figures, by pod uid (an address may pass to another pod).
    metrics: Arc<Mutex<HashMap<String, Metrics>>>,
}

impl Server {
    pub fn new(netns: Netns) -> Self {
        Server {
            netns,
            table: Default::default(),
            metrics: Default::default(),
            listeners: HashMap::new(),
            bind_failed: HashSet::new(),
        }
    }

    pub fn table(&self) -> Table {
        self.table.lock().unwrap().clone()
    }

    /// True while the listeners can change with the time alone: an address drains until its
    /// drain time, or a listener that failed to bind is to be tried again.
    pub fn time_bound(&self) -> bool {
        !self.bind_failed.is_empty()
            || self
                .table
                .lock()
                .unwrap()
                .values()
                .any(|e| e.drain_until.is_some())
    }

    /// Makes the listeners match `next`: new addresses start answering, addresses no longer in
    /// the table stop accepting (requests in flight still complete).
    pub async fn apply(&mut self, next: Table) {
        let added: Vec<SocketAddr> = next
            .keys()
            .filter(|a| !self.listeners.contains_key(a))
            .copied()
            .collect();
        let removed: Vec<SocketAddr> = self
            .listeners
            .keys()
            .filter(|a| !next.contains_key(a))
            .copied()
            .collect();
        for (addr, e) in &next {
            let old = self
                .table
                .lock()
                .unwrap()
                .get(addr)
                .map(|o| (o.info.uid.clone(), o.drain_until));
            if old.as_ref().map(|(u, d)| (u, d.is_some()))
                != Some((&e.info.uid, e.drain_until.is_some()))
            {
                let state = if e.drain_until.is_some() {
                    "draining"
                } else {
                    "serving"
                };
                eprintln!(
                    "{state} {addr} for pod {}/{}",
                    e.info.namespace, e.info.name
                );
            }
        }
        *self.table.lock().unwrap() = next;
        for addr in removed {
            if let Some(stop) = self.listeners.remove(&addr) {
                let _ = stop.send(());
                eprintln!("stopped {addr}");
            }
        }
        self.bind_failed
            .retain(|a| self.table.lock().unwrap().contains_key(a));
        let serving: HashSet<String> = self
            .table
            .lock()
            .unwrap()
            .values()
            .map(|e| e.info.uid.clone())
            .collect();
        self.metrics
            .lock()
            .unwrap()
            .retain(|uid, _| serving.contains(uid));
        for addr in added {
            match self.netns.bind(addr).await {
                Ok(l) => {
                    let (stop, stopped) = oneshot::channel::<()>();
                    let app = Router::new().fallback(answer).with_state(Listener {
                        addr,
                        table: self.table.clone(),
                        metrics: self.metrics.clone(),
                    });
                    tokio::spawn(async move {
                        let _ = axum::serve(l, app)
                            .with_graceful_shutdown(async {
                                let _ = stopped.await;
                            })
                            .await;
                    });
                    self.listeners.insert(addr, stop);
                    self.bind_failed.remove(&addr);
                }
                Err(e) => {
                    // Retried on the next reconcile; said once.
                    if self.bind_failed.insert(addr) {
                        eprintln!("cannot listen on {addr} in the namespace: {e}");
                    }
                }
            }
        }
    }
}

async fn answer(State(l): State<Listener>, req: Request) -> Response {
    let info = l.table.lock().unwrap().get(&l.addr).map(|e| e.info.clone());
    let Some(info) = info else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "no pod answers here any more\n",
        )
            .into_response();
    };
    if req.uri().path() == "/metrics" {
        let text = l
            .metrics
            .lock()
            .unwrap()
            .get(&info.uid)
            .cloned()
            .unwrap_or_default()
            .render(&info.model_name);
        let mut resp = (StatusCode::OK, text).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        );
        return resp;
    }
    let started = Instant::now();
    let n = {
        let mut all = l.metrics.lock().unwrap();
        let m = all.entry(info.uid.clone()).or_default();
        m.received += 1;
        m.running += 1;
        m.received
    };
    let done = |ok: bool, ttft: Duration| {
        let mut all = l.metrics.lock().unwrap();
        let m = all.entry(info.uid.clone()).or_default();
        m.running -= 1;
        if ok {
            m.success += 1;
            m.ttft.observe(ttft.as_secs_f64());
            m.e2e.observe(started.elapsed().as_secs_f64());
        }
    };
    if info.faults.fails(n) {
        done(false, Duration::ZERO);
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"pod": info.name, "lws": info.lws, "revision": info.revision,
                   "error": "AGENT_ERROR_RATIO: this request fails"})
            .to_string()
                + "\n",
        )
            .into_response();
    }
    if let Some(ttft) = info.faults.ttft {
        tokio::time::sleep(ttft).await;
    }
    if !info.behaviour.delay.is_zero() {
        tokio::time::sleep(info.behaviour.delay).await;
    }
    let ttft = started.elapsed();
    let mut headers = serde_json::Map::new();
    for (name, value) in req.headers() {
        let v = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match headers.get_mut(name.as_str()) {
            Some(serde_json::Value::String(s)) => {
                s.push_str(", ");
                s.push_str(&v);
            }
            _ => {
                headers.insert(name.as_str().to_string(), v.into());
            }
        }
    }
    let body = json!({
        "pod": info.name,
        "namespace": info.namespace,
        "uid": info.uid,
        "lws": info.lws,
        "groupIndex": info.group_index,
        "workerIndex": info.worker_index,
        "revision": info.revision,
        "container": info.container,
        "image": info.image,
        "podAddress": l.addr.to_string(),
        "method": req.method().as_str(),
        "path": req.uri().path(),
        "query": req.uri().query(),
        "headers": headers,
    });
    let status = StatusCode::from_u16(info.behaviour.status).unwrap_or(StatusCode::OK);
    done(status.is_success(), ttft);
    let mut resp = (status, body.to_string() + "\n").into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}
