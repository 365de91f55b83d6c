//! [`Task`]: one unit of work a pool runs, by id.

/// One unit of work: an id unique within the run (the record and a resumed
/// run know it by that id) and the input the work function gets.
#[derive(Debug, Clone, PartialEq)]
pub struct Task<I> {
    /// Unique within the run; what the record and a resumed run go by.
    pub id: String,
    /// What the work function is given, once per attempt.
    pub input: I,
}

impl<I> Task<I> {
    /// A task `id` with `input`.
    pub fn new(id: impl Into<String>, input: I) -> Self {
        Task {
            id: id.into(),
            input,
        }
    }
}
