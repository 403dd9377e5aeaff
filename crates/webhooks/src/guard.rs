//! The SSRF guard: which addresses a webhook may connect to, and the DNS resolver that enforces
//! it at connect time. It does not decide anything about schemes or headers.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The AWS instance metadata endpoint over IPv6 (Nitro).
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);
const METADATA_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);

/// Why an address may not be called, or `None` if it may. `allow_private` opens loopback,
/// private, link-local, unique-local and shared addresses (local development); the metadata
/// addresses, multicast, broadcast and unspecified addresses stay closed regardless.
pub(crate) fn refusal(ip: IpAddr, allow_private: bool) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refusal_v4(v4, allow_private),
        IpAddr::V6(v6) => {
            // IPv4-mapped (::ffff:a.b.c.d) and the deprecated IPv4-compatible (::a.b.c.d) forms
            // reach the embedded IPv4 address on dual-stack hosts: judge that address.
            if let Some(v4) = v6.to_ipv4_mapped() {
                return refusal_v4(v4, allow_private);
            }
            let seg = v6.segments();
            // So does NAT64 (64:ff9b::/96) through the translator.
            let nat64 = seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
            if (seg[..6] == [0; 6] && !v6.is_loopback() && !v6.is_unspecified()) || nat64 {
                return refusal_v4(Ipv4Addr::from_bits(v6.to_bits() as u32), allow_private);
            }
            refusal_v6(v6, allow_private)
        }
    }
}

fn refusal_v4(ip: Ipv4Addr, allow_private: bool) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip == METADATA_V4 {
        return Some("the cloud metadata address");
    }
    if ip.is_unspecified() || a == 0 {
        return Some("an unspecified (0.0.0.0/8) address");
    }
    if ip.is_broadcast() {
        return Some("the broadcast address");
    }
    if ip.is_multicast() || a >= 240 {
        return Some("a multicast or reserved address");
    }
    if allow_private {
        return None;
    }
    if ip.is_loopback() {
        Some("a loopback address")
    } else if ip.is_private() {
        Some("a private address")
    } else if ip.is_link_local() {
        Some("a link-local address")
    } else if a == 100 && (b & 0xc0) == 64 {
        Some("a shared (CGNAT) address")
    } else {
        None
    }
}

fn refusal_v6(ip: Ipv6Addr, allow_private: bool) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip == METADATA_V6 {
        return Some("the cloud metadata address");
    }
    if ip.is_unspecified() {
        return Some("the unspecified address");
    }
    if ip.is_multicast() {
        return Some("a multicast address");
    }
    if allow_private {
        return None;
    }
    if ip.is_loopback() {
        Some("a loopback address")
    } else if (first & 0xffc0) == 0xfe80 {
        Some("a link-local address")
    } else if (first & 0xfe00) == 0xfc00 {
        Some("a unique-local address")
    } else if (first & 0xffc0) == 0xfec0 {
        Some("a site-local address")
    } else {
        None
    }
}

/// Raised by [`GuardedResolver`] when a name resolves only to refused addresses; found again in
/// the error chain to report [`switchboard_engine::ports::WebhookError::Blocked`].
#[derive(Debug)]
pub(crate) struct BlockedAddress(pub(crate) String);

impl std::fmt::Display for BlockedAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BlockedAddress {}

/// Resolves with the system resolver and drops every refused address. reqwest connects only to
/// what this returns, so the check holds for the address actually connected to, whatever the
/// name resolves to later (DNS rebinding).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GuardedResolver {
    pub(crate) allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut reason = None;
            let allowed: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|addr| match refusal(addr.ip(), allow_private) {
                    None => true,
                    Some(r) => {
                        reason.get_or_insert(r);
                        false
                    }
                })
                .collect();
            if allowed.is_empty() {
                let why = reason.unwrap_or("no address");
                return Err(Box::new(BlockedAddress(format!("{host} resolves to {why}"))) as _);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn refused(s: &str) -> bool {
        refusal(s.parse().unwrap(), false).is_some()
    }

    #[test]
    fn it_refuses_every_non_public_range() {
        for ip in [
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "127.0.0.1",
            "127.255.0.9",
            "169.254.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd00::1",
            "fd00:ec2::254",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "::a9fe:a9fe",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(refused(ip), "{ip} should be refused");
        }
    }

    #[test]
    fn it_allows_public_addresses() {
        for ip in ["93.184.216.34", "8.8.8.8", "100.128.0.1", "172.32.0.1", "2606:4700::1111", "::ffff:8.8.8.8"] {
            assert!(!refused(ip), "{ip} should be allowed");
        }
    }

    #[test]
    fn local_development_opens_private_ranges_but_never_metadata() {
        for ip in ["127.0.0.1", "::1", "10.0.0.1", "fd00::1", "::ffff:127.0.0.1"] {
            assert_eq!(refusal(ip.parse().unwrap(), true), None, "{ip}");
        }
        for ip in ["169.254.169.254", "fd00:ec2::254", "::ffff:169.254.169.254", "0.0.0.0", "224.0.0.1"] {
            assert!(refusal(ip.parse().unwrap(), true).is_some(), "{ip}");
        }
    }
}
