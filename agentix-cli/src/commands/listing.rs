//! How the listings (`agentix ps`, `ps --snapshots`) write an owner and
//! an age.

use agentix::{Liveness, OwnerId};

/// How an owner reads in a listing.
pub(crate) fn owner_state(owner: Option<&OwnerId>) -> &'static str {
    match owner.map(OwnerId::liveness) {
        Some(Liveness::Alive) => "alive",
        Some(Liveness::Dead) => "dead",
        Some(Liveness::Elsewhere) => "elsewhere",
        None => "unknown",
    }
}

/// `42s`, `7m`, `3h`, `2d`.
pub(crate) fn human_age(seconds: u64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}
