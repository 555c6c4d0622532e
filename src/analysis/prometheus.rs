//! Argo Rollouts' Prometheus provider: one instant query over the HTTP API per measurement,
//! its answer turned into `result` (a vector becomes a list of its samples' values, a scalar a
//! number) as Argo does, so conditions such as `result[0] < 0.05` read the same.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};

/// What a query answered.
#[derive(Clone, Debug, PartialEq)]
pub enum QueryResult {
    /// An instant vector: each sample's value, in the order Prometheus gave them.
    Vector(Vec<f64>),
    /// A scalar.
    Scalar(f64),
}

impl QueryResult {
    /// The value conditions see as `result`.
    pub fn to_value(&self) -> expr::Value {
        match self {
            Self::Vector(v) => {
                expr::Value::Array(v.iter().map(|f| expr::Value::Float(*f)).collect())
            }
            Self::Scalar(f) => expr::Value::Float(*f),
        }
    }

    /// The measurement's recorded value, as Argo writes it (`[0.05 0.1]`, `0.9`).
    pub fn display(&self) -> String {
        match self {
            Self::Vector(v) => format!(
                "[{}]",
                v.iter().map(|f| number(*f)).collect::<Vec<_>>().join(" ")
            ),
            Self::Scalar(f) => number(*f),
        }
    }
}

fn number(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        f.to_string()
    }
}

/// Default seconds a query may take (Argo's).
pub const DEFAULT_TIMEOUT_SECONDS: i64 = 30;

/// Runs `query` against the Prometheus at `address`. `Err` says what went wrong in words a
/// user can act on (unreachable, timed out, the query refused and Prometheus's reason).
pub async fn query(
    address: &str,
    query: &str,
    timeout_seconds: Option<i64>,
) -> Result<QueryResult, String> {
    let base = address.trim_end_matches('/');
    if !base.starts_with("http://") {
        return Err(format!(
            "Prometheus address {address:?}: only http:// addresses are supported (a Service inside the cluster)"
        ));
    }
    let encoded: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("query", query)
        .finish();
    let uri: http::Uri = format!("{base}/api/v1/query?{encoded}")
        .parse()
        .map_err(|e| format!("Prometheus address {address:?}: {e}"))?;
    let seconds = timeout_seconds
        .filter(|s| *s > 0)
        .unwrap_or(DEFAULT_TIMEOUT_SECONDS);
    let client: Client<_, http_body_util::Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let fetch = async {
        let response = client
            .get(uri)
            .await
            .map_err(|e| format!("Prometheus at {base} is unreachable: {}", error_chain(&e)))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("Prometheus at {base}: reading the answer: {e}"))?
            .to_bytes();
        parse(status.as_u16(), &body).map_err(|e| format!("Prometheus at {base}: {e}"))
    };
    tokio::time::timeout(
        Duration::from_secs(u64::try_from(seconds).unwrap_or(30)),
        fetch,
    )
    .await
    .unwrap_or_else(|_| {
        Err(format!(
            "Prometheus at {base} did not answer within {seconds}s"
        ))
    })
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Reads an answer of `/api/v1/query`.
pub fn parse(status: u16, body: &[u8]) -> Result<QueryResult, String> {
    let doc: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        format!(
            "HTTP {status}, not a Prometheus answer ({e}): {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        )
    })?;
    if doc["status"] != "success" {
        let kind = doc["errorType"].as_str().unwrap_or("error");
        let why = doc["error"].as_str().unwrap_or("no reason given");
        return Err(format!("the query was refused ({kind}): {why}"));
    }
    let data = &doc["data"];
    match data["resultType"].as_str() {
        Some("vector") => data["result"]
            .as_array()
            .map(|samples| {
                samples
                    .iter()
                    .map(|s| sample(&s["value"]))
                    .collect::<Result<Vec<_>, _>>()
                    .map(QueryResult::Vector)
            })
            .unwrap_or_else(|| Err("a vector answer without samples".into())),
        Some("scalar") => sample(&data["result"]).map(QueryResult::Scalar),
        Some(other) => Err(format!(
            "the query gave a {other}; an analysis needs an instant vector or a scalar"
        )),
        None => Err("an answer without resultType".into()),
    }
}

/// `[timestamp, "value"]` → the value (Prometheus writes `NaN`, `+Inf`, `-Inf` as such).
fn sample(pair: &serde_json::Value) -> Result<f64, String> {
    let text = pair[1]
        .as_str()
        .ok_or_else(|| format!("a sample without a value: {pair}"))?;
    match text {
        "NaN" => Ok(f64::NAN),
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        t => t.parse().map_err(|e| format!("sample value {t:?}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_become_results_as_argo_reads_them() {
        let vector = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"service":"a"},"value":[1700000000.1,"0.05"]},
            {"metric":{"service":"b"},"value":[1700000000.1,"NaN"]}]}}"#;
        let r = parse(200, vector).expect("vector");
        let QueryResult::Vector(v) = &r else {
            panic!("{r:?}")
        };
        assert_eq!(v[0], 0.05);
        assert!(v[1].is_nan());
        assert_eq!(r.display(), "[0.05 NaN]");
        let empty = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert_eq!(parse(200, empty), Ok(QueryResult::Vector(vec![])));
        assert_eq!(QueryResult::Vector(vec![]).display(), "[]");
        let scalar = br#"{"status":"success","data":{"resultType":"scalar","result":[1.5,"0.9"]}}"#;
        assert_eq!(parse(200, scalar), Ok(QueryResult::Scalar(0.9)));
        assert_eq!(QueryResult::Scalar(0.9).display(), "0.9");
    }

    #[test]
    fn refusals_say_why() {
        let bad =
            br#"{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected"}"#;
        let e = parse(400, bad).expect_err("refused");
        assert!(e.contains("bad_data") && e.contains("parse error"), "{e}");
        let e = parse(502, b"<html>bad gateway</html>").expect_err("not json");
        assert!(e.contains("HTTP 502"), "{e}");
        let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(parse(200, matrix).expect_err("matrix").contains("matrix"));
    }
}
