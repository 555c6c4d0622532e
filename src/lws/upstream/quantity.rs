//! What Go's `resource.Quantity` (k8s.io/apimachinery v0.34, the version upstream LWS v0.8.0
//! pins) writes for a quantity it decoded from JSON: `"1000m"` → `"1"`, `"1.5Gi"` → `"1536Mi"`,
//! but also `"01"` → `"01"` (kept verbatim), `"+1Pi"` → `"1Pi"`, `"8Ei"` →
//! `"9223372036854775807"` (binary suffixes are capped at 2^63-1) and `"1000E"` → `"1"` (no
//! suffix exists for 10^21, and Go then prints none). Upstream hashes the Go re-encoding of the
//! pod template, so every quirk matters: one character off and every group rolls on take-over.
//!
//! The code follows Go's steps one by one (`ParseQuantity`, then `CanonicalizeBytes`), with
//! Go's 32-bit wrapping scale arithmetic, because the quirks live in the order of those steps:
//! - the scanner drops leading zeros before counting digits, and a quantity that passes the
//!   int64 fast path as "already canonical" keeps the caller's exact text (sign, zeros, `1.G`);
//! - everything else goes through an arbitrary-precision decimal: rounded up (away from zero)
//!   to a multiple of 10^-9, binary suffixes capped at 2^63-1, then printed with the largest
//!   exponent that is a multiple of 3 (or of 10 for binary suffixes).
//!
//! Decimal values are kept as digits plus a count of trailing zeros, so `1e999999999` costs
//! nothing here, while Go materialises 10^999999999 and may take hours: the answer is the one Go
//! reaches when it finishes, 32-bit wraparounds included. Where Go panics the result is
//! [`QuantityError::Unplannable`].

use std::cmp::Ordering;

use thiserror::Error;

/// Why a quantity has no canonical form.
#[derive(Debug, Error, PartialEq, Eq, Clone)]
pub enum QuantityError {
    /// Go's parser rejects it, so upstream cannot hash the spec either.
    #[error("invalid quantity {0:?}")]
    Invalid(String),
    /// Go accepts the text, but computing its value panics in Go (a 32-bit scale that wraps
    /// to its minimum), so upstream has no revision for it either.
    #[error("quantity {0:?} has an exponent whose canonical form Go cannot compute")]
    Unplannable(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    DecimalExponent,
    BinarySi,
    DecimalSi,
}

/// `2^63 - 1`: Go caps binary-suffixed quantities there.
const MAX_INT64: &str = "9223372036854775807";

/// Returns the string Go's `Quantity.MarshalJSON` writes for a quantity that
/// `Quantity.UnmarshalJSON` decoded from the JSON string `input`.
pub fn canonical(input: &str) -> Result<String, QuantityError> {
    let invalid = || QuantityError::Invalid(input.to_string());
    let unplannable = || QuantityError::Unplannable(input.to_string());
    // UnmarshalJSON parses the raw bytes between the quotes: anything Go's encoder escapes
    // arrives as a backslash sequence the parser refuses. Then it trims Unicode white space.
    if input.chars().any(go_json_escapes) {
        return Err(invalid());
    }
    let text = input.trim();
    if text.is_empty() {
        return Err(invalid());
    }
    if text == "0" {
        return Ok(text.into());
    }
    let scanned = scan(text.as_bytes()).ok_or_else(invalid)?;
    let (base, exponent, format) = interpret(scanned.suffix).ok_or_else(invalid)?;
    match fast_path(&scanned, exponent, format).map_err(|()| invalid())? {
        Some(Fast::Verbatim) => Ok(text.into()),
        Some(Fast::Int(amount)) => Ok(amount.canonical()),
        None => slow_path(&scanned, base, exponent, format)
            .ok_or_else(invalid)?
            .ok_or_else(unplannable),
    }
}

/// Characters Go's JSON encoder writes as escapes (`"`, `\`, controls, `<`, `>`, `&`,
/// U+2028, U+2029).
fn go_json_escapes(c: char) -> bool {
    matches!(c, '"' | '\\' | '<' | '>' | '&' | '\u{2028}' | '\u{2029}') || c < ' '
}

/// The parts Go's `parseQuantityString` splits a quantity into.
struct Scanned<'a> {
    /// The number as written: sign, leading zeros, integer part, `.`, fraction.
    value: &'a [u8],
    /// Integer digits without leading zeros (`"0"` when there are none).
    num: &'a [u8],
    /// Fraction digits.
    denom: &'a [u8],
    suffix: &'a [u8],
    positive: bool,
}

fn scan(s: &[u8]) -> Option<Scanned<'_>> {
    let end = s.len();
    let mut pos = 0;
    let mut positive = true;
    match s.first() {
        Some(b'-') => {
            positive = false;
            pos += 1;
        }
        Some(b'+') => pos += 1,
        _ => {}
    }
    while pos < end && s[pos] == b'0' {
        pos += 1;
    }
    if pos == end {
        // Only a sign and zeros: Go returns "0" as both the value and the integer digits.
        return Some(Scanned {
            value: b"0",
            num: b"0",
            denom: b"",
            suffix: b"",
            positive,
        });
    }
    let num_start = pos;
    while pos < end && s[pos].is_ascii_digit() {
        pos += 1;
    }
    let num: &[u8] = if pos == num_start {
        b"0"
    } else {
        &s[num_start..pos]
    };
    let mut denom: &[u8] = b"";
    if pos < end && s[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < end && s[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[start..pos];
    }
    let value = &s[..pos];
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&s[pos]) {
        pos += 1;
    }
    if pos < end && matches!(s[pos], b'-' | b'+') {
        pos += 1;
    }
    while pos < end && s[pos].is_ascii_digit() {
        pos += 1;
    }
    (pos == end).then_some(Scanned {
        value,
        num,
        denom,
        suffix: &s[suffix_start..],
        positive,
    })
}

/// Go's suffix table: (base, exponent, format).
fn interpret(suffix: &[u8]) -> Option<(u32, i32, Format)> {
    let decimal = |e| Some((10, e, Format::DecimalSi));
    let binary = |e| Some((2, e, Format::BinarySi));
    match suffix {
        b"" => decimal(0),
        b"n" => decimal(-9),
        b"u" => decimal(-6),
        b"m" => decimal(-3),
        b"k" => decimal(3),
        b"M" => decimal(6),
        b"G" => decimal(9),
        b"T" => decimal(12),
        b"P" => decimal(15),
        b"E" => decimal(18),
        b"Ki" => binary(10),
        b"Mi" => binary(20),
        b"Gi" => binary(30),
        b"Ti" => binary(40),
        b"Pi" => binary(50),
        b"Ei" => binary(60),
        [b'e' | b'E', rest @ ..] if !rest.is_empty() => {
            // strconv.ParseInt(…, 10, 64), then int32(…): Go truncates to 32 bits.
            let parsed: i64 = std::str::from_utf8(rest).ok()?.parse().ok()?;
            Some((10, parsed as i32, Format::DecimalExponent))
        }
        _ => None,
    }
}

enum Fast {
    /// Already canonical in Go's eyes: the input text is written back unchanged.
    Verbatim,
    Int(IntAmount),
}

/// ParseQuantity's int64 fast path. `Ok(None)`: Go falls through to the decimal path;
/// `Err`: Go fails with ErrNumeric.
fn fast_path(scanned: &Scanned<'_>, exponent: i32, format: Format) -> Result<Option<Fast>, ()> {
    let (num, denom) = (scanned.num, scanned.denom);
    let (precision, mut scale, mantissa) = match format {
        Format::DecimalExponent | Format::DecimalSi => (
            18i32.wrapping_sub((num.len() + denom.len()) as i32),
            exponent,
            1i64,
        ),
        Format::BinarySi if exponent >= 0 && denom.is_empty() => {
            // Go: 15 - len(num) - int32(float32(exponent)*3/10) - 1.
            let decimal_digits = (exponent as f32 * 3.0 / 10.0) as i32;
            (
                15i32
                    .wrapping_sub(num.len() as i32)
                    .wrapping_sub(decimal_digits)
                    .wrapping_sub(1),
                0,
                1i64 << exponent,
            )
        }
        Format::BinarySi => (-1, 0, 1),
    };
    if precision < 0 {
        return Ok(None);
    }
    scale = scale.wrapping_sub(denom.len() as i32);
    if scale < -9 {
        return Ok(None);
    }
    let shifted = [num, denom].concat();
    let value: i64 = std::str::from_utf8(&shifted)
        .map_err(|_| ())?
        .parse()
        .map_err(|_| ())?;
    let Some(mut result) = int64_multiply(value, mantissa) else {
        return Ok(None);
    };
    if !scanned.positive {
        result = -result;
    }
    let canonical = match format {
        Format::BinarySi => exponent % 10 == 0 && value & 0x07 != 0,
        _ => scale % 3 == 0 && !shifted.ends_with(b"000") && shifted[0] != b'0',
    };
    Ok(Some(if canonical {
        Fast::Verbatim
    } else {
        Fast::Int(IntAmount {
            value: result,
            scale,
            format,
        })
    }))
}

/// Go's `int64Multiply`: `None` on overflow.
fn int64_multiply(a: i64, b: i64) -> Option<i64> {
    if a == 0 || b == 0 || a == 1 || b == 1 {
        return Some(a.wrapping_mul(b));
    }
    if a == i64::MIN || b == i64::MIN {
        return None;
    }
    a.checked_mul(b)
}

/// Go's `int64Amount`: value × 10^scale.
struct IntAmount {
    value: i64,
    scale: i32,
    format: Format,
}

impl IntAmount {
    /// `CanonicalizeBytes` of an int64-backed quantity.
    fn canonical(&self) -> String {
        if self.value == 0 {
            return "0".into();
        }
        // The fast path builds binary quantities at scale 0 only, so they are integers.
        if self.format == Format::BinarySi && !(-1023..=1023).contains(&self.value) {
            let (mut amount, mut times) = (self.value, 0);
            while amount.unsigned_abs() >= 1024 && amount % 1024 == 0 {
                amount /= 1024;
                times += 1;
            }
            return format!("{amount}{}", binary_suffix(times));
        }
        let format = match self.format {
            Format::BinarySi => Format::DecimalSi,
            f => f,
        };
        // int64Amount.AsCanonicalBytes: move factors of 10 into the exponent (int32, wrapping
        // like Go's), then lower the exponent to a multiple of 3.
        let mut amount = i128::from(self.value);
        let mut exponent = self.scale;
        while amount.unsigned_abs() >= 10 && amount % 10 == 0 {
            amount /= 10;
            exponent = exponent.wrapping_add(1);
        }
        let widen = match exponent % 3 {
            1 | -2 => 1,
            2 | -1 => 2,
            _ => 0,
        };
        let fits = |v: i128| i64::try_from(v).is_ok();
        if fits(amount * 10i128.pow(widen)) {
            amount *= 10i128.pow(widen);
            exponent = exponent.wrapping_sub(widen as i32);
        } else {
            // Go redoes it on inf.Dec, whose scale is the negated exponent (wrapping twice).
            amount = i128::from(self.value);
            exponent = self.scale.wrapping_neg().wrapping_neg();
            while amount != 0 && amount % 10 == 0 {
                amount /= 10;
                exponent = exponent.wrapping_add(1);
            }
            while exponent % 3 != 0 {
                amount *= 10;
                exponent = exponent.wrapping_sub(1);
            }
        }
        format!("{amount}{}", decimal_suffix(exponent, format))
    }
}

fn binary_suffix(times: u32) -> &'static str {
    // Go finds no suffix for 1024^0 (and none is needed).
    ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
        .get(times as usize)
        .copied()
        .unwrap_or("")
}

/// Go's `constructBytes(10, exponent, format)`: a DecimalSI exponent without a suffix of its
/// own (10^21 and up) gets no suffix at all, silently.
fn decimal_suffix(exponent: i32, format: Format) -> String {
    if format == Format::DecimalExponent {
        return if exponent == 0 {
            String::new()
        } else {
            format!("e{exponent}")
        };
    }
    match exponent {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        18 => "E",
        _ => "",
    }
    .into()
}

/// ParseQuantity's inf.Dec path and the canonical form of its result. Outer `None`: Go fails
/// (ErrNumeric); inner `None`: beyond what Go can compute.
fn slow_path(
    scanned: &Scanned<'_>,
    base: u32,
    exponent: i32,
    format: Format,
) -> Option<Option<String>> {
    let (negative, digits, frac_len) = parse_decimal(scanned.value)?;
    let mut digits = Digits::from_ascii(&digits);
    if digits.is_zero() {
        return Some(Some("0".into()));
    }
    let sign = if negative { "-" } else { "" };
    let scale = frac_len as i32;
    if base == 2 {
        return Some(Some(format!(
            "{sign}{}",
            binary_slow(digits, scale, exponent)
        )));
    }
    // Decimal: value = digits × 10^-scale, the suffix's exponent folded into the (int32) scale.
    let scale = scale.wrapping_add(exponent.wrapping_neg());
    // Round up to scale 9 (nano). inf.Dec computes the shift in int32 too.
    let shift = 9i32.wrapping_sub(scale);
    let mut zeros: i64 = 0;
    if shift > 0 {
        zeros = i64::from(shift);
    } else if shift < 0 {
        if shift == i32::MIN {
            // Go negates the shift back to i32::MIN and indexes a table with it: a panic.
            return Some(None);
        }
        digits = digits.div_pow10_round_up(shift.unsigned_abs() as usize);
    }
    // AsCanonicalBytes: exponent -9 plus every factor of 10 (Go counts them in an int32),
    // lowered to a multiple of 3.
    let (stripped, trailing) = digits.strip_trailing_zeros();
    let times = (trailing as i64 + zeros) as i32;
    let mut exponent = (-9i32).wrapping_add(times);
    let mut out = stripped.to_string();
    while exponent % 3 != 0 {
        out.push('0');
        exponent = exponent.wrapping_sub(1);
    }
    Some(Some(format!(
        "{sign}{out}{}",
        decimal_suffix(exponent, format)
    )))
}

/// A binary-suffixed quantity the fast path declined: exact value, rounded up to nano, capped
/// at 2^63-1, then printed in base 1024 if that is exact and at least 1024, else as DecimalSI.
fn binary_slow(digits: Digits, scale: i32, exponent: i32) -> String {
    let value = digits.mul_pow2(exponent as u32);
    // Scale 9: the value in units of 10^-9.
    let nanos = if scale <= 9 {
        value.mul_pow10((9 - scale) as usize)
    } else {
        value.div_pow10_round_up((scale - 9) as usize)
    };
    let max_nanos = Digits::from_ascii(MAX_INT64.as_bytes()).mul_pow10(9);
    if nanos.cmp(&max_nanos) == Ordering::Greater {
        // Capped: the integer 2^63-1, which no power of 1024 divides.
        return MAX_INT64.into();
    }
    let thousand_and_24 = Digits::from_ascii(b"1024").mul_pow10(9);
    if nanos.cmp(&thousand_and_24) != Ordering::Less {
        let (whole, fraction) = nanos.split_pow10(9);
        if fraction.is_zero() {
            let (mut amount, mut times) = (whole, 0);
            loop {
                let (quotient, remainder) = amount.div_small(1024);
                if remainder != 0 {
                    break;
                }
                amount = quotient;
                times += 1;
            }
            return format!("{amount}{}", binary_suffix(times));
        }
    }
    // DecimalSI from scale 9.
    let (stripped, trailing) = nanos.strip_trailing_zeros();
    let mut exponent = -9 + trailing as i32;
    let mut out = stripped.to_string();
    while exponent % 3 != 0 {
        out.push('0');
        exponent -= 1;
    }
    format!("{out}{}", decimal_suffix(exponent, Format::DecimalSi))
}

/// inf.Dec's `SetString` of ParseQuantity's number text: (negative, digits, fraction length).
fn parse_decimal(value: &[u8]) -> Option<(bool, Vec<u8>, usize)> {
    let (negative, rest) = match value.first() {
        Some(b'-') => (true, &value[1..]),
        Some(b'+') => (false, &value[1..]),
        _ => (false, value),
    };
    let mut digits = Vec::with_capacity(rest.len());
    let mut frac_len = None;
    for &b in rest {
        match b {
            b'.' if frac_len.is_none() => frac_len = Some(0),
            b'0'..=b'9' => {
                digits.push(b);
                if let Some(n) = frac_len.as_mut() {
                    *n += 1;
                }
            }
            _ => return None,
        }
    }
    (!digits.is_empty()).then_some((negative, digits, frac_len.unwrap_or(0)))
}

/// A non-negative integer as decimal digits, most significant first, no leading zeros
/// (zero is empty). Enough arithmetic for the binary path, whose values stay small.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Digits(Vec<u8>);

impl Digits {
    fn from_ascii(ascii: &[u8]) -> Self {
        let start = ascii.iter().position(|&b| b != b'0').unwrap_or(ascii.len());
        Digits(ascii[start..].iter().map(|b| b - b'0').collect())
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn mul_pow2(mut self, mut exponent: u32) -> Self {
        while exponent > 0 {
            let step = exponent.min(30);
            exponent -= step;
            let factor = 1u64 << step;
            let mut carry = 0u64;
            for d in self.0.iter_mut().rev() {
                let v = u64::from(*d) * factor + carry;
                *d = (v % 10) as u8;
                carry = v / 10;
            }
            let mut head = Vec::new();
            while carry > 0 {
                head.push((carry % 10) as u8);
                carry /= 10;
            }
            head.reverse();
            head.append(&mut self.0);
            self.0 = head;
        }
        self
    }

    fn mul_pow10(mut self, zeros: usize) -> Self {
        if !self.is_zero() {
            self.0.resize(self.0.len() + zeros, 0);
        }
        self
    }

    /// (self / 10^k, self % 10^k).
    fn split_pow10(&self, k: usize) -> (Digits, Digits) {
        let cut = self.0.len().saturating_sub(k);
        let low = &self.0[cut..];
        let start = low.iter().position(|&d| d != 0).unwrap_or(low.len());
        (
            Digits(self.0[..cut].to_vec()),
            Digits(low[start..].to_vec()),
        )
    }

    /// ⌈self / 10^k⌉ (inf.Dec's RoundUp on a positive value).
    fn div_pow10_round_up(&self, k: usize) -> Self {
        let (quotient, remainder) = self.split_pow10(k);
        if remainder.is_zero() {
            quotient
        } else {
            quotient.add_one()
        }
    }

    fn add_one(mut self) -> Self {
        for d in self.0.iter_mut().rev() {
            if *d == 9 {
                *d = 0;
            } else {
                *d += 1;
                return self;
            }
        }
        self.0.insert(0, 1);
        self
    }

    fn div_small(&self, divisor: u32) -> (Digits, u32) {
        let mut quotient = Vec::with_capacity(self.0.len());
        let mut remainder = 0u64;
        for &d in &self.0 {
            let v = remainder * 10 + u64::from(d);
            quotient.push((v / u64::from(divisor)) as u8);
            remainder = v % u64::from(divisor);
        }
        let start = quotient
            .iter()
            .position(|&d| d != 0)
            .unwrap_or(quotient.len());
        quotient.drain(..start);
        (Digits(quotient), remainder as u32)
    }

    fn strip_trailing_zeros(&self) -> (Digits, usize) {
        let keep = self.0.iter().rposition(|&d| d != 0).map_or(0, |i| i + 1);
        (Digits(self.0[..keep].to_vec()), self.0.len() - keep)
    }

    fn cmp(&self, other: &Digits) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.cmp(&other.0))
    }
}

impl std::fmt::Display for Digits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_zero() {
            return f.write_str("0");
        }
        let text: String = self.0.iter().map(|d| char::from(b'0' + d)).collect();
        f.write_str(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::{QuantityError, canonical};

    /// What k8s.io/apimachinery's Quantity (v0.34.3) writes for each string of
    /// `test/lwsref/quantities.json`, printed by `lwsref quantity` (an e2e test checks that this
    /// file is still what the Go code prints).
    const GO_OUTPUTS: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/test/lwsref/quantities.go.jsonl"
    ));

    #[test]
    fn canonical_forms_match_go_over_the_reference_inputs() {
        let mut mismatches = Vec::new();
        let mut count = 0;
        for line in GO_OUTPUTS.lines() {
            let entry: serde_json::Value = serde_json::from_str(line).unwrap();
            let input = entry["in"].as_str().unwrap();
            let ours = canonical(input);
            let agrees = match (entry["out"].as_str(), &ours) {
                (Some(want), Ok(got)) => want == got,
                (None, Err(QuantityError::Invalid(_))) => true,
                _ => false,
            };
            if !agrees {
                mismatches.push(format!("{input:?}: Go {entry} vs ours {ours:?}"));
            }
            count += 1;
        }
        assert!(count > 250, "{count} vectors");
        assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    }

    #[test]
    fn the_classes_of_issue_8_print_like_go() {
        // Each value is Go's output (test/lwsref/quantities.go.jsonl).
        for (input, want) in [
            // Leading zeros: the scanner drops them, so "01" passes as canonical, verbatim.
            ("01", "01"),
            ("01Ki", "01Ki"),
            ("01Pi", "1Pi"),
            // An explicit sign survives only where the int64 fast path applies.
            ("+1Ki", "+1Ki"),
            ("+1G", "+1G"),
            ("+1Pi", "1Pi"),
            ("+2Ei", "2Ei"),
            ("+123456789Mi", "123456789Mi"),
            ("+123456789012Ki", "123456789012Ki"),
            // Binary suffixes are capped at 2^63-1, which no power of 1024 divides.
            ("7Ei", "7Ei"),
            ("8Ei", "9223372036854775807"),
            ("9Ei", "9223372036854775807"),
            ("16Ei", "9223372036854775807"),
            ("-8Ei", "-9223372036854775807"),
            // Decimal values are not capped.
            ("9223372036854775808", "9223372036854775808"),
            (
                "123456789012345678901234567890123456789012",
                "123456789012345678901234567890123456789012",
            ),
            ("1234567890123456789000", "1234567890123456789k"),
            // Below nano, values round up (away from zero).
            ("0.0000000001", "1n"),
            ("-0.1n", "-1n"),
            ("1.2345678901234567890", "1234567891n"),
            ("1e-10", "1e-9"),
            // No DecimalSI suffix beyond E: Go prints none.
            ("1000E", "1"),
            ("1e19", "10e18"),
            ("1E3", "1E3"),
            ("1.5Gi", "1536Mi"),
            ("1.1Ki", "1126400m"),
            ("0.1", "100m"),
            ("1024Ti", "1Pi"),
            ("1.", "1."),
            ("e3", "0"),
        ] {
            assert_eq!(canonical(input).as_deref(), Ok(want), "{input}");
        }
    }

    #[test]
    fn exponents_go_reaches_only_after_hours_are_computed_at_once() {
        // Go materialises 10^k for these; the answers are what Go prints.
        assert_eq!(
            canonical("1234567890123456789e100000").as_deref(),
            Ok("12345678901234567890e99999")
        );
        assert_eq!(canonical("1e-1000000").as_deref(), Ok("1e-9"));
        // A 32-bit exponent that Go wraps: "1e2147483647" is 1 × 10^(2^31-1), printed by Go as
        // "10e2147483646".
        assert_eq!(canonical("1e2147483647").as_deref(), Ok("10e2147483646"));
    }

    #[test]
    fn a_scale_go_panics_on_is_unplannable_not_a_panic() {
        // 19 digits leave the fast path; scale -2147483639 makes Go's rounding shift wrap to
        // i32::MIN, which Go negates and uses as a table index.
        let input = "1234567890123456789e2147483639";
        assert_eq!(
            canonical(input),
            Err(QuantityError::Unplannable(input.into()))
        );
    }

    #[test]
    fn arbitrary_text_never_panics() {
        // Every short string over the quantity alphabet (and a few others): Ok or Err, never a
        // panic or a hang.
        let alphabet: Vec<char> = "0159.+-eEkKMGiTPmun ".chars().collect();
        let mut stack = vec![String::new()];
        let mut tried = 0;
        while let Some(prefix) = stack.pop() {
            let _ = canonical(&prefix);
            tried += 1;
            if prefix.chars().count() < 4 {
                for c in &alphabet {
                    stack.push(format!("{prefix}{c}"));
                }
            }
        }
        assert!(tried > 100_000);
    }
}
