//! `memcmp` and `bcmp` eight bytes at a time, for the static (musl) build.
//!
//! Why: musl's `memcmp` compares a byte at a time, and the manager compares many strings that
//! share long prefixes — label keys all start with the 28 bytes of
//! `leaderworkerset.sigs.k8s.io/`, names with their LWS's — so it stood out in the manager's
//! profile (docs/performance.md, "Latest: issue 25, session 24"). Rust's string and slice
//! comparisons call these two symbols; defining them in the binary keeps the linker from taking
//! musl's. glibc's are already word-wise, so other builds keep theirs.

/// Compares `n` bytes at `a` and `b` as unsigned bytes, in order: negative, zero or positive
/// like `memcmp`.
///
/// # Safety
/// `a` and `b` must each be valid for reads of `n` bytes.
#[inline(always)]
unsafe fn compare(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut at = 0;
    while at + 8 <= n {
        // Read big-endian, so that the first differing byte decides the order of the words.
        // SAFETY: `at + 8 <= n`, and both are valid for `n` bytes.
        let (x, y) = unsafe {
            (
                u64::from_be(a.add(at).cast::<u64>().read_unaligned()),
                u64::from_be(b.add(at).cast::<u64>().read_unaligned()),
            )
        };
        if x != y {
            return if x < y { -1 } else { 1 };
        }
        at += 8;
    }
    while at < n {
        // SAFETY: `at < n`.
        let (x, y) = unsafe { (*a.add(at), *b.add(at)) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        at += 1;
    }
    0
}

#[cfg(target_env = "musl")]
mod symbols {
    /// # Safety
    /// As C's `memcmp`.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        unsafe { super::compare(a, b, n) }
    }

    /// # Safety
    /// As `memcmp`; only zero or not zero counts.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        unsafe { super::compare(a, b, n) }
    }
}

#[cfg(test)]
mod tests {
    use super::compare;

    fn sign(bytes_a: &[u8], bytes_b: &[u8]) -> i32 {
        assert_eq!(bytes_a.len(), bytes_b.len());
        unsafe { compare(bytes_a.as_ptr(), bytes_b.as_ptr(), bytes_a.len()) }.signum()
    }

    #[test]
    fn orders_as_unsigned_bytes_in_order_at_every_length_and_position() {
        // Every length around the word size, a difference at every position, either way.
        for len in 0..40 {
            let base: Vec<u8> = (0..len).map(|i| (i * 7 % 256) as u8).collect();
            assert_eq!(sign(&base, &base), 0, "equal, {len} bytes");
            for at in 0..len {
                let mut more = base.clone();
                more[at] = more[at].wrapping_add(1).max(base[at]);
                if more[at] == base[at] {
                    continue;
                }
                // A later byte that orders the other way must not decide it.
                let mut less_later = base.clone();
                if at + 1 < len {
                    less_later[at + 1] = 0xff;
                    more[at + 1] = 0;
                }
                assert_eq!(sign(&more, &less_later), 1, "{len} bytes, differ at {at}");
                assert_eq!(sign(&less_later, &more), -1, "{len} bytes, differ at {at}");
            }
        }
    }

    #[test]
    fn a_high_byte_is_greater_than_a_low_one() {
        // Unsigned, as memcmp: 0x80 > 0x7f.
        assert_eq!(sign(b"abcdefgh\x80", b"abcdefgh\x7f"), 1);
        assert_eq!(sign(b"\x80bcdefgh", b"\x7fbcdefgh"), 1);
        assert_eq!(
            sign(
                b"leaderworkerset.sigs.k8s.io/name",
                b"leaderworkerset.sigs.k8s.io/size"
            ),
            -1
        );
    }
}
