//! Unit tests of the pure parts: deltas of single events (expect tests) and the item codecs.

use super::*;
