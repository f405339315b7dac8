//! Table definitions: key schema, secondary indexes, projections, billing, TTL and streams.

use crate::value::{AttributeValue, Item, ValueType};

/// A key attribute's scalar type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarType {
    /// String.
    S,
    /// Number.
    N,
    /// Binary.
    B,
}

impl ScalarType {
    /// DynamoDB's descriptor: `"S"`, `"N"` or `"B"`.
    pub fn descriptor(self) -> &'static str {
        match self {
            ScalarType::S => "S",
            ScalarType::N => "N",
            ScalarType::B => "B",
        }
    }

    /// Whether `value` is of this type.
    pub fn matches(self, value: &AttributeValue) -> bool {
        matches!(
            (self, value.value_type()),
            (ScalarType::S, ValueType::S) | (ScalarType::N, ValueType::N) | (ScalarType::B, ValueType::B)
        )
    }
}

/// One key attribute: its name and type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyAttribute {
    /// Attribute name.
    pub name: String,
    /// Scalar type.
    pub ty: ScalarType,
}

impl KeyAttribute {
    /// A key attribute.
    pub fn new(name: impl Into<String>, ty: ScalarType) -> Self {
        KeyAttribute { name: name.into(), ty }
    }
}

/// A partition key and an optional sort key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeySchema {
    /// Partition (hash) key.
    pub partition: KeyAttribute,
    /// Sort (range) key.
    pub sort: Option<KeyAttribute>,
}

impl KeySchema {
    /// A key schema with a partition key only.
    pub fn hash(name: impl Into<String>, ty: ScalarType) -> Self {
        KeySchema { partition: KeyAttribute::new(name, ty), sort: None }
    }

    /// A key schema with partition and sort keys.
    pub fn composite(pk: impl Into<String>, pk_ty: ScalarType, sk: impl Into<String>, sk_ty: ScalarType) -> Self {
        KeySchema { partition: KeyAttribute::new(pk, pk_ty), sort: Some(KeyAttribute::new(sk, sk_ty)) }
    }

    /// The key attributes, partition first.
    pub fn attributes(&self) -> impl Iterator<Item = &KeyAttribute> {
        std::iter::once(&self.partition).chain(self.sort.as_ref())
    }

    /// The key of `item` under this schema, if every key attribute is present.
    pub fn key_of(&self, item: &Item) -> Option<Item> {
        let mut key = Item::new();
        for attr in self.attributes() {
            key.insert(attr.name.clone(), item.get(&attr.name)?.clone());
        }
        Some(key)
    }
}

/// Which attributes an index stores.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Projection {
    /// Every attribute.
    #[default]
    All,
    /// Table and index keys only.
    KeysOnly,
    /// Keys plus the named attributes.
    Include(Vec<String>),
}

/// Read and write capacity for provisioned billing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Throughput {
    /// Read capacity units.
    pub read: u64,
    /// Write capacity units.
    pub write: u64,
}

/// How the table is billed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum BillingMode {
    /// On-demand (pay per request).
    #[default]
    PayPerRequest,
    /// Provisioned with the given table throughput (indexes get the same unless set).
    Provisioned(Throughput),
}

/// A global secondary index.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GlobalSecondaryIndex {
    /// Index name.
    pub name: String,
    /// The attributes the index is keyed on (partition, and sort if any).
    pub key_schema: KeySchema,
    /// What it stores.
    pub projection: Projection,
}

/// A local secondary index: the table's partition key with another sort key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LocalSecondaryIndex {
    /// Index name.
    pub name: String,
    /// Its sort key.
    pub sort: KeyAttribute,
    /// What it stores.
    pub projection: Projection,
}

/// What a change stream records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamView {
    /// Keys only.
    KeysOnly,
    /// The item after the change.
    NewImage,
    /// The item before the change.
    OldImage,
    /// Both images.
    NewAndOldImages,
}

/// Everything needed to create a table.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TableDefinition {
    /// Table name (3–255 characters of `[A-Za-z0-9_.-]`).
    pub name: String,
    /// Primary key.
    pub key_schema: KeySchema,
    /// Global secondary indexes (at most 20).
    pub global_indexes: Vec<GlobalSecondaryIndex>,
    /// Local secondary indexes (at most 5; the table must have a sort key).
    pub local_indexes: Vec<LocalSecondaryIndex>,
    /// Billing mode.
    pub billing: BillingMode,
    /// The TTL attribute, if time to live is enabled.
    pub ttl_attribute: Option<String>,
    /// Change stream, if enabled.
    pub stream: Option<StreamView>,
    /// Point-in-time recovery (honoured by the DynamoDB engine and infrastructure generators).
    pub point_in_time_recovery: bool,
}

impl TableDefinition {
    /// A pay-per-request table with the given primary key and nothing else.
    pub fn new(name: impl Into<String>, key_schema: KeySchema) -> Self {
        TableDefinition {
            name: name.into(),
            key_schema,
            global_indexes: Vec::new(),
            local_indexes: Vec::new(),
            billing: BillingMode::PayPerRequest,
            ttl_attribute: None,
            stream: None,
            point_in_time_recovery: false,
        }
    }

    /// Adds a global secondary index.
    pub fn gsi(mut self, name: impl Into<String>, key_schema: KeySchema, projection: Projection) -> Self {
        self.global_indexes.push(GlobalSecondaryIndex { name: name.into(), key_schema, projection });
        self
    }

    /// Adds a local secondary index.
    pub fn lsi(mut self, name: impl Into<String>, sort: KeyAttribute, projection: Projection) -> Self {
        self.local_indexes.push(LocalSecondaryIndex { name: name.into(), sort, projection });
        self
    }

    /// Enables time to live on `attribute`.
    pub fn ttl(mut self, attribute: impl Into<String>) -> Self {
        self.ttl_attribute = Some(attribute.into());
        self
    }

    /// The key schema of the table (`None`) or of the named index.
    pub fn index_key_schema(&self, index: Option<&str>) -> Option<KeySchema> {
        let Some(index) = index else {
            return Some(self.key_schema.clone());
        };
        if let Some(g) = self.global_indexes.iter().find(|g| g.name == index) {
            return Some(g.key_schema.clone());
        }
        self.local_indexes
            .iter()
            .find(|l| l.name == index)
            .map(|l| KeySchema { partition: self.key_schema.partition.clone(), sort: Some(l.sort.clone()) })
    }

    /// Every attribute that is part of a key of the table or of an index, with its type.
    pub fn key_attributes(&self) -> Vec<KeyAttribute> {
        let mut out: Vec<KeyAttribute> = Vec::new();
        let mut push = |a: &KeyAttribute| {
            if !out.iter().any(|o| o.name == a.name) {
                out.push(a.clone());
            }
        };
        self.key_schema.attributes().for_each(&mut push);
        for g in &self.global_indexes {
            g.key_schema.attributes().for_each(&mut push);
        }
        for l in &self.local_indexes {
            push(&l.sort);
        }
        out
    }
}

/// The state of a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TableStatus {
    /// Being created.
    Creating,
    /// Ready.
    Active,
    /// Being deleted.
    Deleting,
    /// Being updated.
    Updating,
}

/// What `describe_table` returns.
#[derive(Clone, Debug, PartialEq)]
pub struct TableDescription {
    /// The definition the table was created with.
    pub definition: TableDefinition,
    /// Whether the table is being created, active, or being deleted.
    pub status: TableStatus,
    /// Approximate item count.
    pub item_count: u64,
    /// Approximate size in bytes.
    pub size_bytes: u64,
}
