//! Unit tests for the wire parsers.
