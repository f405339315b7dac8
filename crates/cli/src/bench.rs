//! `tally bench`: whole-system figures — ingestion in process and over HTTP, write units per
//! event, read units and latency of a dashboard — on the embedded engine in a temporary directory.

pub mod load;
