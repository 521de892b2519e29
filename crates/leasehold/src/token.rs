//! Owner tokens: the capability that proves who holds a lease.

use std::fmt;

/// A random owner token: 128 bits from the operating system's random source,
/// written as 32 lowercase hex digits.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Token(String);

/// Whether `s` has the form of a [`Token::random`] (a lease lock's owner
/// token): 32 lowercase hex digits. A string of another form at a lock's key
/// was not written by a lock.
pub(crate) fn is_random_token(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

impl Token {
    /// Draws a fresh token from the OS random source.
    ///
    /// # Panics
    ///
    /// If the OS random source fails, which leaves no safe way to make tokens.
    pub(crate) fn random() -> Token {
        let mut bytes = [0u8; 16];
        #[cfg(leasehold_sim)]
        if crate::sim::fill(&mut bytes) {
            return Token(hex(&bytes));
        }
        getrandom::fill(&mut bytes)
            .expect("the OS random source failed; cannot create owner tokens");
        Token(hex(&bytes))
    }

    /// An owner id chosen by the user (reentrant locks share one per owner).
    pub(crate) fn from_owner(owner: String) -> Token {
        Token(owner)
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// A random number in `[0, 1)` for jitter (not security relevant): from
/// `rand`, or from the simulator's seed in a simulation build.
pub(crate) fn jitter_unit() -> f64 {
    #[cfg(leasehold_sim)]
    if let Some(unit) = crate::sim::unit() {
        return unit;
    }
    rand::random::<f64>()
}

/// Shows only a prefix: a whole token in a log is a capability handed out.
impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}…", redact(&self.0))
    }
}

/// The first 8 characters of a token, safe to log. Owner ids chosen by
/// users may hold any text, so the cut is by characters, not bytes.
pub(crate) fn redact(token: &str) -> &str {
    token
        .char_indices()
        .nth(8)
        .map_or(token, |(end, _)| &token[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() {
        let a = Token::random();
        let b = Token::random();
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn debug_does_not_show_the_whole_token() {
        let t = Token::random();
        let shown = format!("{t:?}");
        assert!(!shown.contains(t.as_str()));
        assert!(shown.starts_with(&t.as_str()[..8]));
    }

    #[test]
    fn redact_keeps_eight_characters_of_any_text() {
        assert_eq!(redact("0123456789abcdef"), "01234567");
        assert_eq!(redact("job-7"), "job-7");
        // Byte 8 falls inside a character here: never show the whole id.
        assert_eq!(redact("aéééééééé-secret"), "aééééééé");
    }
}
