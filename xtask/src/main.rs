//! Tally's developer tasks (`cargo xtask …`).
fn main() {}
