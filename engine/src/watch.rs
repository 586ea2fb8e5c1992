//! `WATCH (query) WHEN condition` as a poll loop (DESIGN.md §4, docs/watch.md).
//!
//! Each poll re-opens the dataset's tables (so files that arrived since are read) and runs the
//! query with the condition added to its HAVING: the rows that satisfy it. The condition holds
//! when at least one row does. An alert is raised when it becomes true — on the first poll
//! where it holds, and again only after a poll where it did not.

use serde::Serialize;

use crate::engine::Engine;
use crate::envelope::Envelope;
use crate::error::Result;
use crate::lower::time::rfc3339;
use crate::syntax::ast::{BoolExpr, Statement, WatchQuery};

/// What one alert carries: which poll raised it, when, and the envelope of the rows that
/// satisfied the condition.
#[derive(Debug, Clone, Serialize)]
pub struct Alert {
    pub poll: u64,
    /// The wall-clock time of the poll.
    pub evaluated_at: String,
    /// The canonical text of the condition.
    pub condition: String,
    /// The canonical text of the whole WATCH statement.
    pub watch: String,
    pub envelope: Envelope,
}

/// The outcome of one poll.
#[derive(Debug, Clone)]
pub struct Poll {
    pub poll: u64,
    /// Whether the condition held.
    pub holds: bool,
    /// Set when the condition became true at this poll.
    pub alert: Option<Alert>,
}

/// A WATCH statement's state between polls.
#[derive(Debug, Clone)]
pub struct Watcher {
    watch: WatchQuery,
    polls: u64,
    held: bool,
}

impl Watcher {
    pub fn new(watch: WatchQuery) -> Self {
        Watcher {
            watch,
            polls: 0,
            held: false,
        }
    }

    /// How many polls have run.
    pub fn polls(&self) -> u64 {
        self.polls
    }

    /// Evaluate the query once over the dataset as it is now.
    pub async fn poll(&mut self, engine: &Engine) -> Result<Poll> {
        let mut q = (*self.watch.query).clone();
        q.having = Some(match q.having.take() {
            Some(h) => BoolExpr::And(Box::new(h), Box::new(self.watch.when.clone())),
            None => self.watch.when.clone(),
        });
        let envelope = engine.query_parsed(Statement::Retrieve(q)).await?;
        self.polls += 1;
        let holds = !envelope.rows.is_empty();
        let alert = (holds && !self.held).then(|| Alert {
            poll: self.polls,
            evaluated_at: rfc3339(chrono::Utc::now()),
            condition: self.watch.when.to_string(),
            watch: Statement::Watch(self.watch.clone()).to_string(),
            envelope,
        });
        self.held = holds;
        Ok(Poll {
            poll: self.polls,
            holds,
            alert,
        })
    }
}
