//! Answers remembered for the User-Agents seen lately: a site's visitors send a few thousand
//! distinct User-Agents, each many times, while working an answer out (the parser's patterns,
//! the bot list's expression) costs about a microsecond. The bot check and the User-Agent parser
//! each keep one.

use hashbrown::HashMap;
use std::sync::Mutex;

/// At most `CAPACITY` answers, keyed by User-Agent; emptied whenever it fills, so it needs no
/// bookkeeping per hit and never holds more than the cap. Hashed by `hashbrown`'s default
/// (foldhash, seeded at random per map) like the aggregation's keys: with std's SipHash, the two
/// lookups of an event's User-Agent took about 900 instructions (callgrind, `tally bench`).
pub(crate) struct Recent<V, const CAPACITY: usize> {
    answers: Mutex<HashMap<Box<str>, V>>,
}

impl<V: Clone, const CAPACITY: usize> Recent<V, CAPACITY> {
    pub fn new() -> Self {
        Recent { answers: Mutex::new(HashMap::new()) }
    }

    /// The answer for `user_agent`: remembered, or worked out by `answer` (outside the lock)
    /// and remembered.
    pub fn get_or(&self, user_agent: &str, answer: impl FnOnce(&str) -> V) -> V {
        // A panic elsewhere while the lock was held leaves a map that is still whole, so a
        // poisoned lock is used as it is.
        if let Some(known) = store::sync::lock(&self.answers).get(user_agent) {
            return known.clone();
        }
        let fresh = answer(user_agent);
        let mut answers = store::sync::lock(&self.answers);
        if answers.len() >= CAPACITY {
            answers.clear();
        }
        answers.insert(user_agent.into(), fresh.clone());
        fresh
    }
}
