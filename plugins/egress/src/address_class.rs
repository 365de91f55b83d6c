//! [`AddressClass`]: the addresses a sandbox may not reach through a name
//! unless the policy allows them by address, and [`classify`], which names
//! an address's class.
//!
//! Checked after the host resolves a name, so `internal.example` pointing
//! at 127.0.0.1 (or a name rebound there) reaches nothing of the host's.
//! An IPv6 address that embeds an IPv4 one (mapped, compatible, NAT64,
//! 6to4, Teredo) is refused as such: what it leads to depends on the
//! network, not on the address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is not for a sandbox (unless allowed by address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// `0.0.0.0/8`, `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`: the host itself.
    Loopback,
    /// `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// `169.254.169.254` (and `fd00:ec2::254`): a cloud's instance metadata.
    Metadata,
    /// `169.254/16`, `fe80::/10`.
    LinkLocal,
    /// `100.64/10`, carrier-grade NAT.
    SharedAddressSpace,
    /// `fc00::/7`.
    UniqueLocal,
    /// `224/4`, `ff00::/8`.
    Multicast,
    /// `240/4` (`255.255.255.255` included), `192.0.0/24`, and the
    /// documentation and benchmarking ranges.
    Reserved,
    /// IPv4-mapped, IPv4-compatible, NAT64, 6to4 and Teredo IPv6 addresses.
    EmbedsIpv4,
}

impl AddressClass {
    /// How messages name it.
    pub fn describe(self) -> &'static str {
        match self {
            AddressClass::Unspecified => "an unspecified address",
            AddressClass::Loopback => "a loopback address (the host itself)",
            AddressClass::Private => "a private address",
            AddressClass::Metadata => "the cloud metadata address",
            AddressClass::LinkLocal => "a link-local address",
            AddressClass::SharedAddressSpace => "a carrier-grade NAT address (100.64/10)",
            AddressClass::UniqueLocal => "a unique-local address",
            AddressClass::Multicast => "a multicast address",
            AddressClass::Reserved => "a reserved address",
            AddressClass::EmbedsIpv4 => "an IPv6 address that embeds an IPv4 one",
        }
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// The class of `ip` when it is one a sandbox may not reach by name;
/// `None` for an address of the public internet.
pub fn classify(ip: IpAddr) -> Option<AddressClass> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<AddressClass> {
    let [a, b, c, _] = ip.octets();
    let class = match (a, b, c) {
        (0, ..) => AddressClass::Unspecified,
        (127, ..) => AddressClass::Loopback,
        (10, ..) | (192, 168, _) => AddressClass::Private,
        (172, b, _) if (16..32).contains(&b) => AddressClass::Private,
        _ if ip == Ipv4Addr::new(169, 254, 169, 254) => AddressClass::Metadata,
        (169, 254, _) => AddressClass::LinkLocal,
        (100, b, _) if (64..128).contains(&b) => AddressClass::SharedAddressSpace,
        (224..=239, ..) => AddressClass::Multicast,
        (240..=255, ..) | (192, 0, 0) => AddressClass::Reserved,
        // Documentation (TEST-NET-1..3) and benchmarking (198.18/15).
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => AddressClass::Reserved,
        (198, 18 | 19, _) => AddressClass::Reserved,
        _ => return None,
    };
    Some(class)
}

fn classify_v6(ip: Ipv6Addr) -> Option<AddressClass> {
    let s = ip.segments();
    let class = if ip.is_unspecified() {
        AddressClass::Unspecified
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        AddressClass::Metadata
    } else if s[0] & 0xffc0 == 0xfe80 {
        AddressClass::LinkLocal
    } else if s[0] & 0xfe00 == 0xfc00 {
        AddressClass::UniqueLocal
    } else if s[0] & 0xff00 == 0xff00 {
        AddressClass::Multicast
    } else if s[..5] == [0; 5] && (s[5] == 0xffff || s[5] == 0)
        || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
        || s[0] == 0x2002
        || s[..2] == [0x2001, 0]
    {
        AddressClass::EmbedsIpv4
    } else if s[..2] == [0x2001, 0xdb8] {
        AddressClass::Reserved
    } else {
        return None;
    };
    Some(class)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(ip: &str) -> Option<AddressClass> {
        classify(ip.parse().unwrap())
    }

    #[test]
    fn every_kind_of_address_that_leads_back_inside_is_named() {
        use AddressClass::*;
        let table = [
            ("0.0.0.0", Unspecified),
            ("::", Unspecified),
            ("127.0.0.1", Loopback),
            ("127.255.0.9", Loopback),
            ("::1", Loopback),
            ("10.1.2.3", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.1", Private),
            ("169.254.169.254", Metadata),
            ("fd00:ec2::254", Metadata),
            ("169.254.1.1", LinkLocal),
            ("fe80::1", LinkLocal),
            ("100.64.0.1", SharedAddressSpace),
            ("100.127.255.254", SharedAddressSpace),
            ("fc00::1", UniqueLocal),
            ("fd12:3456::1", UniqueLocal),
            ("224.0.0.1", Multicast),
            ("ff02::1", Multicast),
            ("255.255.255.255", Reserved),
            ("240.0.0.1", Reserved),
            ("192.0.2.10", Reserved),
            ("2001:db8::1", Reserved),
            ("::ffff:127.0.0.1", EmbedsIpv4),
            ("::ffff:8.8.8.8", EmbedsIpv4),
            ("::127.0.0.1", EmbedsIpv4),
            ("64:ff9b::a00:1", EmbedsIpv4),
            ("2002:a00:1::1", EmbedsIpv4),
            ("2001:0:4136:e378::1", EmbedsIpv4),
        ];
        for (ip, want) in table {
            assert_eq!(class(ip), Some(want), "{ip}");
        }
    }

    #[test]
    fn public_addresses_have_no_class() {
        for ip in [
            "8.8.8.8",
            "93.184.216.34",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.1.1",
            "2606:4700::1111",
            "2a00:1450:4001::200e",
        ] {
            assert_eq!(class(ip), None, "{ip}");
        }
    }
}
