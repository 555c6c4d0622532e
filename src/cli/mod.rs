//! `kubectl-lws`: the pure half of the kubectl plugin (`src/bin/kubectl-lws.rs` does the I/O).
//! Every decision the plugin makes — what a status line says, when `rollout status` is done,
//! which patch approve/pause/resume/undo send and when they refuse — is a plain function of
//! objects read from the cluster, so it is unit-tested without one. See `docs/kubectl-lws.md`.

pub mod actions;
pub mod pair_revert;
pub mod status;
pub mod summary;
pub mod traffic;

#[cfg(test)]
mod fixtures;

/// Why a command refuses to act (shown to the user as is).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    /// The Rollout is not in a state the command applies to.
    #[error("{0}")]
    State(String),
    /// The stored objects are not what the command needs.
    #[error("{0}")]
    Data(String),
}

/// `rollout/NAME`, `rollouts/NAME`, `rollouts.rollouts.kruise.io/NAME` or `NAME` → `NAME`, so
/// the arguments kubectl-kruise takes work here too.
pub fn rollout_name(arg: &str) -> Result<&str, Refusal> {
    let name = match arg.split_once('/') {
        Some((kind, name)) => {
            let kind = kind.split('.').next().unwrap_or_default();
            if kind != "rollout" && kind != "rollouts" && kind != "ro" {
                return Err(Refusal::Data(format!(
                    "{arg}: only rollouts are supported (rollout/NAME or NAME)"
                )));
            }
            name
        }
        None => arg,
    };
    if name.is_empty() {
        return Err(Refusal::Data("a Rollout name is required".into()));
    }
    Ok(name)
}

/// `--timeout` values as kubectl takes them: `90s`, `10m`, `1h`, `1h30m`, or plain seconds; `0`
/// means no timeout (`None`).
pub fn parse_timeout(arg: &str) -> Result<Option<std::time::Duration>, Refusal> {
    let bad = || {
        Refusal::Data(format!(
            "--timeout {arg}: expected e.g. 90s, 10m, 1h30m or 0"
        ))
    };
    let mut total = 0u64;
    let mut digits = String::new();
    for c in arg.trim().chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => return Err(bad()),
        };
        total += digits.parse::<u64>().map_err(|_| bad())? * unit;
        digits.clear();
    }
    if !digits.is_empty() {
        total += digits.parse::<u64>().map_err(|_| bad())?;
    } else if arg.trim().is_empty() {
        return Err(bad());
    }
    Ok((total > 0).then(|| std::time::Duration::from_secs(total)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_take_kubectl_kruise_forms() {
        assert_eq!(rollout_name("rollout/vllm"), Ok("vllm"));
        assert_eq!(rollout_name("rollouts.rollouts.kruise.io/vllm"), Ok("vllm"));
        assert_eq!(rollout_name("vllm"), Ok("vllm"));
        assert!(rollout_name("deployment/vllm").is_err());
        assert!(rollout_name("rollout/").is_err());
    }

    #[test]
    fn timeouts_parse_like_kubectl() {
        use std::time::Duration;
        assert_eq!(parse_timeout("90s"), Ok(Some(Duration::from_secs(90))));
        assert_eq!(parse_timeout("1h30m"), Ok(Some(Duration::from_secs(5400))));
        assert_eq!(parse_timeout("45"), Ok(Some(Duration::from_secs(45))));
        assert_eq!(parse_timeout("0"), Ok(None));
        assert_eq!(parse_timeout("0s"), Ok(None));
        assert!(parse_timeout("10x").is_err());
        assert!(parse_timeout("").is_err());
        assert!(parse_timeout("m").is_err());
    }
}
