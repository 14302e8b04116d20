//! Who may ask the daemon what. The owner (the daemon's own user, or root)
//! may do everything. The agent's user, when the mount names one
//! (`--agent-user`), may mark turns (its hooks announce prompts), read the
//! history and preview: PawGit's rule, the agent may preview a rewind but
//! not perform one. Anyone else is refused. The caller is known from the
//! socket (SO_PEERCRED), not from anything it says.

use crate::daemon::control::{Peer, Request};
use crate::error::{ErrorKind, Failure};

/// The users the policy knows.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// The daemon's user.
    pub owner: u32,
    /// The agent's user, if the mount names one.
    pub agent: Option<u32>,
}

/// What the agent's user may ask: nothing that changes the tree, deletes
/// history or mounts anything.
fn agent_may(req: &Request) -> bool {
    match req {
        Request::Status(_)
        | Request::Turn(_)
        | Request::Log(_)
        | Request::Diff(_)
        | Request::History(_)
        | Request::Fsck(_)
        | Request::Checkpoints(_)
        | Request::Resolve(_)
        | Request::Du(_) => true,
        Request::Restore(r) => r.dry_run,
        Request::Forget(r) => r.dry_run,
        Request::Gc(r) => r.dry_run,
        // A name keeps a checkpoint from collection for good.
        Request::Snapshot(_) => false,
        Request::Reset(_) => false,
        Request::Rewind(r) => r.dry_run,
        // The remote's are the owner's: they cost the network (a check
        // reads the whole bucket).
        Request::Unmount(_) | Request::Show(_) | Request::Push(_) | Request::FsckRemote(_) => false,
    }
}

impl Policy {
    /// Whose bound `uid`'s control connections count against: the agent's
    /// is below the owner's, and everyone else shares one.
    pub fn peer(&self, uid: u32) -> Peer {
        if uid == 0 || uid == self.owner {
            Peer::Owner
        } else if self.agent == Some(uid) {
            Peer::Agent
        } else {
            Peer::Others
        }
    }

    /// Whether `uid` may make request `req`; the refusal says why.
    pub fn check(&self, uid: u32, req: &Request) -> Result<(), Failure> {
        if uid == 0 || uid == self.owner {
            return Ok(());
        }
        if self.agent == Some(uid) {
            if agent_may(req) {
                return Ok(());
            }
            return Err(Failure::new(
                ErrorKind::Refused,
                Some(libc::EPERM),
                format!(
                    "`{}` is the owner's: the agent (uid {uid}) may mark turns, read the history and preview \
                     (--dry-run), but not change the tree, delete history or mount views",
                    req.name()
                ),
            ));
        }
        Err(Failure::new(
            ErrorKind::Refused,
            Some(libc::EPERM),
            format!("uid {uid} is neither the owner (uid {}) nor this mount's agent user", self.owner),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::control as op;

    #[test]
    fn the_owner_may_all_the_agent_may_preview_others_nothing() {
        let p = Policy { owner: 0, agent: Some(1000) };
        let all: Vec<(Request, bool)> = vec![
            (op::Status.into(), true),
            (op::Turn { info: Default::default() }.into(), true),
            (op::Log.into(), true),
            (op::Diff { from: "0".into(), to: None, paths: vec![], patch: true }.into(), true),
            (op::History { path: "a".into() }.into(), true),
            (op::Fsck.into(), true),
            (op::FsckRemote.into(), false),
            (op::Restore { checkpoint: "0".into(), paths: vec![], dry_run: true }.into(), true),
            (op::Restore { checkpoint: "0".into(), paths: vec![], dry_run: false }.into(), false),
            (op::Rewind { checkpoint: "0".into(), dry_run: true }.into(), true),
            (op::Rewind { checkpoint: "0".into(), dry_run: false }.into(), false),
            (op::Unmount { lazy: false }.into(), false),
            (op::Show { checkpoint: "0".into(), mountpoint: "/tmp/v".into() }.into(), false),
            (op::Du.into(), true),
            (op::Forget { checkpoints: vec!["1".into()], dry_run: true }.into(), true),
            (op::Forget { checkpoints: vec!["1".into()], dry_run: false }.into(), false),
            (op::Gc { dry_run: true, keep_count: None, keep_days: None, auto: None }.into(), true),
            (op::Gc { dry_run: false, keep_count: None, keep_days: None, auto: None }.into(), false),
            (op::Snapshot { name: "n".into(), message: None, at: None }.into(), false),
            (op::Reset { confirm: true }.into(), false),
            (op::Checkpoints.into(), true),
            (op::Resolve { reference: "r1".into() }.into(), true),
            (op::Push { wait_secs: 0 }.into(), false),
        ];
        for (req, agent) in &all {
            assert!(p.check(0, req).is_ok(), "owner refused {}", req.name());
            assert_eq!(p.check(1000, req).is_ok(), *agent, "agent and {}", req.name());
            let e = p.check(1001, req).expect_err("a stranger was allowed");
            assert_eq!(e.kind, ErrorKind::Refused);
        }
        let no_agent = Policy { owner: 0, agent: None };
        assert!(no_agent.check(1000, &op::Log.into()).is_err());
    }

    #[test]
    fn the_agent_s_connections_are_bounded_below_the_owner_s_and_strangers_share_one_bound() {
        let p = Policy { owner: 1000, agent: Some(1001) };
        let peers: Vec<Peer> = [0, 1000, 1001, 1002, 1003].into_iter().map(|uid| p.peer(uid)).collect();
        assert_eq!(peers, [Peer::Owner, Peer::Owner, Peer::Agent, Peer::Others, Peer::Others]);
        assert!(Peer::Agent.max_connections() < Peer::Owner.max_connections());
    }
}
