//! A metric's `successCondition` / `failureCondition`, evaluated as Argo Rollouts does: an
//! [expr](https://expr-lang.org) expression over `result`, with Argo's helper functions
//! (`isNaN`, `isInf`, `isNil`, `default`, `asInt`, `asFloat`), so a template's conditions mean
//! the same here as under Argo Rollouts.

use expr::{Context, Environment, Value};

use super::prometheus::QueryResult;

/// The verdict of one measurement's conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The success condition held (or only a failure condition was set and did not).
    Successful,
    /// The failure condition held (or only a success condition was set and did not).
    Failed,
    /// Both conditions were set and neither held.
    Inconclusive,
}

/// Evaluates a metric's conditions over `result`; `Err` says why an expression could not be
/// evaluated (a syntax error, an index out of range, a non-boolean value).
pub fn evaluate(
    result: &QueryResult,
    success: Option<&str>,
    failure: Option<&str>,
) -> Result<Verdict, String> {
    let holds = |expression: &str| holds(expression, result);
    Ok(match (success, failure) {
        (None, None) => Verdict::Successful,
        (Some(s), None) => {
            if holds(s)? {
                Verdict::Successful
            } else {
                Verdict::Failed
            }
        }
        (None, Some(f)) => {
            if holds(f)? {
                Verdict::Failed
            } else {
                Verdict::Successful
            }
        }
        (Some(s), Some(f)) => {
            if holds(f)? {
                Verdict::Failed
            } else if holds(s)? {
                Verdict::Successful
            } else {
                Verdict::Inconclusive
            }
        }
    })
}

/// Checks an expression parses (admission-time and status messages); `Err` is the parser's.
pub fn check(expression: &str) -> Result<(), String> {
    expr::compile(expression)
        .map(|_| ())
        .map_err(|e| format!("{expression:?}: {e}"))
}

fn holds(expression: &str, result: &QueryResult) -> Result<bool, String> {
    let mut ctx = Context::default();
    ctx.insert("result", result.to_value());
    match environment().eval(expression, &ctx) {
        Ok(Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!(
            "condition {expression:?} gave {other}, not true or false"
        )),
        Err(e) => Err(format!("condition {expression:?}: {e}")),
    }
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.add_function("isNaN", |c| {
        Ok(one_float(&c.args).is_some_and(f64::is_nan).into())
    });
    env.add_function("isInf", |c| {
        Ok(one_float(&c.args).is_some_and(f64::is_infinite).into())
    });
    env.add_function("isNil", |c| {
        Ok(c.args.first().is_none_or(Value::is_nil).into())
    });
    env.add_function("default", |c| {
        let mut args = c.args.into_iter();
        let value = args.next().unwrap_or_default();
        let fallback = args.next().unwrap_or_default();
        Ok(if value.is_nil() { fallback } else { value })
    });
    env.add_function("asFloat", |c| match c.args.first() {
        Some(Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .map(Value::Float)
            .map_err(|e| expr::Error::ExprError(format!("asFloat({s:?}): {e}"))),
        Some(v) => one_float(std::slice::from_ref(v))
            .map(Value::Float)
            .ok_or_else(|| expr::Error::ExprError(format!("asFloat({v}): not a number"))),
        None => Err(expr::Error::ExprError("asFloat needs an argument".into())),
    });
    env.add_function("asInt", |c| match c.args.first() {
        Some(Value::String(s)) => s
            .trim()
            .parse::<i64>()
            .map(Value::Integer)
            .map_err(|e| expr::Error::ExprError(format!("asInt({s:?}): {e}"))),
        Some(Value::Integer(i)) => Ok(Value::Integer(*i)),
        // Truncation toward zero is Go's int conversion of a float, which Argo's asInt uses.
        #[allow(clippy::cast_possible_truncation)]
        Some(Value::Float(f)) => Ok(Value::Integer(*f as i64)),
        Some(v) => Err(expr::Error::ExprError(format!("asInt({v}): not a number"))),
        None => Err(expr::Error::ExprError("asInt needs an argument".into())),
    });
    env
}

fn one_float(args: &[Value]) -> Option<f64> {
    match args.first()? {
        Value::Float(f) => Some(*f),
        #[allow(clippy::cast_precision_loss)]
        Value::Integer(i) => Some(*i as f64),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(values: &[f64]) -> QueryResult {
        QueryResult::Vector(values.to_vec())
    }

    #[test]
    fn conditions_real_templates_use() {
        let cases: &[(&QueryResult, Option<&str>, Option<&str>, Verdict)] = &[
            (
                &vector(&[0.01]),
                Some("result[0] < 0.05"),
                None,
                Verdict::Successful,
            ),
            (
                &vector(&[0.2]),
                Some("result[0] < 0.05"),
                None,
                Verdict::Failed,
            ),
            (
                &vector(&[]),
                Some("len(result) == 0 || result[0] < 0.05"),
                None,
                Verdict::Successful,
            ),
            (
                &vector(&[f64::NAN]),
                Some("isNaN(result[0]) || result[0] < 0.05"),
                None,
                Verdict::Successful,
            ),
            (
                &vector(&[0.5]),
                None,
                Some("result[0] > 0.1"),
                Verdict::Failed,
            ),
            (
                &vector(&[0.05]),
                None,
                Some("result[0] > 0.1"),
                Verdict::Successful,
            ),
            (
                &vector(&[0.07]),
                Some("result[0] < 0.05"),
                Some("result[0] > 0.1"),
                Verdict::Inconclusive,
            ),
            (
                &vector(&[0.5, 0.2]),
                Some("all(result, {# < 0.6})"),
                None,
                Verdict::Successful,
            ),
            (
                &QueryResult::Scalar(0.9),
                Some("result >= 0.9"),
                None,
                Verdict::Successful,
            ),
            (
                &vector(&[]),
                Some("default(result[0], 0) < 1"),
                None,
                Verdict::Successful,
            ),
            (&vector(&[0.0]), None, None, Verdict::Successful),
        ];
        for (result, s, f, want) in cases {
            assert_eq!(
                evaluate(result, *s, *f),
                Ok(*want),
                "{s:?} / {f:?} on {result:?}"
            );
        }
    }

    #[test]
    fn an_expression_that_cannot_be_evaluated_says_why() {
        let e = evaluate(&vector(&[]), Some("result[0] < 0.05"), None).expect_err("no index 0");
        assert!(e.contains("result[0] < 0.05"), "{e}");
        let e = evaluate(&vector(&[1.0]), Some("result[0] +"), None).expect_err("syntax");
        assert!(e.contains("result[0] +"), "{e}");
        let e = evaluate(&vector(&[1.0]), Some("result[0]"), None).expect_err("not a bool");
        assert!(e.contains("not true or false"), "{e}");
        assert!(check("result[0] < ").is_err());
        assert!(check("len(result) == 0 || isNaN(result[0])").is_ok());
    }
}
