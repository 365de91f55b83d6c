//! [`HostPattern`]: one allow or deny rule, `name`, `*.suffix`, either
//! with `:port`.
//!
//! A pattern is normalised as names are ([`crate::host_name`]), so it
//! matches however the sandbox spells the name. `*.a.com` matches every
//! name below `a.com` (`x.a.com`, `y.x.a.com`), never `a.com` itself; a
//! pattern without a port matches the policy's ports, one with a port that
//! port only.

use std::fmt;

use crate::host_name::{Destination, HostName};
use crate::refusal::Refusal;

/// One rule of an allow- or deny-list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    name: HostName,
    /// `*.name`: the names below `name`.
    below: bool,
    port: Option<u16>,
    /// As written, for messages.
    written: String,
}

impl HostPattern {
    /// Parses `name`, `*.name`, `name:port` or `*.name:port`.
    pub fn parse(written: &str) -> Result<HostPattern, Refusal> {
        let (host, port) = match written.rsplit_once(':') {
            Some((host, port)) => {
                let port = port
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| Refusal::new(written, "not a port"))?;
                (host, Some(port))
            }
            None => (written, None),
        };
        let (below, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        if name.contains('*') {
            return Err(Refusal::new(written, "`*.` may only start a pattern"));
        }
        let name = match Destination::parse(name)? {
            Destination::Name(name) => name,
            Destination::Address(_) => {
                return Err(Refusal::new(
                    written,
                    "an address, not a name: allow addresses with `allow_addresses`",
                ))
            }
        };
        Ok(HostPattern {
            name,
            below,
            port,
            written: written.to_owned(),
        })
    }

    /// Whether it matches `name` on `port`; `ports` are the policy's, for a
    /// pattern that names none.
    pub fn matches(&self, name: &HostName, port: u16, ports: &[u16]) -> bool {
        let name_matches = if self.below {
            name.is_below(&self.name)
        } else {
            *name == self.name
        };
        let port_matches = match self.port {
            Some(own) => own == port,
            None => ports.contains(&port),
        };
        name_matches && port_matches
    }

    /// Whether it matches `name` on any port (for deny rules without a port).
    pub fn matches_name(&self, name: &HostName) -> bool {
        if self.below {
            name.is_below(&self.name)
        } else {
            *name == self.name
        }
    }

    /// Its port, if it names one.
    pub fn port(&self) -> Option<u16> {
        self.port
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WEB: &[u16] = &[80, 443];

    fn matches(pattern: &str, name: &str, port: u16) -> bool {
        let name = HostName::parse(name).unwrap();
        HostPattern::parse(pattern)
            .unwrap()
            .matches(&name, port, WEB)
    }

    #[test]
    fn an_exact_pattern_matches_its_name_however_spelled_on_the_policys_ports() {
        assert!(matches(
            "packages.example.org",
            "PACKAGES.example.org.",
            443
        ));
        assert!(matches("bücher.example", "xn--bcher-kva.example", 80));
        assert!(!matches("packages.example.org", "packages.example.org", 22));
        assert!(!matches(
            "packages.example.org",
            "x.packages.example.org",
            443
        ));
    }

    #[test]
    fn a_wildcard_matches_every_name_below_and_not_the_name_itself() {
        assert!(matches("*.a.com", "x.a.com", 443));
        assert!(matches("*.a.com", "y.x.a.com", 443));
        assert!(!matches("*.a.com", "a.com", 443));
        assert!(!matches("*.a.com", "xa.com", 443));
        assert!(!matches("*.a.com", "a.com.evil.net", 443));
    }

    #[test]
    fn a_pattern_with_a_port_matches_that_port_only() {
        assert!(matches("api.example.com:8443", "api.example.com", 8443));
        assert!(!matches("api.example.com:8443", "api.example.com", 443));
        assert!(matches("*.a.com:22", "git.a.com", 22));
    }

    #[test]
    fn bad_patterns_are_refused_with_a_reason() {
        for bad in [
            "a.*.com",
            "*",
            "*.",
            "a.com:0",
            "a.com:x",
            "10.0.0.1",
            "[::1]:443",
            "",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
