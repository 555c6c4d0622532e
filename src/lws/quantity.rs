//! Canonical form of a Kubernetes resource quantity, as Go's `resource.Quantity` prints it
//! after parsing (`"1000m"` → `"1"`, `"2000"` → `"2k"`, `"1024Mi"` → `"1Gi"`, `"0.5"` →
//! `"500m"`). Upstream LWS hashes the Go re-encoding of the pod template, so a quantity must
//! come out exactly as Go would print it or every group would roll on take-over.

use thiserror::Error;

/// A quantity that Go's parser would reject (or that is beyond what we represent).
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid quantity {0:?}")]
pub struct InvalidQuantity(pub String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    DecimalExponent,
    BinarySi,
    DecimalSi,
}

/// Returns the string Go's `Quantity.MarshalJSON` writes for a quantity parsed from `input`.
pub fn canonical(input: &str) -> Result<String, InvalidQuantity> {
    let bad = || InvalidQuantity(input.to_string());
    let parsed = parse(input).ok_or_else(bad)?;

    // Go keeps the original string when it is already canonical (ParseQuantity's fast path).
    let precision_ok = match parsed.format {
        Format::DecimalExponent | Format::DecimalSi => parsed.num.len() + parsed.denom.len() <= 18,
        Format::BinarySi => parsed.exponent >= 0 && parsed.denom.is_empty(),
    };
    let scale = match parsed.format {
        Format::BinarySi => 0,
        _ => parsed.exponent,
    } - parsed.denom.len() as i32;
    if precision_ok && scale >= -9 {
        let shifted = format!("{}{}", parsed.num, parsed.denom);
        let value: i64 = shifted.parse().map_err(|_| bad())?;
        let mantissa: i64 = match parsed.format {
            Format::BinarySi => 1i64.checked_shl(parsed.exponent as u32).unwrap_or(0),
            _ => 1,
        };
        if mantissa != 0
            && value.checked_mul(mantissa).is_some()
            && match parsed.format {
                Format::BinarySi => parsed.exponent % 10 == 0 && value & 0x07 != 0,
                _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
            }
        {
            return Ok(input.to_string());
        }
    }

    // Exact value as mantissa × 10^exp10 (binary suffixes multiply the mantissa by 2^n).
    let digits = format!("{}{}", parsed.num, parsed.denom);
    let mut mantissa: i128 = digits.parse().map_err(|_| bad())?;
    let mut exp10: i32 = -(parsed.denom.len() as i32);
    match parsed.format {
        Format::BinarySi => {
            mantissa = mantissa
                .checked_mul(1i128.checked_shl(parsed.exponent as u32).ok_or_else(bad)?)
                .ok_or_else(bad)?
        }
        _ => exp10 += parsed.exponent,
    }
    // Go rounds anything finer than nano up (away from zero) to nano.
    if exp10 < -9 {
        let shift = (-9 - exp10) as u32;
        let div = 10i128.checked_pow(shift).ok_or_else(bad)?;
        let rounded_up = mantissa % div != 0;
        mantissa = mantissa / div + i128::from(rounded_up);
        exp10 = -9;
    }
    if !parsed.positive {
        mantissa = -mantissa;
    }
    if mantissa == 0 {
        return Ok("0".to_string());
    }

    let mut format = parsed.format;
    if format == Format::BinarySi {
        // |value| < 1024, with value = mantissa × 10^exp10.
        let is_small = if exp10 >= 0 {
            mantissa
                .checked_mul(10i128.pow(exp10 as u32))
                .is_some_and(|v| v.abs() < 1024)
        } else {
            10i128
                .checked_pow((-exp10) as u32)
                .and_then(|p| p.checked_mul(1024))
                .is_some_and(|limit| mantissa.abs() < limit)
        };
        let exact_integer = exp10 >= 0 || mantissa % 10i128.pow((-exp10) as u32) == 0;
        if is_small || !exact_integer {
            format = Format::DecimalSi;
        }
    }

    let sign = if mantissa < 0 { "-" } else { "" };
    let mut amount = mantissa.unsigned_abs();
    match format {
        Format::BinarySi => {
            let mut value = if exp10 >= 0 {
                amount * 10u128.pow(exp10 as u32)
            } else {
                amount / 10u128.pow((-exp10) as u32)
            };
            let mut exp2 = 0;
            while value.is_multiple_of(1024) && exp2 < 6 {
                value /= 1024;
                exp2 += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exp2];
            Ok(format!("{sign}{value}{suffix}"))
        }
        Format::DecimalSi | Format::DecimalExponent => {
            let mut exponent = exp10;
            while amount.is_multiple_of(10) {
                amount /= 10;
                exponent += 1;
            }
            while exponent.rem_euclid(3) != 0 {
                amount *= 10;
                exponent -= 1;
            }
            let suffix = if format == Format::DecimalExponent {
                if exponent == 0 {
                    String::new()
                } else {
                    format!("e{exponent}")
                }
            } else {
                match exponent {
                    -9 => "n".into(),
                    -6 => "u".into(),
                    -3 => "m".into(),
                    0 => String::new(),
                    3 => "k".into(),
                    6 => "M".into(),
                    9 => "G".into(),
                    12 => "T".into(),
                    15 => "P".into(),
                    18 => "E".into(),
                    _ => return Err(bad()),
                }
            };
            Ok(format!("{sign}{amount}{suffix}"))
        }
    }
}

struct Parsed {
    positive: bool,
    num: String,
    denom: String,
    format: Format,
    /// Power of 10 (decimal formats) or of 2 (binary).
    exponent: i32,
}

/// Go's `parseQuantityString`: sign, digits, optional fraction, suffix.
fn parse(s: &str) -> Option<Parsed> {
    let mut rest = s;
    let mut positive = true;
    if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    } else if let Some(r) = rest.strip_prefix('-') {
        positive = false;
        rest = r;
    }
    let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    let mut num = rest[..int_len].to_string();
    rest = &rest[int_len..];
    let mut denom = String::new();
    if let Some(r) = rest.strip_prefix('.') {
        let frac_len = r.bytes().take_while(u8::is_ascii_digit).count();
        denom = r[..frac_len].to_string();
        rest = &r[frac_len..];
    }
    if num.is_empty() && denom.is_empty() {
        return None;
    }
    if num.is_empty() {
        num = "0".into();
    }
    let (format, exponent) = match rest {
        "" => (Format::DecimalSi, 0),
        "n" => (Format::DecimalSi, -9),
        "u" => (Format::DecimalSi, -6),
        "m" => (Format::DecimalSi, -3),
        "k" => (Format::DecimalSi, 3),
        "M" => (Format::DecimalSi, 6),
        "G" => (Format::DecimalSi, 9),
        "T" => (Format::DecimalSi, 12),
        "P" => (Format::DecimalSi, 15),
        "E" => (Format::DecimalSi, 18),
        "Ki" => (Format::BinarySi, 10),
        "Mi" => (Format::BinarySi, 20),
        "Gi" => (Format::BinarySi, 30),
        "Ti" => (Format::BinarySi, 40),
        "Pi" => (Format::BinarySi, 50),
        "Ei" => (Format::BinarySi, 60),
        other => {
            let exp = other
                .strip_prefix('e')
                .or_else(|| other.strip_prefix('E'))?;
            let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            (Format::DecimalExponent, exp.parse().ok()?)
        }
    };
    Some(Parsed {
        positive,
        num,
        denom,
        format,
        exponent,
    })
}

#[cfg(test)]
mod tests {
    use super::canonical;

    #[test]
    fn canonical_forms_match_go() {
        // Expected values are what k8s.io/apimachinery's Quantity prints (also checked against
        // upstream's own code by the hash vectors in the e2e suite).
        for (input, want) in [
            ("1", "1"),
            ("1000m", "1"),
            ("100m", "100m"),
            ("0.5", "500m"),
            ("1.5", "1500m"),
            ("2000", "2k"),
            ("32", "32"),
            ("1024Mi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("15Gi", "15Gi"),
            ("64Gi", "64Gi"),
            ("256Gi", "256Gi"),
            ("1e3", "1e3"),
            ("1Ki", "1Ki"),
            ("512", "512"),
            ("0", "0"),
            ("0.0000000001", "1n"),
            ("-1", "-1"),
        ] {
            assert_eq!(canonical(input).as_deref(), Ok(want), "{input}");
        }
    }

    #[test]
    fn garbage_is_rejected() {
        for input in ["", "abc", "1Zi", "1.2.3", "e3"] {
            assert!(canonical(input).is_err(), "{input}");
        }
    }
}
