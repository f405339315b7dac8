//! The one table of conformance cases each emulator cannot pass, with the reason. Where an
//! emulator and the embedded engine disagreed, the DynamoDB developer guide decided; only
//! emulator deviations are listed here.

use store::conformance::Unsupported;

/// dynalite's deviations from DynamoDB.
pub const UNSUPPORTED_DYNALITE: &[Unsupported] = &[];

/// moto's deviations from DynamoDB.
pub const UNSUPPORTED_MOTO: &[Unsupported] = &[];
