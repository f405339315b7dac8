//! Integration tests of the embedded engine: the conformance suite, the crash test and the model-based test.

mod backup;
mod conformance;
mod crash;
mod engine;
mod model_based;
