//! Which channel FUSE requests travel: the classic `/dev/fuse` read/write
//! loop, or FUSE over io_uring (Linux 6.14+), where each CPU's requests are
//! served on a ring by a thread pinned to that CPU instead of waking a
//! thread on another CPU (docs/design.md, "FUSE transport").

use std::fmt;
use std::path::Path;

use log::info;

/// The kernel's switch for FUSE over io_uring (off by default; root may
/// turn it on). Absent when the kernel lacks the feature.
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// What `mount --transport` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// io_uring when the kernel offers it (`enable_uring` on), else classic.
    #[default]
    Auto,
    /// io_uring or fail; switches `enable_uring` on when it is off (root).
    Uring,
    /// `/dev/fuse` only.
    Classic,
}

impl Transport {
    pub fn parse(s: &str) -> Option<Transport> {
        match s {
            "auto" => Some(Transport::Auto),
            "uring" => Some(Transport::Uring),
            "classic" => Some(Transport::Classic),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Auto => "auto",
            Transport::Uring => "uring",
            Transport::Classic => "classic",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of the kernel's switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UringSwitch {
    /// The kernel has no FUSE over io_uring.
    Missing,
    Off,
    On,
}

pub fn uring_switch() -> UringSwitch {
    switch_at(Path::new(ENABLE_URING))
}

fn switch_at(path: &Path) -> UringSwitch {
    match std::fs::read(path) {
        Ok(v) if v.first() == Some(&b'Y') || v.first() == Some(&b'1') => UringSwitch::On,
        Ok(_) => UringSwitch::Off,
        Err(_) => UringSwitch::Missing,
    }
}

/// The note `mount` prints when io_uring is available but switched off.
pub const SWITCH_HINT: &str = "FUSE over io_uring is available but switched off (faster metadata operations): \
     `echo Y > /sys/module/fuse/parameters/enable_uring` as root switches it on for new mounts, \
     or mount with `--transport uring`";

/// Decides, before mounting, whether to ask the kernel for io_uring at
/// FUSE_INIT. `--transport uring` switches the kernel on when it is off
/// (only then: the switch is system-wide) and fails when it cannot.
pub fn want_uring(transport: Transport) -> Result<bool, String> {
    want_uring_at(transport, Path::new(ENABLE_URING))
}

fn want_uring_at(transport: Transport, switch: &Path) -> Result<bool, String> {
    match (transport, switch_at(switch)) {
        (Transport::Classic, _) => Ok(false),
        (_, UringSwitch::On) => Ok(true),
        (Transport::Auto, _) => Ok(false),
        (Transport::Uring, UringSwitch::Missing) => Err(format!(
            "--transport uring: this kernel has no FUSE over io_uring ({} is missing; it needs Linux 6.14 or later built with CONFIG_FUSE_IO_URING)",
            switch.display()
        )),
        (Transport::Uring, UringSwitch::Off) => match std::fs::write(switch, b"Y") {
            Ok(()) if switch_at(switch) == UringSwitch::On => {
                info!("switched FUSE over io_uring on ({} = Y), as --transport uring asked", switch.display());
                Ok(true)
            }
            Ok(()) => Err(format!("--transport uring: {} did not take the value Y", switch.display())),
            Err(e) => Err(format!(
                "--transport uring: FUSE over io_uring is switched off and cannot be switched on ({e}); as root: `echo Y > {}`",
                switch.display()
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_follow_the_switch() {
        let dir = tempfile::tempdir().unwrap();
        let switch = dir.path().join("enable_uring");
        let missing = dir.path().join("absent");
        std::fs::write(&switch, b"N\n").unwrap();
        assert_eq!(want_uring_at(Transport::Classic, &switch), Ok(false));
        assert_eq!(want_uring_at(Transport::Auto, &switch), Ok(false), "auto never switches the kernel on");
        assert_eq!(std::fs::read(&switch).unwrap(), b"N\n");
        assert_eq!(want_uring_at(Transport::Uring, &switch), Ok(true), "uring switches it on");
        assert_eq!(std::fs::read(&switch).unwrap(), b"Y");
        assert_eq!(want_uring_at(Transport::Auto, &switch), Ok(true));
        assert_eq!(want_uring_at(Transport::Auto, &missing), Ok(false));
        let err = want_uring_at(Transport::Uring, &missing).unwrap_err();
        assert!(err.contains("no FUSE over io_uring"), "{err}");
    }

    #[test]
    fn names_round_trip() {
        for t in [Transport::Auto, Transport::Uring, Transport::Classic] {
            assert_eq!(Transport::parse(t.as_str()), Some(t));
        }
        assert_eq!(Transport::parse("ring"), None);
    }
}
