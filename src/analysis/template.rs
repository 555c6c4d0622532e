//! Templates and arguments resolved into an `AnalysisRun`'s spec, as Argo Rollouts resolves
//! them: every `{{args.NAME}}` in a metric replaced by its argument's value — given by the
//! Rollout, else the template's default, else one of the values a release knows (namespace,
//! Services, revisions) — so the run records exactly what was queried.

use std::collections::BTreeMap;

use crate::api::analysis::{AnalysisRunSpec, Argument, Metric};

/// A template's arguments and metrics, namespaced or cluster-wide alike.
#[derive(Clone, Copy, Debug)]
pub struct TemplateParts<'a> {
    /// The template's name (for messages).
    pub name: &'a str,
    /// Its arguments.
    pub args: &'a [Argument],
    /// Its metrics.
    pub metrics: &'a [Metric],
}

/// What a release can fill `valueFrom` and undeclared-value arguments from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReleaseValues {
    /// The stable revision's hash (`podTemplateHashValue: Stable`).
    pub stable_hash: String,
    /// The new revision's hash (`podTemplateHashValue: Latest`).
    pub latest_hash: String,
    /// The Rollout's fields a `fieldRef` may name (`metadata.name`, `metadata.namespace`,
    /// `metadata.labels['k']`, `metadata.annotations['k']`).
    pub fields: BTreeMap<String, String>,
    /// Values by argument name that a template may declare without a value (namespace,
    /// stable-service, canary-service, …: docs/analysis.md lists them).
    pub known: BTreeMap<String, String>,
}

/// Resolves `templates` with the Rollout's `given` arguments into a run's spec.
pub fn resolve(
    templates: &[TemplateParts<'_>],
    given: &[Argument],
    release: &ReleaseValues,
) -> Result<AnalysisRunSpec, String> {
    let mut values: BTreeMap<String, Option<String>> = BTreeMap::new();
    for t in templates {
        for a in t.args {
            let entry = values.entry(a.name.clone()).or_default();
            if entry.is_none() {
                entry.clone_from(&a.value);
            }
        }
    }
    for a in given {
        let v = given_value(a, release)?;
        values.insert(a.name.clone(), Some(v));
    }
    let mut args = Vec::with_capacity(values.len());
    for (name, value) in values {
        let value = match value.or_else(|| release.known.get(&name).cloned()) {
            Some(v) => v,
            None => {
                return Err(format!(
                    "argument {name:?} has no value: give it in the Rollout's analysis \
                     annotation (\"args\"), or a default in the template"
                ));
            }
        };
        args.push(Argument {
            name,
            value: Some(value),
            value_from: None,
        });
    }
    let lookup: BTreeMap<&str, &str> = args
        .iter()
        .map(|a| (a.name.as_str(), a.value.as_deref().unwrap_or_default()))
        .collect();
    let mut metrics: Vec<Metric> = Vec::new();
    for t in templates {
        for m in t.metrics {
            if metrics.iter().any(|have| have.name == m.name) {
                return Err(format!(
                    "metric {:?} of template {:?} is named twice in this analysis",
                    m.name, t.name
                ));
            }
            let mut tree = serde_json::to_value(m).map_err(|e| e.to_string())?;
            substitute(&mut tree, &lookup)?;
            metrics.push(serde_json::from_value(tree).map_err(|e| {
                format!(
                    "metric {:?} of template {:?} after its arguments: {e}",
                    m.name, t.name
                )
            })?);
        }
    }
    Ok(AnalysisRunSpec {
        args,
        metrics,
        terminate: None,
    })
}

fn given_value(a: &Argument, release: &ReleaseValues) -> Result<String, String> {
    if let Some(v) = &a.value {
        return Ok(v.clone());
    }
    let Some(from) = &a.value_from else {
        return Err(format!(
            "argument {:?} in the Rollout has neither value nor valueFrom",
            a.name
        ));
    };
    if let Some(which) = &from.pod_template_hash_value {
        return match which.as_str() {
            "Stable" => Ok(release.stable_hash.clone()),
            "Latest" => Ok(release.latest_hash.clone()),
            other => Err(format!(
                "argument {:?}: podTemplateHashValue must be Stable or Latest, not {other:?}",
                a.name
            )),
        };
    }
    if let Some(f) = &from.field_ref {
        return release.fields.get(&f.field_path).cloned().ok_or_else(|| {
            format!(
                "argument {:?}: the Rollout has no field {:?}",
                a.name, f.field_path
            )
        });
    }
    Err(format!(
        "argument {:?}: valueFrom names nothing this controller reads",
        a.name
    ))
}

/// Replaces `{{args.NAME}}` (spaces inside the braces allowed) in every string of `tree`.
fn substitute(tree: &mut serde_json::Value, args: &BTreeMap<&str, &str>) -> Result<(), String> {
    match tree {
        serde_json::Value::String(s) => {
            if s.contains("{{") {
                *s = replace(s, args)?;
            }
            Ok(())
        }
        serde_json::Value::Array(items) => items.iter_mut().try_for_each(|v| substitute(v, args)),
        serde_json::Value::Object(map) => map.values_mut().try_for_each(|v| substitute(v, args)),
        _ => Ok(()),
    }
}

fn replace(text: &str, args: &BTreeMap<&str, &str>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            out.push_str(&rest[open..]);
            return Ok(out);
        };
        let inner = after[..close].trim();
        match inner.strip_prefix("args.") {
            Some(name) => match args.get(name) {
                Some(v) => out.push_str(v),
                None => {
                    return Err(format!(
                        "{{{{args.{name}}}}} names an argument no template declares"
                    ));
                }
            },
            // Not ours (another templating a query may contain): kept as written.
            None => out.push_str(&rest[open..open + 2 + close + 2]),
        }
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::analysis::{FieldRef, PrometheusMetric, Provider, ValueFrom};

    fn metric(query: &str) -> Metric {
        Metric {
            name: "errors".into(),
            success_condition: Some("result[0] < {{ args.max-ratio }}".into()),
            provider: Provider {
                prometheus: Some(PrometheusMetric {
                    address: "http://prometheus:9090".into(),
                    query: query.into(),
                    timeout: None,
                }),
                ..Provider::default()
            },
            ..Metric::default()
        }
    }

    fn arg(name: &str, value: Option<&str>) -> Argument {
        Argument {
            name: name.into(),
            value: value.map(str::to_string),
            value_from: None,
        }
    }

    #[test]
    fn arguments_come_from_the_rollout_then_the_template_then_the_release() {
        let metrics = [metric(
            "sum(x{ns=\"{{args.namespace}}\",rev=\"{{args.rev}}\",s=\"{{args.canary-service}}\"})",
        )];
        let args = [
            arg("namespace", None),
            arg("rev", None),
            arg("canary-service", None),
            arg("max-ratio", Some("0.05")),
        ];
        let t = TemplateParts {
            name: "t",
            args: &args,
            metrics: &metrics,
        };
        let release = ReleaseValues {
            latest_hash: "abc".into(),
            known: BTreeMap::from([
                ("namespace".to_string(), "ns1".to_string()),
                ("canary-service".to_string(), "vllm-canary".to_string()),
            ]),
            ..ReleaseValues::default()
        };
        let given = [Argument {
            name: "rev".into(),
            value: None,
            value_from: Some(ValueFrom {
                pod_template_hash_value: Some("Latest".into()),
                field_ref: None,
            }),
        }];
        let spec = resolve(&[t], &given, &release).expect("resolves");
        let p = spec.metrics[0]
            .provider
            .prometheus
            .as_ref()
            .expect("prometheus");
        assert_eq!(p.query, "sum(x{ns=\"ns1\",rev=\"abc\",s=\"vllm-canary\"})");
        assert_eq!(
            spec.metrics[0].success_condition.as_deref(),
            Some("result[0] < 0.05")
        );
        assert_eq!(spec.args.len(), 4);
    }

    #[test]
    fn a_missing_argument_or_field_says_which() {
        let metrics = [metric("{{args.service}}")];
        let args = [arg("service", None), arg("max-ratio", Some("1"))];
        let t = TemplateParts {
            name: "t",
            args: &args,
            metrics: &metrics,
        };
        let e = resolve(&[t], &[], &ReleaseValues::default()).expect_err("missing");
        assert!(e.contains("\"service\""), "{e}");
        let given = [Argument {
            name: "service".into(),
            value: None,
            value_from: Some(ValueFrom {
                pod_template_hash_value: None,
                field_ref: Some(FieldRef {
                    field_path: "metadata.labels['x']".into(),
                }),
            }),
        }];
        let e = resolve(&[t], &given, &ReleaseValues::default()).expect_err("no field");
        assert!(e.contains("metadata.labels['x']"), "{e}");
        let undeclared = [metric("{{args.nope}}")];
        let t = TemplateParts {
            name: "t",
            args: &args[1..],
            metrics: &undeclared,
        };
        assert!(
            resolve(&[t], &[], &ReleaseValues::default())
                .expect_err("undeclared")
                .contains("nope")
        );
    }

    #[test]
    fn metric_names_are_unique_across_templates() {
        let metrics = [metric("q")];
        let args = [arg("max-ratio", Some("1"))];
        let t = TemplateParts {
            name: "t",
            args: &args,
            metrics: &metrics,
        };
        assert!(
            resolve(&[t, t], &[], &ReleaseValues::default())
                .expect_err("dup")
                .contains("twice")
        );
    }
}
