//! Which addresses `web.fetch` refuses: everything that is not a public
//! unicast address, so a model-chosen URL cannot reach the gateway itself, its
//! network, or a cloud metadata service. IPv4 addresses embedded in IPv6
//! (mapped, NAT64, compatible) are judged as the IPv4 address they reach.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address may not be fetched, or `None` for a public address.
/// (This host's own addresses are refused too, by
/// [`interfaces`](super::interfaces), whatever their range.)
pub fn blocked_reason(ip: IpAddr) -> Option<&'static str> {
    match reached(ip) {
        IpAddr::V4(ip) => v4_reason(ip),
        IpAddr::V6(ip) => v6_reason(ip),
    }
}

/// The address a connection to `ip` reaches: the IPv4 address inside an
/// IPv6 one that embeds it (mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::/96`,
/// the deprecated compatible `::a.b.c.d`), else `ip` itself.
pub fn reached(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else { return ip };
    let [s0, s1, s2, s3, s4, s5, ..] = v6.segments();
    let embedded = match (s0, s1, s2, s3, s4, s5) {
        (0, 0, 0, 0, 0, 0xffff) | (0x64, 0xff9b, 0, 0, 0, 0) => true,
        (0, 0, 0, 0, 0, 0) => !v6.is_loopback() && !v6.is_unspecified(),
        _ => false,
    };
    if !embedded {
        return ip;
    }
    let octets = v6.octets();
    IpAddr::V4(Ipv4Addr::new(octets[12], octets[13], octets[14], octets[15]))
}

fn v4_reason(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    Some(match () {
        () if a == 0 => "unspecified",
        () if ip.is_loopback() => "loopback",
        () if ip.is_private() => "private",
        () if ip.is_link_local() => "link-local",
        () if a == 100 && (b & 0xc0) == 64 => "shared (CGNAT)",
        () if ip.is_multicast() => "multicast",
        () if a >= 240 => "reserved or broadcast",
        () => return None,
    })
}

/// An IPv6 address that embeds no IPv4 one ([`reached`] took those out).
fn v6_reason(ip: Ipv6Addr) -> Option<&'static str> {
    let s0 = ip.segments()[0];
    Some(match () {
        () if ip.is_unspecified() => "unspecified",
        () if ip.is_loopback() => "loopback",
        () if (s0 & 0xffc0) == 0xfe80 => "link-local",
        () if (s0 & 0xffc0) == 0xfec0 => "site-local",
        () if (s0 & 0xfe00) == 0xfc00 => "unique-local",
        () if ip.is_multicast() => "multicast",
        () => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(ip: &str) -> Option<&'static str> {
        blocked_reason(ip.parse().unwrap())
    }

    #[test]
    fn non_public_ipv4_addresses_are_blocked() {
        assert_eq!(reason("127.0.0.1"), Some("loopback"));
        assert_eq!(reason("10.1.2.3"), Some("private"));
        assert_eq!(reason("172.16.0.1"), Some("private"));
        assert_eq!(reason("172.31.255.255"), Some("private"));
        assert_eq!(reason("192.168.1.1"), Some("private"));
        assert_eq!(reason("169.254.169.254"), Some("link-local"));
        assert_eq!(reason("100.64.0.1"), Some("shared (CGNAT)"));
        assert_eq!(reason("100.127.255.255"), Some("shared (CGNAT)"));
        assert_eq!(reason("0.0.0.0"), Some("unspecified"));
        assert_eq!(reason("224.0.0.1"), Some("multicast"));
        assert_eq!(reason("255.255.255.255"), Some("reserved or broadcast"));
    }

    #[test]
    fn public_addresses_pass() {
        for ip in ["93.184.216.34", "172.32.0.1", "100.128.0.1", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8"] {
            assert_eq!(reason(ip), None, "{ip}");
        }
    }

    #[test]
    fn non_public_ipv6_addresses_and_embedded_ipv4_are_blocked() {
        assert_eq!(reason("::1"), Some("loopback"));
        assert_eq!(reason("::"), Some("unspecified"));
        assert_eq!(reason("fe80::1"), Some("link-local"));
        assert_eq!(reason("fd12:3456::1"), Some("unique-local"));
        assert_eq!(reason("fc00::1"), Some("unique-local"));
        assert_eq!(reason("ff02::1"), Some("multicast"));
        assert_eq!(reason("::ffff:127.0.0.1"), Some("loopback"));
        assert_eq!(reason("::ffff:10.0.0.1"), Some("private"));
        assert_eq!(reason("::ffff:169.254.169.254"), Some("link-local"));
        assert_eq!(reason("64:ff9b::a9fe:a9fe"), Some("link-local"));
        assert_eq!(reason("::7f00:1"), Some("loopback"));
    }

    #[test]
    fn every_spelling_of_no_address_is_blocked() {
        for ip in ["0.0.0.0", "0.1.2.3", "::", "::ffff:0.0.0.0", "64:ff9b::"] {
            assert_eq!(reason(ip), Some("unspecified"), "{ip}");
        }
        let url = super::super::parse_url("http://0/").unwrap();
        assert_eq!(url.host_str(), Some("0.0.0.0"), "a bare 0 is 0.0.0.0 to the URL parser");
    }
}
