//! DynamoDB's documented limits, shared by every engine and by the model layer's chunking.

/// Largest item, attribute names included.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;
/// Largest partition key value.
pub const MAX_PARTITION_KEY_BYTES: usize = 2048;
/// Largest sort key value.
pub const MAX_SORT_KEY_BYTES: usize = 1024;
/// Most data one `Query` or `Scan` page reads.
pub const MAX_PAGE_BYTES: usize = 1024 * 1024;
/// Most writes in one `BatchWriteItem`.
pub const MAX_BATCH_WRITE: usize = 25;
/// Most keys in one `BatchGetItem`.
pub const MAX_BATCH_GET: usize = 100;
/// Most data one `BatchGetItem` returns.
pub const MAX_BATCH_GET_BYTES: usize = 16 * 1024 * 1024;
/// Most items in one transaction.
pub const MAX_TRANSACT_ITEMS: usize = 100;
/// Most data in one transaction.
pub const MAX_TRANSACT_BYTES: usize = 4 * 1024 * 1024;
/// Most global secondary indexes per table.
pub const MAX_GSIS: usize = 20;
/// Most local secondary indexes per table.
pub const MAX_LSIS: usize = 5;
/// Longest expression string.
pub const MAX_EXPRESSION_BYTES: usize = 4096;
/// Bytes of data per write capacity unit.
pub const WRITE_UNIT_BYTES: usize = 1024;
/// Bytes of data per read capacity unit.
pub const READ_UNIT_BYTES: usize = 4096;
/// How long a `ClientRequestToken` makes a transaction idempotent.
pub const IDEMPOTENCY_WINDOW_SECS: u64 = 600;
