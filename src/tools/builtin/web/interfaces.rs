//! The addresses of this host's own network interfaces, which `web.fetch`
//! refuses whatever their range: a public address of the machine reaches
//! every service listening on `0.0.0.0` (the gateway's own HTTP server
//! included) just as loopback does.
//!
//! Listed afresh with `getifaddrs(3)` for each check (one netlink dump,
//! microseconds next to a fetch), so an interface added or renumbered while
//! the gateway runs is covered at once; no cache to go stale.

use super::address::reached;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` (in any spelling [`reached`] knows) is one of `own`'s.
pub fn is_own(ip: IpAddr, own: &[IpAddr]) -> bool {
    let ip = reached(ip);
    own.iter().any(|own| reached(*own) == ip)
}

/// Every address of every interface of this host, up or down.
#[expect(
    unsafe_code,
    reason = "getifaddrs(3) through libc: rustix has no getifaddrs, and nix's needs a crate not in the lock"
)]
pub fn own_addresses() -> io::Result<Vec<IpAddr>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: on success getifaddrs stores a list that stays ours until freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut addresses = Vec::new();
    let mut entry = list;
    while !entry.is_null() {
        // SAFETY: `entry` is a node of that list, which is freed only below.
        let interface = unsafe { &*entry };
        // SAFETY: `ifa_addr` is null or a socket address of its family's size.
        if let Some(ip) = unsafe { ip_of(interface.ifa_addr) } {
            addresses.push(ip);
        }
        entry = interface.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and nothing refers to it any more.
    unsafe { libc::freeifaddrs(list) };
    Ok(addresses)
}

/// The IP address in `addr` (IPv4 or IPv6), `None` for another family.
///
/// # Safety
///
/// `addr` is null or points to a socket address as large as its family's.
#[expect(
    unsafe_code,
    reason = "getifaddrs(3) through libc: rustix has no getifaddrs, and nix's needs a crate not in the lock"
)]
unsafe fn ip_of(addr: *const libc::sockaddr) -> Option<IpAddr> {
    if addr.is_null() {
        return None;
    }
    // SAFETY: the caller's promise; unaligned reads need no alignment from the C side.
    let family = i32::from(unsafe { std::ptr::read_unaligned(addr) }.sa_family);
    match family {
        libc::AF_INET => {
            // SAFETY: the caller's promise: an AF_INET address is a whole `sockaddr_in`.
            let v4 = unsafe { std::ptr::read_unaligned(addr.cast::<libc::sockaddr_in>()) };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))))
        }
        libc::AF_INET6 => {
            // SAFETY: the caller's promise: an AF_INET6 address is a whole `sockaddr_in6`.
            let v6 = unsafe { std::ptr::read_unaligned(addr.cast::<libc::sockaddr_in6>()) };
            Some(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_interface_is_listed() {
        let addresses = own_addresses().unwrap();
        assert!(addresses.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)), "{addresses:?}");
    }

    #[test]
    fn an_own_address_is_recognised_in_its_ipv6_spellings() {
        let own = ["192.0.2.2".parse().unwrap(), "2001:db8::2".parse().unwrap()];
        for ip in ["192.0.2.2", "::ffff:192.0.2.2", "::c000:202", "64:ff9b::c000:202", "2001:db8::2"] {
            assert!(is_own(ip.parse().unwrap(), &own), "{ip}");
        }
        assert!(!is_own("192.0.2.3".parse().unwrap(), &own));
    }
}
