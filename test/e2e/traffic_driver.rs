//! The request driver: sends HTTP requests through the local cluster's proxy (Traefik, see
//! docs/local-cluster.md) at a steady rate and records, for each one, which pod answered (its
//! LWS, group, revision hash) or how it failed and when. Release tests assert on its reports:
//! zero failures, the canary's share per step, header-matched requests reaching only the canary.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness;

/// The cluster's traffic layer, as `test/cluster/up.sh` wrote it to `<state>/traffic/env`.
#[derive(Clone, Debug)]
pub struct Traffic {
    /// The proxy's entry point on the host's loopback.
    pub entry: SocketAddr,
    pub gateway_namespace: String,
    pub gateway_name: String,
    pub ingress_class: String,
}

/// The traffic layer of the test cluster, or the one line saying why there is none (from
/// `<state>/traffic/skipped`).
pub fn traffic() -> Result<Traffic, String> {
    let kubeconfig = harness::kubeconfig_path().map_err(|e| e.to_string())?;
    traffic_in(
        std::path::Path::new(&kubeconfig)
            .parent()
            .ok_or_else(|| format!("{kubeconfig} has no parent directory"))?,
    )
}

/// The traffic layer of the cluster whose state directory is `state` (an isolated cluster
/// started with `LWS_CLUSTER_TRAFFIC=1`), or the one line saying why there is none.
pub fn traffic_in(state: &std::path::Path) -> Result<Traffic, String> {
    let dir = state.join("traffic");
    if let Ok(reason) = std::fs::read_to_string(dir.join("skipped")) {
        return Err(reason.trim().to_string());
    }
    let env = std::fs::read_to_string(dir.join("env"))
        .map_err(|e| format!("no traffic layer in {}: {e}", dir.display()))?;
    let vars: BTreeMap<&str, &str> = env.lines().filter_map(|l| l.split_once('=')).collect();
    let get = |k: &str| {
        vars.get(k)
            .map(|v| v.to_string())
            .ok_or_else(|| format!("{k} missing in {}", dir.display()))
    };
    let url = get("LWS_TRAFFIC_URL")?;
    let entry = url
        .strip_prefix("http://")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("LWS_TRAFFIC_URL={url} is not http://<ip>:<port>"))?;
    Ok(Traffic {
        entry,
        gateway_namespace: get("LWS_TRAFFIC_GATEWAY_NAMESPACE")?,
        gateway_name: get("LWS_TRAFFIC_GATEWAY_NAME")?,
        ingress_class: get("LWS_TRAFFIC_INGRESS_CLASS")?,
    })
}

/// The traffic layer, or `None` after printing one `SKIPPED` line for `test` that cargo's output
/// capture does not swallow (a skipped traffic test must never read as a silent pass).
pub fn traffic_or_skip(test: &str) -> Option<Traffic> {
    match traffic() {
        Ok(t) => Some(t),
        Err(reason) => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: traffic layer off: {reason}"
            );
            None
        }
    }
}

/// One kind of request: path, Host header and extra headers (cookies go in a `cookie` header).
#[derive(Clone, Debug)]
pub struct RequestSpec {
    pub host: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// Copied into each [`Outcome`], to tell kinds of requests apart in one run.
    pub label: String,
}

impl RequestSpec {
    pub fn new(host: &str) -> Self {
        RequestSpec {
            host: host.to_string(),
            path: "/v1/completions".into(),
            headers: Vec::new(),
            label: String::new(),
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn cookie(self, name: &str, value: &str) -> Self {
        self.header("cookie", &format!("{name}={value}"))
    }

    pub fn labelled(mut self, label: &str) -> Self {
        self.label = label.to_string();
        self
    }
}

/// What happened to one request.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The label of the request's [`RequestSpec`].
    pub label: String,
    /// When it was sent, from the driver's start.
    pub at: Duration,
    pub took: Duration,
    /// The HTTP status, when a response came.
    pub status: Option<u16>,
    pub pod: Option<String>,
    pub lws: Option<String>,
    pub group: Option<String>,
    pub revision: Option<String>,
    /// Set for every failure: transport error, timeout, or a status other than 200.
    pub error: Option<String>,
}

impl Outcome {
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }
}

/// Outcomes of a run (or a window of one).
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub outcomes: Vec<Outcome>,
}

impl Report {
    pub fn total(&self) -> usize {
        self.outcomes.len()
    }

    pub fn failures(&self) -> Vec<&Outcome> {
        self.outcomes.iter().filter(|o| o.failed()).collect()
    }

    /// Successful requests per key (e.g. `|o| o.group.clone()`, `|o| o.revision.clone()`).
    pub fn counts_by(&self, key: impl Fn(&Outcome) -> Option<String>) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for o in self.outcomes.iter().filter(|o| !o.failed()) {
            *m.entry(key(o).unwrap_or_else(|| "<none>".into()))
                .or_insert(0) += 1;
        }
        m
    }

    /// Share (0..=1) of successful requests for which `pred` holds.
    pub fn share(&self, pred: impl Fn(&Outcome) -> bool) -> f64 {
        let ok: Vec<&Outcome> = self.outcomes.iter().filter(|o| !o.failed()).collect();
        if ok.is_empty() {
            return 0.0;
        }
        ok.iter().filter(|o| pred(o)).count() as f64 / ok.len() as f64
    }

    /// Outcomes sent at or after `from` (a [`Driver::elapsed`] value).
    pub fn since(&self, from: Duration) -> Report {
        Report {
            outcomes: self
                .outcomes
                .iter()
                .filter(|o| o.at >= from)
                .cloned()
                .collect(),
        }
    }

    /// A short text for assertion messages: counts per group and revision, then every failure.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} requests, {} failed; by lws/group: {:?}; by revision: {:?}",
            self.total(),
            self.failures().len(),
            self.counts_by(|o| Some(format!(
                "{}/{}",
                o.lws.clone().unwrap_or_default(),
                o.group.clone().unwrap_or_default()
            ))),
            self.counts_by(|o| o.revision.clone()),
        );
        for f in self.failures().iter().take(20) {
            s.push_str(&format!(
                "\n  failure at {:?} (after {:?}): {}",
                f.at,
                f.took,
                f.error.as_deref().unwrap_or("")
            ));
        }
        s
    }

    /// No request failed (the release promise).
    pub fn assert_no_failures(&self, what: &str) -> anyhow::Result<()> {
        if !self.failures().is_empty() {
            bail!("{what}: {}", self.summary());
        }
        Ok(())
    }

    /// The share of `pred` is `expected` (0..=1) within a tolerance of 4 binomial standard
    /// deviations (plus 1% for the proxy's weighted round robin rounding), over at least `min`
    /// successful requests.
    pub fn assert_share(
        &self,
        what: &str,
        pred: impl Fn(&Outcome) -> bool,
        expected: f64,
        min: usize,
    ) -> anyhow::Result<()> {
        let n = self.total() - self.failures().len();
        if n < min {
            bail!(
                "{what}: only {n} successful requests, need {min}: {}",
                self.summary()
            );
        }
        let got = self.share(pred);
        let tol = 4.0 * (expected * (1.0 - expected) / n as f64).sqrt() + 0.01;
        if (got - expected).abs() > tol {
            bail!(
                "{what}: share {got:.3}, expected {expected:.3} ± {tol:.3}: {}",
                self.summary()
            );
        }
        Ok(())
    }

    /// Every successful request satisfied `pred` (e.g. header-matched ones reached the canary,
    /// or after rollback none reached it).
    pub fn assert_all(&self, what: &str, pred: impl Fn(&Outcome) -> bool) -> anyhow::Result<()> {
        if self
            .outcomes
            .iter()
            .filter(|o| !o.failed())
            .any(|o| !pred(o))
        {
            bail!("{what}: {}", self.summary());
        }
        Ok(())
    }
}

/// Sends one request through the proxy.
pub async fn send(t: &Traffic, spec: &RequestSpec) -> Outcome {
    let start = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(10), exchange(t.entry, spec)).await;
    let took = start.elapsed();
    let mut o = Outcome {
        label: spec.label.clone(),
        at: Duration::ZERO,
        took,
        status: None,
        pod: None,
        lws: None,
        group: None,
        revision: None,
        error: None,
    };
    match result {
        Err(_) => o.error = Some("timed out after 10s".into()),
        Ok(Err(e)) => o.error = Some(format!("{e:#}")),
        Ok(Ok((status, body))) => {
            o.status = Some(status);
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) {
                let s = |k: &str| v[k].as_str().map(str::to_string);
                o.pod = s("pod");
                o.lws = s("lws");
                o.group = s("groupIndex");
                o.revision = s("revision");
            }
            if status != 200 {
                let who = o.pod.clone().unwrap_or_else(|| {
                    String::from_utf8_lossy(&body)
                        .trim()
                        .chars()
                        .take(120)
                        .collect()
                });
                o.error = Some(format!("HTTP {status} from {who}"));
            }
        }
    }
    o
}

/// Plain HTTP/1.1, one connection per request (`Connection: close`), so every request is
/// routed afresh by the proxy and nothing is pooled on the client side.
async fn exchange(entry: SocketAddr, spec: &RequestSpec) -> anyhow::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(entry)
        .await
        .context("connecting to the proxy entry")?;
    let mut req = format!(
        "GET {} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n",
        spec.path, spec.host
    );
    for (k, v) in &spec.headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)
        .await
        .context("reading the response")?;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("no complete response ({} bytes)", buf.len()))?;
    let head = String::from_utf8_lossy(&buf[..split]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("bad status line: {}", head.lines().next().unwrap_or("")))?;
    let body = &buf[split + 4..];
    // Bodies of the pod agent carry Content-Length; a chunked one is only an error page.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        Vec::new()
    } else {
        body.to_vec()
    };
    Ok((status, body))
}

/// A steady stream of requests in the background.
pub struct Driver {
    start: Instant,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Driver {
    /// Starts sending `specs` in turn (round robin) at `per_second` requests per second. Each
    /// request runs on its own task, so a slow answer does not slow the rate.
    pub fn start(t: &Traffic, specs: Vec<RequestSpec>, per_second: u32) -> Driver {
        let start = Instant::now();
        let outcomes: Arc<Mutex<Vec<Outcome>>> = Arc::default();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let t = t.clone();
        let sink = outcomes.clone();
        let task = tokio::spawn(async move {
            let mut tick =
                tokio::time::interval(Duration::from_secs_f64(1.0 / per_second.max(1) as f64));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut inflight = tokio::task::JoinSet::new();
            let mut i = 0usize;
            loop {
                tokio::select! {
                    _ = stopped.changed() => break,
                    _ = tick.tick() => {}
                }
                let spec = specs[i % specs.len()].clone();
                i += 1;
                let (t, sink) = (t.clone(), sink.clone());
                let at = start.elapsed();
                inflight.spawn(async move {
                    let mut o = send(&t, &spec).await;
                    o.at = at;
                    sink.lock().unwrap().push(o);
                });
                while inflight.try_join_next().is_some() {}
            }
            while inflight.join_next().await.is_some() {}
        });
        Driver {
            start,
            outcomes,
            stop,
            task,
        }
    }

    /// Time since the driver started: a mark for [`Report::since`].
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// What has been answered so far.
    pub fn report(&self) -> Report {
        let mut outcomes = self.outcomes.lock().unwrap().clone();
        outcomes.sort_by_key(|o| o.at);
        Report { outcomes }
    }

    /// Waits until `n` requests have been answered (or failed), up to `timeout`.
    pub async fn wait_for_count(&self, n: usize, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while self.outcomes.lock().unwrap().len() < n {
            if Instant::now() > deadline {
                bail!(
                    "only {} of {n} requests answered after {timeout:?}",
                    self.outcomes.lock().unwrap().len()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Stops sending, waits for the requests in flight, and returns every outcome.
    pub async fn stop(self) -> Report {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        let mut outcomes = std::mem::take(&mut *self.outcomes.lock().unwrap());
        outcomes.sort_by_key(|o| o.at);
        Report { outcomes }
    }
}

/// Sends `n` requests of `spec` at `per_second` and returns the report.
pub async fn run(
    t: &Traffic,
    spec: RequestSpec,
    n: usize,
    per_second: u32,
) -> anyhow::Result<Report> {
    let d = Driver::start(t, vec![spec], per_second);
    let waited = d
        .wait_for_count(
            n,
            Duration::from_secs(30 + (n as u64) / per_second.max(1) as u64 * 3),
        )
        .await;
    let mut report = d.stop().await;
    waited?;
    report.outcomes.truncate(n);
    Ok(report)
}

/// Waits until requests of `spec` succeed and, among the answers, every key in `want` (by
/// `key`) has been seen: the proxy has picked up the route and the endpoints of each backend.
pub async fn wait_until_served(
    t: &Traffic,
    spec: &RequestSpec,
    key: impl Fn(&Outcome) -> Option<String>,
    want: &[&str],
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let o = send(t, spec).await;
        if !o.failed()
            && let Some(k) = key(&o)
        {
            seen.insert(k);
        }
        if want.iter().all(|w| seen.contains(*w)) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "route for {} not served by all of {want:?} after {timeout:?}: seen {seen:?}, last {o:?}",
                spec.host
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How long after a traffic change a window starts: the proxy applies a route or Ingress change
/// within a few hundred milliseconds (throttle 100 ms, then its informers), so requests sent
/// in between belong to neither side of the change.
pub const SETTLE: Duration = Duration::from_secs(1);

/// Traffic through a whole release, for the release e2e tests: plain requests and (optionally)
/// header-matched ones at a steady rate, checked step by step against the promises a release
/// makes — the canary's share per step, matched requests reaching only the canary, none after
/// a rollback, and not one failed request from start to finish.
pub struct ReleaseTraffic<F> {
    driver: Driver,
    is_canary: F,
    rate: u32,
}

/// Label of header-matched requests in the outcomes.
pub const MATCHED: &str = "matched";

impl<F: Fn(&Outcome) -> bool> ReleaseTraffic<F> {
    /// Starts the traffic. `is_canary` tells a canary answer (e.g. by revision hash or LWS).
    pub fn start(
        t: &Traffic,
        plain: RequestSpec,
        matched: Option<RequestSpec>,
        per_second: u32,
        is_canary: F,
    ) -> Self {
        let mut specs = vec![plain];
        specs.extend(matched.map(|m| m.labelled(MATCHED)));
        ReleaseTraffic {
            driver: Driver::start(t, specs, per_second),
            is_canary,
            rate: per_second,
        }
    }

    /// Waits (after [`SETTLE`]) for a window of at least `n` plain requests and returns it.
    pub async fn window(&self, n: usize) -> anyhow::Result<Report> {
        tokio::time::sleep(SETTLE).await;
        let from = self.driver.elapsed();
        let deadline =
            Instant::now() + Duration::from_secs(30 + 3 * n as u64 / self.rate.max(1) as u64);
        loop {
            let w = self.driver.report().since(from);
            if w.outcomes.iter().filter(|o| o.label.is_empty()).count() >= n {
                return Ok(w);
            }
            if Instant::now() > deadline {
                bail!("no window of {n} plain requests: {}", w.summary());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// At a step with `percent`% traffic: over the next `n` plain requests the canary's share is
    /// `percent`% within tolerance, every header-matched request reached the canary, and none
    /// failed.
    pub async fn assert_step(&self, percent: u32, n: usize) -> anyhow::Result<Report> {
        let w = self.window(n).await?;
        let what = format!("step {percent}%");
        w.assert_no_failures(&what)?;
        let plain = Report {
            outcomes: w
                .outcomes
                .iter()
                .filter(|o| o.label.is_empty())
                .cloned()
                .collect(),
        };
        plain.assert_share(&what, &self.is_canary, percent as f64 / 100.0, n)?;
        let matched = Report {
            outcomes: w
                .outcomes
                .iter()
                .filter(|o| o.label == MATCHED)
                .cloned()
                .collect(),
        };
        matched.assert_all(
            &format!("{what}: header-matched requests reach only the canary"),
            &self.is_canary,
        )?;
        Ok(w)
    }

    /// After a rollback: over the next `n` plain requests (and every matched one), no request
    /// reaches the canary and none fails.
    pub async fn assert_rolled_back(&self, n: usize) -> anyhow::Result<Report> {
        let w = self.window(n).await?;
        w.assert_no_failures("after rollback")?;
        w.assert_all("after rollback no request reaches the canary", |o| {
            !(self.is_canary)(o)
        })?;
        Ok(w)
    }

    /// Time since the traffic started (the clock of [`Outcome::at`]).
    pub fn elapsed(&self) -> Duration {
        self.driver.elapsed()
    }

    /// How long after `from` the last plain request was sent that `served` did not hold for:
    /// a switch's latency (zero when every request from `from` on already held).
    pub fn switched_after(&self, from: Duration, served: impl Fn(&Outcome) -> bool) -> Duration {
        self.driver
            .report()
            .since(from)
            .outcomes
            .iter()
            .filter(|o| o.label.is_empty() && !o.failed() && !served(o))
            .map(|o| o.at.saturating_sub(from))
            .max()
            .unwrap_or_default()
    }

    /// Every outcome so far, failures included (the traffic goes on).
    pub fn report(&self) -> Report {
        self.driver.report()
    }

    /// Ends the traffic and returns every outcome, failures included (a test that expects
    /// some — a bad canary's — counts them itself).
    pub async fn stop(self) -> Report {
        self.driver.stop().await
    }

    /// Ends the traffic; not one request may have failed during the whole release.
    pub async fn finish(self) -> anyhow::Result<Report> {
        let report = self.driver.stop().await;
        report.assert_no_failures("the whole release")?;
        Ok(report)
    }
}
