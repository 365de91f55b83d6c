//! [`HostName`]: a name as the policy compares it, and [`Destination`]:
//! what a sandbox asked to reach, a name or an address literal.
//!
//! A name is lowercased and IDNA-normalised (UTS 46, to its ASCII form,
//! with the STD3 rules: letters, digits and hyphens), and loses one
//! trailing dot, so `Bücher.Example.` and `xn--bcher-kva.example` are the
//! same name and `a.com..` is no name at all.

use std::fmt;
use std::net::IpAddr;

use crate::refusal::Refusal;

/// A normalised host name (never an address literal).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostName(String);

impl HostName {
    /// Normalises `raw`; an address literal or an invalid name is refused.
    pub fn parse(raw: &str) -> Result<HostName, Refusal> {
        match Destination::parse(raw)? {
            Destination::Name(name) => Ok(name),
            Destination::Address(ip) => {
                Err(Refusal::new(raw, format!("{ip} is an address, not a name")))
            }
        }
    }

    /// The name, in its ASCII form.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this name lies strictly below `suffix` (`a.b.c` below `b.c`,
    /// not `b.c` itself, nor `xb.c`).
    pub fn is_below(&self, suffix: &HostName) -> bool {
        self.0.len() > suffix.0.len() + 1
            && self.0.ends_with(suffix.0.as_str())
            && self.0.as_bytes()[self.0.len() - suffix.0.len() - 1] == b'.'
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a sandbox asked to reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A name, resolved by the host.
    Name(HostName),
    /// An address literal (`93.184.216.34`, `[2001:db8::1]` or `2001:db8::1`).
    Address(IpAddr),
}

impl Destination {
    /// Parses the host part of a request (no port).
    pub fn parse(raw: &str) -> Result<Destination, Refusal> {
        let bracketed = raw
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .unwrap_or(raw);
        if let Ok(ip) = bracketed.parse::<IpAddr>() {
            return Ok(Destination::Address(ip));
        }
        let one_dot_off = raw.strip_suffix('.').unwrap_or(raw);
        if one_dot_off.is_empty() {
            return Err(Refusal::new(raw, "an empty host name"));
        }
        match idna::domain_to_ascii_strict(one_dot_off) {
            // What IDNA maps to an address (full-width digits, say) is one.
            Ok(ascii) => match ascii.parse::<IpAddr>() {
                Ok(ip) => Ok(Destination::Address(ip)),
                // `2130706433`, `0x7f.1`, `127.1`: addresses to resolvers
                // and browsers (the last label of a name is never numeric).
                Err(_) if looks_numeric(&ascii) => Err(Refusal::new(
                    raw,
                    "an address in a notation other than dotted decimal",
                )),
                Err(_) => Ok(Destination::Name(HostName(ascii))),
            },
            Err(_) => Err(Refusal::new(raw, "not a valid host name")),
        }
    }
}

/// Whether a name's last label is a number (decimal, or hex with `0x`).
fn looks_numeric(ascii: &str) -> bool {
    let last = ascii.rsplit('.').next().unwrap_or(ascii);
    let digits = last.strip_prefix("0x").unwrap_or(last);
    last.bytes().all(|b| b.is_ascii_digit())
        || (last.starts_with("0x") && digits.bytes().all(|b| b.is_ascii_hexdigit()))
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Destination::Name(name) => name.fmt(f),
            Destination::Address(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Destination::Address(ip) => ip.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(raw: &str) -> String {
        match Destination::parse(raw).unwrap() {
            Destination::Name(n) => n.0,
            Destination::Address(ip) => panic!("{raw} parsed as {ip}"),
        }
    }

    #[test]
    fn names_are_lowercased_idna_normalised_and_lose_one_trailing_dot() {
        assert_eq!(name("Packages.Example.ORG"), "packages.example.org");
        assert_eq!(name("packages.example.org."), "packages.example.org");
        assert_eq!(name("Bücher.Example"), "xn--bcher-kva.example");
        assert_eq!(name("xn--bcher-kva.example"), "xn--bcher-kva.example");
        // Full-width dots are dots after UTS 46 mapping.
        assert_eq!(name("a\u{ff0e}example\u{ff0e}com"), "a.example.com");
    }

    #[test]
    fn what_is_not_a_name_is_refused() {
        let odd_addresses = ["2130706433", "0x7f000001", "127.1", "0x7f.0.0.1", "a.123"];
        for raw in ["", ".", "a.com..", "a b.com", "a_b.com", "-a.com", "a..com"]
            .into_iter()
            .chain(odd_addresses)
        {
            assert!(Destination::parse(raw).is_err(), "{raw:?} was accepted");
        }
    }

    #[test]
    fn address_literals_are_addresses_however_written() {
        let ip = |raw: &str| match Destination::parse(raw).unwrap() {
            Destination::Address(ip) => ip.to_string(),
            Destination::Name(n) => panic!("{raw} parsed as the name {n}"),
        };
        assert_eq!(ip("127.0.0.1"), "127.0.0.1");
        assert_eq!(ip("[::1]"), "::1");
        assert_eq!(ip("::ffff:127.0.0.1"), "::ffff:127.0.0.1");
        // Full-width digits map to ASCII digits: still an address.
        assert_eq!(ip("\u{ff11}\u{ff12}\u{ff17}.0.0.1"), "127.0.0.1");
    }

    #[test]
    fn below_means_strictly_below_at_a_label_boundary() {
        let n = |s: &str| HostName::parse(s).unwrap();
        assert!(n("x.a.com").is_below(&n("a.com")));
        assert!(n("y.x.a.com").is_below(&n("a.com")));
        assert!(!n("a.com").is_below(&n("a.com")));
        assert!(!n("xa.com").is_below(&n("a.com")));
    }
}
