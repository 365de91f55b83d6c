//! `/e2e-typed`: a plugin written on a typed protocol, its sandbox half
//! here, its host half in the tests. Its handlers keep their state in what
//! their closures capture, not in statics.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentix::{Attachment, NamespaceFault, SandboxHalf};
use serde::{Deserialize, Serialize};

/// One number of a counted run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Count(pub u64);
/// Asks the sandbox half for everything it has counted so far.
#[derive(Debug, Serialize, Deserialize)]
pub struct Finish;
/// Everything the sandbox half counted, in the order it handled it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Tally(pub Vec<u64>);
/// Asks the sandbox half to send `Counted(i)` for `i` in `0..n`.
#[derive(Debug, Serialize, Deserialize)]
pub struct CountUp(pub u64);
/// One number the sandbox counts up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counted(pub u64);
/// A request for twice the number; `Overflow` when it does not fit.
#[derive(Debug, Serialize, Deserialize)]
pub struct Double(pub u64);
/// Twice the number asked for.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Doubled(pub u64);
/// A request answered only when a second one arrives: two of them finish
/// only if they run side by side.
#[derive(Debug, Serialize, Deserialize)]
pub struct Meet;
/// A request that waits until its asker cancels it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Stall {
    /// Names it in the [`Stopped`] event.
    pub tag: String,
}
/// Never sent: a [`Stall`] is not answered.
#[derive(Debug, Serialize, Deserialize)]
pub struct Never;
/// Sent when a [`Stall`]'s asker cancelled it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Stopped {
    /// The stalled request's tag.
    pub tag: String,
}
/// Asks the sandbox half to ask the host for half of the number.
#[derive(Debug, Serialize, Deserialize)]
pub struct AskHalf(pub u64);
/// The sandbox's request to the host.
#[derive(Debug, Serialize, Deserialize)]
pub struct Halve(pub u64);
/// The host's answer to [`Halve`].
#[derive(Debug, Serialize, Deserialize)]
pub struct Halved(pub u64);
/// What the sandbox half got back for its [`Halve`]: the half, or the
/// error text.
#[derive(Debug, Serialize, Deserialize)]
pub struct HalfAnswer(pub Result<u64, String>);
/// Bytes for the sandbox half, as a binary attachment.
#[derive(Debug, Serialize, Deserialize)]
pub struct Chunk {
    /// Which chunk.
    pub seq: u64,
    /// Its bytes.
    pub bytes: Attachment,
}
/// A [`Chunk`] back from the sandbox half: the length it read, and the
/// bytes reversed (so they were read, not passed through).
#[derive(Debug, Serialize, Deserialize)]
pub struct Reversed {
    /// The chunk's `seq`.
    pub seq: u64,
    /// How many bytes the sandbox half read.
    pub len: u64,
    /// The bytes, last first.
    pub bytes: Attachment,
}

agentix::namespace_protocol! {
    /// The e2e tests' typed plugin.
    pub struct Counting = "/e2e-typed";
    to_sandbox {
        events [Count, Finish, CountUp, AskHalf, Chunk]
        requests [Double => Doubled, Meet => Meet, Stall => Never]
    }
    to_host {
        events [Tally, Counted, Stopped, HalfAnswer, Reversed]
        requests [Halve as "halve" => Halved]
    }
}

/// Sends [`Stopped`] when the stalled request holding it is dropped.
struct ReportStop(agentix::SandboxEnd<Counting>, String);

impl Drop for ReportStop {
    fn drop(&mut self) {
        self.0.emit(&Stopped {
            tag: std::mem::take(&mut self.1),
        });
    }
}

/// Registers `/e2e-typed`'s sandbox half in this worker ("open", or the
/// registration error's text).
#[agentix::remote]
pub async fn open_typed() -> String {
    let counted = Arc::new(Mutex::new(Vec::new()));
    let meeting = Arc::new(tokio::sync::Barrier::new(2));
    let half = SandboxHalf::<Counting>::new()
        .on({
            let counted = counted.clone();
            move |_, Count(i)| {
                let counted = counted.clone();
                async move {
                    // Earlier events take longer: handled side by side,
                    // later ones would overtake them.
                    if i % 64 < 3 {
                        tokio::time::sleep(Duration::from_millis(3 - i % 64)).await;
                    }
                    tokio::task::yield_now().await;
                    counted.lock().unwrap().push(i);
                }
            }
        })
        .on(move |end, Finish| {
            let tally = Tally(counted.lock().unwrap().clone());
            async move { end.emit(&tally) }
        })
        .on(|end, CountUp(n)| async move {
            for i in 0..n {
                end.emit(&Counted(i));
            }
        })
        .on(|end, Chunk { seq, bytes }| async move {
            let mut reversed = bytes.as_bytes().to_vec();
            reversed.reverse();
            end.emit(&Reversed {
                seq,
                len: bytes.len() as u64,
                bytes: Attachment::new(reversed),
            });
        })
        .on(|end, AskHalf(n)| async move {
            let answer = end.request(&Halve(n)).await;
            end.emit(&HalfAnswer(answer.map(|h| h.0).map_err(|e| e.to_string())));
        })
        .answer(|_, Double(n), _| async move {
            n.checked_mul(2)
                .map(Doubled)
                .ok_or_else(|| NamespaceFault::new("Overflow", format!("{n} doubled")))
        })
        .answer(move |_, Meet, _| {
            let meeting = meeting.clone();
            async move {
                meeting.wait().await;
                Ok(Meet)
            }
        })
        .answer(|end, Stall { tag }, _| async move {
            // The asker's cancel drops this future: the guard reports it.
            let _stopped = ReportStop(end, tag);
            std::future::pending::<Result<Never, NamespaceFault>>().await
        });
    match half.register() {
        Ok(_) => "open".into(),
        Err(e) => e.to_string(),
    }
}
