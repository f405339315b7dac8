//! The conformance suite: one set of cases every engine must pass. Filled in by the suite's author.
