//! Process groups: every spawned command leads a group of its own, so a
//! signal to the group reaches everything it started, however deep.
//!
//! "Alive" ignores zombies: an orphan is reparented to PID 1, and a PID 1 that
//! does not reap (common in containers) leaves it in the group as a zombie that
//! runs nothing. Processes that leave the group (`setsid`) are out of reach.

use rustix::io::Errno;
use rustix::process::{Pid, Signal, kill_process_group, test_kill_process_group};

/// Sends `signal` to the group; a group that is already gone is not an error.
pub fn signal_group(pgid: Pid, signal: Signal) {
    match kill_process_group(pgid, signal) {
        Ok(()) | Err(Errno::SRCH) => {}
        Err(error) => {
            tracing::warn!(pgid = pgid.as_raw_pid(), %error, "signalling a process group failed")
        }
    }
}

/// True while any process of the group is alive (zombies do not count).
pub fn group_is_alive(pgid: Pid) -> bool {
    match test_kill_process_group(pgid) {
        Err(Errno::SRCH) => false,
        _ => has_live_member(pgid.as_raw_pid()),
    }
}

/// Scans `/proc` for a member of group `pgid` that is not a zombie. Assumes
/// one is alive when `/proc` cannot be read.
#[cfg(target_os = "linux")]
fn has_live_member(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|entry| {
        let is_pid = entry.file_name().to_str().is_some_and(|name| name.bytes().all(|b| b.is_ascii_digit()));
        is_pid
            && std::fs::read_to_string(entry.path().join("stat"))
                .ok()
                .and_then(|stat| parse_stat(&stat))
                .is_some_and(|(state, group)| group == pgid && !matches!(state, 'Z' | 'X'))
    })
}

#[cfg(not(target_os = "linux"))]
fn has_live_member(_pgid: i32) -> bool {
    true
}

/// The state and process group from a `/proc/<pid>/stat` line. The command
/// name may hold spaces and parentheses, so fields are read after the last `)`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn parse_stat(stat: &str) -> Option<(char, i32)> {
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _parent = fields.next()?;
    let group = fields.next()?.parse().ok()?;
    Some((state, group))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_command_name() {
        assert_eq!(parse_stat("42 (my (odd) cmd) S 1 4242 4242 0 -1"), Some(('S', 4242)));
        assert_eq!(parse_stat("7 (sleep) Z 1 99 99"), Some(('Z', 99)));
        assert_eq!(parse_stat("garbage"), None);
    }
}
