//! Tests for the expression module.
