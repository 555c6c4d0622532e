//! A pod template's resource requests summed the way Kubernetes' `resourcehelper.PodRequests`
//! sums them (what upstream LWS puts in a Volcano PodGroup's `minResources`): the containers'
//! requests plus the sidecars' (init containers that keep running), or the largest
//! one-at-a-time init container's need plus the sidecars started before it when that is larger,
//! plus the pod overhead; pod-level requests (`spec.resources`) replace the per-container sum
//! for the resources they name. Limits do not count: a template is not defaulted, so a
//! container with limits only requests nothing here (as upstream, which sums the template too).
//!
//! Quantities are added exactly (to a billionth, the finest a Kubernetes quantity keeps) and
//! written in the format of the first term that named the resource, as Go's `Quantity.Add`
//! keeps it: `1Gi + 512Mi` is `1536Mi`, `500m + 1` is `1500m`.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{Container, PodSpec},
    apimachinery::pkg::api::resource::Quantity,
};

/// An exact quantity: billionths, and whether it was written with a binary suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Amount {
    nanos: i128,
    binary: bool,
}

/// Resources and their amounts.
pub type Amounts = BTreeMap<String, Amount>;

const NANO: i128 = 1_000_000_000;

impl Amount {
    /// Parses a Kubernetes quantity (`250m`, `1.5Gi`, `2e3`); `None` if it is not one.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
            .unwrap_or(text.len());
        let (number, suffix) = text.split_at(split);
        let (negative, number) = match number.as_bytes().first() {
            Some(b'-') => (true, &number[1..]),
            Some(b'+') => (false, &number[1..]),
            _ => (false, number),
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty()
            || !whole
                .bytes()
                .chain(fraction.bytes())
                .all(|b| b.is_ascii_digit())
        {
            return None;
        }
        // The value as digits over 10^scale.
        let digits: String = format!("{whole}{fraction}");
        let digits = digits.trim_start_matches('0');
        let mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().ok()?
        };
        let scale = fraction.len() as i32;
        let (factor, exponent, binary): (i128, i32, bool) = match suffix {
            "" => (1, 0, false),
            "Ki" => (1 << 10, 0, true),
            "Mi" => (1 << 20, 0, true),
            "Gi" => (1 << 30, 0, true),
            "Ti" => (1 << 40, 0, true),
            "Pi" => (1 << 50, 0, true),
            "Ei" => (1 << 60, 0, true),
            "n" => (1, -9, false),
            "u" => (1, -6, false),
            "m" => (1, -3, false),
            "k" => (1, 3, false),
            "M" => (1, 6, false),
            "G" => (1, 9, false),
            "T" => (1, 12, false),
            "P" => (1, 15, false),
            "E" => (1, 18, false),
            e if e.starts_with(['e', 'E']) => (1, e[1..].parse().ok()?, false),
            _ => return None,
        };
        // nanos = mantissa * factor * 10^(exponent - scale + 9), rounded up like Go.
        let shift = exponent - scale + 9;
        let value = mantissa.checked_mul(factor)?;
        let nanos = if shift >= 0 {
            value.checked_mul(10i128.checked_pow(shift as u32)?)?
        } else {
            let divisor = 10i128.checked_pow((-shift) as u32)?;
            (value + divisor - 1) / divisor
        };
        Some(Self {
            nanos: if negative { -nanos } else { nanos },
            binary,
        })
    }

    /// Go's canonical text for this amount.
    pub fn text(&self) -> String {
        let n = self.nanos;
        if self.binary && n % NANO == 0 && (n / NANO).abs() >= 1024 {
            let mut units = n / NANO;
            let mut suffix = 0;
            while suffix < 6 && units % 1024 == 0 {
                units /= 1024;
                suffix += 1;
            }
            return format!(
                "{units}{}",
                ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][suffix]
            );
        }
        if n == 0 {
            return "0".into();
        }
        // The largest multiple-of-3 exponent that leaves an integer.
        let suffixes = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];
        let mut units = n;
        let mut index = 0;
        while index + 1 < suffixes.len() && units % 1000 == 0 {
            units /= 1000;
            index += 1;
        }
        format!("{units}{}", suffixes[index])
    }

    fn add(self, other: Amount) -> Amount {
        Amount {
            nanos: self.nanos + other.nanos,
            binary: self.binary,
        }
    }

    fn times(self, n: i128) -> Amount {
        Amount {
            nanos: self.nanos * n,
            binary: self.binary,
        }
    }
}

fn amounts(list: Option<&BTreeMap<String, Quantity>>) -> Amounts {
    list.into_iter()
        .flatten()
        .filter_map(|(k, q)| Some((k.clone(), Amount::parse(&q.0)?)))
        .collect()
}

/// `into[k] += add[k]` for every resource of `add` (the first term keeps its format).
pub fn add_into(into: &mut Amounts, add: &Amounts) {
    for (k, v) in add {
        into.entry(k.clone())
            .and_modify(|a| *a = a.add(*v))
            .or_insert(*v);
    }
}

/// `into[k] = max(into[k], other[k])`.
fn max_into(into: &mut Amounts, other: &Amounts) {
    for (k, v) in other {
        match into.get(k) {
            Some(a) if a.nanos >= v.nanos => {}
            _ => {
                into.insert(k.clone(), *v);
            }
        }
    }
}

/// `n` times every amount.
pub fn times(list: &Amounts, n: i128) -> Amounts {
    list.iter().map(|(k, v)| (k.clone(), v.times(n))).collect()
}

fn requests(c: &Container) -> Amounts {
    amounts(c.resources.as_ref().and_then(|r| r.requests.as_ref()))
}

/// What a pod of `spec` requests ([module docs](self)).
pub fn pod_requests(spec: &PodSpec) -> Amounts {
    let mut total = Amounts::new();
    for c in &spec.containers {
        add_into(&mut total, &requests(c));
    }
    let mut sidecars = Amounts::new();
    let mut init_max = Amounts::new();
    for c in spec.init_containers.iter().flatten() {
        let own = requests(c);
        if c.restart_policy.as_deref() == Some("Always") {
            add_into(&mut total, &own);
            add_into(&mut sidecars, &own);
            max_into(&mut init_max, &sidecars);
        } else {
            let mut need = own;
            add_into(&mut need, &sidecars);
            max_into(&mut init_max, &need);
        }
    }
    max_into(&mut total, &init_max);
    let pod_level = amounts(spec.resources.as_ref().and_then(|r| r.requests.as_ref()));
    for (k, v) in pod_level
        .into_iter()
        .filter(|(k, _)| k == "cpu" || k == "memory" || k.starts_with("hugepages-"))
    {
        total.insert(k, v);
    }
    add_into(&mut total, &amounts(spec.overhead.as_ref()));
    total
}

/// The amounts as a resource list.
pub fn quantities(list: &Amounts) -> BTreeMap<String, Quantity> {
    list.iter()
        .map(|(k, v)| (k.clone(), Quantity(v.text())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn amounts_print_like_go() {
        let cases = [
            ("1", "1"),
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("1.5Gi", "1536Mi"),
            ("1024", "1024"),
            ("2Ki", "2Ki"),
            ("1e3", "1k"),
            ("0.5", "500m"),
            ("100Mi", "100Mi"),
            ("0", "0"),
        ];
        for (input, want) in cases {
            assert_eq!(Amount::parse(input).unwrap().text(), want, "{input}");
        }
        assert!(Amount::parse("ten").is_none());
        assert!(Amount::parse("1Xi").is_none());
    }

    #[test]
    fn sums_keep_the_first_terms_format() {
        let mut a: Amounts = [("memory".into(), Amount::parse("1Gi").unwrap())].into();
        add_into(
            &mut a,
            &[("memory".into(), Amount::parse("512Mi").unwrap())].into(),
        );
        assert_eq!(a["memory"].text(), "1536Mi");
        let mut c: Amounts = [("cpu".into(), Amount::parse("500m").unwrap())].into();
        add_into(
            &mut c,
            &times(&[("cpu".into(), Amount::parse("1").unwrap())].into(), 3),
        );
        assert_eq!(c["cpu"].text(), "3500m");
    }

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn pod_requests_follow_resourcehelper() {
        let cases = [
            (
                "containers add up; limits alone request nothing",
                json!({"containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "500m"}}},
                    {"name": "c", "resources": {"limits": {"cpu": "8"}}},
                ]}),
                vec![("cpu", "1500m"), ("memory", "1Gi")],
            ),
            (
                "a one-at-a-time init container larger than the containers wins",
                json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
                       "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4"}}}]}),
                vec![("cpu", "4")],
            ),
            (
                "sidecars add to the containers and to later init containers",
                json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
                       "initContainers": [
                           {"name": "s", "restartPolicy": "Always",
                            "resources": {"requests": {"cpu": "1"}}},
                           {"name": "i", "resources": {"requests": {"cpu": "2500m"}}}]}),
                vec![("cpu", "3500m")],
            ),
            (
                "pod-level requests replace the sum; overhead adds",
                json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "8"}}}],
                       "resources": {"requests": {"cpu": "3"}},
                       "overhead": {"cpu": "100m"}}),
                vec![("cpu", "3100m"), ("nvidia.com/gpu", "8")],
            ),
            (
                "nothing requested",
                json!({"containers": [{"name": "a"}]}),
                vec![],
            ),
        ];
        for (name, s, want) in cases {
            let got: Vec<(String, String)> = pod_requests(&spec(s))
                .into_iter()
                .map(|(k, v)| (k, v.text()))
                .collect();
            let want: Vec<(String, String)> = want
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }
}
