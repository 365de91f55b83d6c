//! [`EgressPolicy`]: which names, ports and addresses a sandbox may reach.
//!
//! A name is checked before it is resolved (the deny-list first, then the
//! allow-list, its port included) and each address it resolves to after
//! (none may be of an [`AddressClass`] unless the policy allows it by
//! address); the addresses checked are the ones to dial, with no second
//! lookup. An address literal is refused unless allowed by address. A
//! policy with a rule that does not parse refuses everything, saying which
//! rule: a typo never opens more than was meant.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use crate::address_class::{classify, AddressClass};
use crate::host_name::{Destination, HostName};
use crate::host_pattern::HostPattern;
use crate::refusal::Refusal;
use crate::resolver::Resolve;

/// Ports a pattern without one allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// What a sandbox may reach. Nothing, until rules allow it.
#[derive(Debug, Clone)]
pub struct EgressPolicy {
    allow: Vec<HostPattern>,
    deny: Vec<HostPattern>,
    ports: Vec<u16>,
    addresses: Vec<IpNet>,
    /// Rules that did not parse: while there are any, nothing is allowed.
    invalid: Vec<Refusal>,
}

impl Default for EgressPolicy {
    fn default() -> Self {
        EgressPolicy {
            allow: Vec::new(),
            deny: Vec::new(),
            ports: DEFAULT_PORTS.to_vec(),
            addresses: Vec::new(),
            invalid: Vec::new(),
        }
    }
}

impl EgressPolicy {
    /// A policy that allows nothing.
    pub fn new() -> Self {
        EgressPolicy::default()
    }

    /// Allows names matching `pattern` (`name`, `*.suffix`, with `:port`
    /// or on [`EgressPolicy::ports`]).
    pub fn allow(mut self, pattern: &str) -> Self {
        match HostPattern::parse(pattern) {
            Ok(p) => self.allow.push(p),
            Err(e) => self.invalid.push(e),
        }
        self
    }

    /// Refuses names matching `pattern`, even where an allow rule matches
    /// (on every port, for a pattern without one).
    pub fn deny(mut self, pattern: &str) -> Self {
        match HostPattern::parse(pattern) {
            Ok(p) => self.deny.push(p),
            Err(e) => self.invalid.push(e),
        }
        self
    }

    /// The ports a pattern without one allows (80 and 443 unless set).
    pub fn ports(mut self, ports: impl IntoIterator<Item = u16>) -> Self {
        self.ports = ports.into_iter().collect();
        self
    }

    /// Allows the addresses in `network` (`10.0.0.5`, `10.1.0.0/16`,
    /// `2001:db8::/32`): as literals, and as what a name resolves to, even
    /// of a class refused by default (a service on the host's loopback).
    pub fn allow_addresses(mut self, network: &str) -> Self {
        let parsed = network
            .parse::<IpNet>()
            .or_else(|_| network.parse::<IpAddr>().map(IpNet::from));
        match parsed {
            Ok(net) => self.addresses.push(net),
            Err(_) => self
                .invalid
                .push(Refusal::new(network, "not an address or a network")),
        }
        self
    }

    /// Rules that did not parse (while there are any, nothing is allowed).
    pub fn invalid_rules(&self) -> &[Refusal] {
        &self.invalid
    }

    /// The check before any lookup: whether `destination` on `port` may be
    /// asked for at all.
    pub fn check_destination(&self, destination: &Destination, port: u16) -> Result<(), Refusal> {
        let target = format!("{destination}:{port}");
        if let Some(first) = self.invalid.first() {
            return Err(Refusal::new(
                target,
                format!("the policy has a rule that does not parse ({first})"),
            ));
        }
        match destination {
            Destination::Address(ip) => {
                if self.by_address(*ip) {
                    Ok(())
                } else {
                    Err(Refusal::new(
                        target,
                        "an address literal, not allowed by address (allow_addresses)",
                    ))
                }
            }
            Destination::Name(name) => self.check_name(name, port, target),
        }
    }

    fn check_name(&self, name: &HostName, port: u16, target: String) -> Result<(), Refusal> {
        let denied = self.deny.iter().find(|d| match d.port() {
            Some(own) => own == port && d.matches_name(name),
            None => d.matches_name(name),
        });
        if let Some(rule) = denied {
            return Err(Refusal::new(target, format!("deny rule `{rule}`")));
        }
        if self
            .allow
            .iter()
            .any(|a| a.matches(name, port, &self.ports))
        {
            return Ok(());
        }
        let other_port = self.allow.iter().any(|a| a.matches_name(name));
        let reason = if other_port {
            format!("port {port} is not allowed for {name}")
        } else {
            format!("{name} is not on the allow-list")
        };
        Err(Refusal::new(target, reason))
    }

    /// The check after the lookup: every address `name` resolved to must be
    /// one a sandbox may reach.
    pub fn check_resolved(&self, name: &HostName, addresses: &[IpAddr]) -> Result<(), Refusal> {
        if addresses.is_empty() {
            return Err(Refusal::new(name.as_str(), "the name has no address"));
        }
        for ip in addresses {
            if self.by_address(*ip) {
                continue;
            }
            if let Some(class) = classify(*ip) {
                return Err(refused_address(name, *ip, class));
            }
        }
        Ok(())
    }

    /// Both checks around `resolver`'s lookup: the addresses to dial, in
    /// the resolver's order.
    pub async fn decide(
        &self,
        resolver: &dyn Resolve,
        destination: &Destination,
        port: u16,
    ) -> Result<Vec<SocketAddr>, Refusal> {
        self.check_destination(destination, port)?;
        let addresses = match destination {
            Destination::Address(ip) => vec![*ip],
            Destination::Name(name) => {
                let found = resolver.resolve(name).await.map_err(|e| {
                    Refusal::new(format!("{name}:{port}"), format!("cannot resolve it: {e}"))
                })?;
                self.check_resolved(name, &found)?;
                found
            }
        };
        Ok(addresses
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect())
    }

    fn by_address(&self, ip: IpAddr) -> bool {
        self.addresses.iter().any(|net| net.contains(&ip))
    }
}

fn refused_address(name: &HostName, ip: IpAddr, class: AddressClass) -> Refusal {
    Refusal::new(
        name.as_str(),
        format!("it resolves to {ip}, {class}, not allowed by address"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolver::MappedResolver;

    fn dest(raw: &str) -> Destination {
        Destination::parse(raw).unwrap()
    }

    fn policy() -> EgressPolicy {
        EgressPolicy::new()
            .allow("packages.example.org")
            .allow("*.example-cdn.net")
            .allow("api.example.com:8443")
            .deny("private.example-cdn.net")
    }

    #[test]
    fn deny_wins_over_allow_and_refusals_name_their_rule() {
        let p = policy();
        assert!(p.check_destination(&dest("a.example-cdn.net"), 443).is_ok());
        let denied = p
            .check_destination(&dest("Private.Example-CDN.net."), 443)
            .unwrap_err();
        assert_eq!(denied.reason, "deny rule `private.example-cdn.net`");
        let absent = p.check_destination(&dest("evil.net"), 443).unwrap_err();
        assert_eq!(absent.reason, "evil.net is not on the allow-list");
        assert_eq!(
            absent.to_string(),
            "egress to evil.net:443 refused: evil.net is not on the allow-list"
        );
    }

    #[test]
    fn ports_are_the_policys_unless_the_rule_names_one() {
        let p = policy();
        assert!(p
            .check_destination(&dest("packages.example.org"), 80)
            .is_ok());
        let other = p
            .check_destination(&dest("packages.example.org"), 22)
            .unwrap_err();
        assert_eq!(
            other.reason,
            "port 22 is not allowed for packages.example.org"
        );
        assert!(p.check_destination(&dest("api.example.com"), 8443).is_ok());
        assert!(p.check_destination(&dest("api.example.com"), 443).is_err());
        let ssh = EgressPolicy::new().allow("git.example.org").ports([22]);
        assert!(ssh.check_destination(&dest("git.example.org"), 22).is_ok());
        assert!(ssh
            .check_destination(&dest("git.example.org"), 443)
            .is_err());
    }

    #[test]
    fn address_literals_need_allowing_by_address() {
        let p = policy().allow_addresses("198.51.100.0/24");
        assert!(p.check_destination(&dest("198.51.100.7"), 443).is_ok());
        for literal in ["203.0.113.1", "127.0.0.1", "[::1]", "::ffff:198.51.100.7"] {
            let refused = p.check_destination(&dest(literal), 443).unwrap_err();
            assert!(
                refused.reason.starts_with("an address literal"),
                "{refused}"
            );
        }
    }

    #[test]
    fn a_rule_that_does_not_parse_refuses_everything() {
        let p = policy().allow("a.*.com");
        assert_eq!(p.invalid_rules().len(), 1);
        let refused = p
            .check_destination(&dest("packages.example.org"), 443)
            .unwrap_err();
        assert!(refused.reason.contains("a.*.com"), "{refused}");
    }

    #[tokio::test]
    async fn a_name_that_resolves_inside_is_refused_unless_its_address_is_allowed() {
        let resolver = MappedResolver::new()
            .map("packages.example.org", ["93.184.216.34".parse().unwrap()])
            .unwrap()
            .map("a.example-cdn.net", ["127.0.0.1".parse().unwrap()])
            .unwrap()
            .map("b.example-cdn.net", ["169.254.169.254".parse().unwrap()])
            .unwrap()
            // A public address beside the host's own: refused whole.
            .map(
                "c.example-cdn.net",
                [
                    "93.184.216.34".parse().unwrap(),
                    "10.0.0.1".parse().unwrap(),
                ],
            )
            .unwrap();
        let p = policy();
        let ok = p
            .decide(&resolver, &dest("packages.example.org"), 443)
            .await;
        assert_eq!(ok.unwrap(), ["93.184.216.34:443".parse().unwrap()]);
        let loopback = p.decide(&resolver, &dest("a.example-cdn.net"), 443).await;
        assert!(loopback
            .unwrap_err()
            .reason
            .contains("127.0.0.1, a loopback address"));
        let metadata = p.decide(&resolver, &dest("b.example-cdn.net"), 80).await;
        assert!(metadata
            .unwrap_err()
            .reason
            .contains("the cloud metadata address"));
        let mixed = p.decide(&resolver, &dest("c.example-cdn.net"), 443).await;
        assert!(mixed
            .unwrap_err()
            .reason
            .contains("10.0.0.1, a private address"));
        let unknown = p.decide(&resolver, &dest("d.example-cdn.net"), 443).await;
        assert!(unknown.unwrap_err().reason.starts_with("cannot resolve it"));
        // A test service on the host's loopback, allowed by address.
        let local = policy().allow_addresses("127.0.0.1");
        let dialled = local
            .decide(&resolver, &dest("a.example-cdn.net"), 443)
            .await;
        assert_eq!(dialled.unwrap(), ["127.0.0.1:443".parse().unwrap()]);
    }
}
