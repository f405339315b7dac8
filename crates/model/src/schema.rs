//! The schema: one table, its entities with key templates per index, and the access patterns.
//!
//! A [`Schema`] is defined once, in Rust, with builders, and everything else derives from
//! it: the keys every write computes, the queries, the design document and the
//! infrastructure templates. [`SchemaBuilder::build`] validates the whole definition and
//! reports every problem at once; a built `Schema` is valid, so code holding one never
//! re-checks it.
//!
//! ```
//! use model::schema::{AccessPattern, Attribute, Entity, Schema, SortShape};
//! use store::{KeySchema, ScalarType, TableDefinition};
//!
//! let table = TableDefinition::new(
//!     "blog",
//!     KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S),
//! );
//! let schema = Schema::builder(table)
//!     .entity(
//!         Entity::new("Post")
//!             .attribute(Attribute::string("author").required())
//!             .attribute(Attribute::string("post_id").ulid())
//!             .attribute(Attribute::string("title").required())
//!             .timestamps()
//!             .key("USER#{author}", "POST#{post_id}"),
//!     )
//!     .access_pattern(
//!         AccessPattern::query("posts_by_author", "An author's posts, oldest first")
//!             .entity("Post")
//!             .sort(SortShape::BeginsWith),
//!     )
//!     .build()
//!     .unwrap();
//! let sample = schema.sample_item("Post").unwrap();
//! assert_eq!(sample["pk"], store::AttributeValue::from("USER#author-1"));
//! ```
//!
//! Tools that describe a schema (design documents, the access-pattern matrix,
//! infrastructure templates) read it through [`Schema::table`], [`Schema::entities`] (each
//! with [`Entity::attributes`], [`Entity::keys`] and [`Entity::ttl`]),
//! [`Schema::access_patterns`] (with [`AccessPattern::key_condition_text`]),
//! [`Schema::indexes`] and [`Schema::sample_item`]; these are kept stable.
//!
//! Validation checks, among other things, that templates reference declared attributes of
//! a keyable type, that every index exists and gets the key attributes it needs, that table
//! keys can always be computed, and that no two entities' keys on one index can collide or
//! reach into each other's prefix (see [`crate::key`] for why that makes keys unforgeable).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use store::{AttributeValue, Item, ScalarType, TableDefinition};

use crate::key::{KeyError, KeyTemplate, Segment, SegmentKind, TemplateError};

/// The type of an entity attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AttributeType {
    /// `S`.
    String,
    /// `N`.
    Number,
    /// `BOOL`.
    Bool,
    /// `B`.
    Binary,
    /// `M`.
    Map,
    /// `L`.
    List,
    /// `SS`.
    StringSet,
    /// `NS`.
    NumberSet,
    /// `BS`.
    BinarySet,
    /// Any type (including `NULL`); for free-form values.
    Any,
}

impl AttributeType {
    /// Whether `value` has this type.
    pub fn matches(self, value: &AttributeValue) -> bool {
        use AttributeValue as V;
        matches!(
            (self, value),
            (AttributeType::String, V::S(_))
                | (AttributeType::Number, V::N(_))
                | (AttributeType::Bool, V::Bool(_))
                | (AttributeType::Binary, V::B(_))
                | (AttributeType::Map, V::M(_))
                | (AttributeType::List, V::L(_))
                | (AttributeType::StringSet, V::Ss(_))
                | (AttributeType::NumberSet, V::Ns(_))
                | (AttributeType::BinarySet, V::Bs(_))
                | (AttributeType::Any, _)
        )
    }

    /// DynamoDB's descriptor (`S`, `N`, `BOOL`, …); `*` for [`AttributeType::Any`].
    pub fn descriptor(self) -> &'static str {
        match self {
            AttributeType::String => "S",
            AttributeType::Number => "N",
            AttributeType::Bool => "BOOL",
            AttributeType::Binary => "B",
            AttributeType::Map => "M",
            AttributeType::List => "L",
            AttributeType::StringSet => "SS",
            AttributeType::NumberSet => "NS",
            AttributeType::BinarySet => "BS",
            AttributeType::Any => "*",
        }
    }

    /// How a value of this type is encoded in a key segment, if it can be part of a key.
    pub fn segment_kind(self) -> Option<SegmentKind> {
        match self {
            AttributeType::String => Some(SegmentKind::String),
            AttributeType::Number => Some(SegmentKind::Integer),
            AttributeType::Bool => Some(SegmentKind::Bool),
            AttributeType::Binary => Some(SegmentKind::Binary),
            _ => None,
        }
    }
}

impl fmt::Display for AttributeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.descriptor())
    }
}

/// A value the model layer fills in on write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Generated {
    /// A new ULID (26 characters, sorts by creation time) when the caller gives none.
    Ulid,
    /// The creation time, epoch milliseconds, set on create and put.
    CreatedAt,
    /// The time of the last write, epoch milliseconds, set on every write.
    UpdatedAt,
}

/// One declared attribute of an entity.
#[derive(Clone, Debug, PartialEq)]
pub struct Attribute {
    /// The attribute name, as stored.
    pub name: String,
    /// Its type.
    pub ty: AttributeType,
    /// Whether every write must carry it (after defaults and generation).
    pub required: bool,
    /// The value written when the caller gives none.
    pub default: Option<AttributeValue>,
    /// Whether the model layer generates it.
    pub generated: Option<Generated>,
    /// What it means, for the design document.
    pub description: Option<String>,
    /// An example value for sample items; a type-based one is made up when absent.
    pub example: Option<AttributeValue>,
}

impl Attribute {
    /// An optional attribute of type `ty`.
    pub fn new(name: impl Into<String>, ty: AttributeType) -> Self {
        Attribute {
            name: name.into(),
            ty,
            required: false,
            default: None,
            generated: None,
            description: None,
            example: None,
        }
    }

    /// A string attribute.
    pub fn string(name: impl Into<String>) -> Self {
        Attribute::new(name, AttributeType::String)
    }

    /// A number attribute.
    pub fn number(name: impl Into<String>) -> Self {
        Attribute::new(name, AttributeType::Number)
    }

    /// A boolean attribute.
    pub fn bool(name: impl Into<String>) -> Self {
        Attribute::new(name, AttributeType::Bool)
    }

    /// A binary attribute.
    pub fn binary(name: impl Into<String>) -> Self {
        Attribute::new(name, AttributeType::Binary)
    }

    /// A map attribute.
    pub fn map(name: impl Into<String>) -> Self {
        Attribute::new(name, AttributeType::Map)
    }

    /// A list attribute.
    pub fn list(name: impl Into<String>) -> Self {
        Attribute::new(name, AttributeType::List)
    }

    /// A string-set attribute.
    pub fn string_set(name: impl Into<String>) -> Self {
        Attribute::new(name, AttributeType::StringSet)
    }

    /// A number-set attribute.
    pub fn number_set(name: impl Into<String>) -> Self {
        Attribute::new(name, AttributeType::NumberSet)
    }

    /// A binary-set attribute.
    pub fn binary_set(name: impl Into<String>) -> Self {
        Attribute::new(name, AttributeType::BinarySet)
    }

    /// An attribute of any type.
    pub fn any(name: impl Into<String>) -> Self {
        Attribute::new(name, AttributeType::Any)
    }

    /// Makes it required.
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// Sets its default value (which also makes it always present).
    pub fn default_value(mut self, value: impl Into<AttributeValue>) -> Self {
        self.default = Some(value.into());
        self
    }

    /// Marks it generated.
    pub fn generated(mut self, generated: Generated) -> Self {
        self.generated = Some(generated);
        self
    }

    /// Shorthand for a string attribute generated as a ULID when absent.
    pub fn ulid(mut self) -> Self {
        self.ty = AttributeType::String;
        self.generated = Some(Generated::Ulid);
        self
    }

    /// Sets its description.
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    /// Sets the example value used by sample items.
    pub fn example(mut self, value: impl Into<AttributeValue>) -> Self {
        self.example = Some(value.into());
        self
    }

    /// Whether every written item has it: required, defaulted or generated.
    pub fn always_present(&self) -> bool {
        self.required || self.default.is_some() || self.generated.is_some()
    }

    /// The value sample items use: the example, the default, or one made up from the type.
    pub fn sample_value(&self) -> AttributeValue {
        if let Some(v) = self.example.as_ref().or(self.default.as_ref()) {
            return v.clone();
        }
        match self.generated {
            Some(Generated::Ulid) => return AttributeValue::from(SAMPLE_ULID),
            Some(Generated::CreatedAt) | Some(Generated::UpdatedAt) => {
                return AttributeValue::from(SAMPLE_TIME_MS);
            }
            None => {}
        }
        match self.ty {
            AttributeType::String | AttributeType::Any => AttributeValue::S(format!("{}-1", self.name)),
            AttributeType::Number => AttributeValue::from(1),
            AttributeType::Bool => AttributeValue::Bool(true),
            AttributeType::Binary => AttributeValue::B(vec![0x01, 0x02]),
            AttributeType::Map => AttributeValue::M(BTreeMap::new()),
            AttributeType::List => AttributeValue::L(Vec::new()),
            AttributeType::StringSet => AttributeValue::Ss([format!("{}-1", self.name)].into_iter().collect()),
            AttributeType::NumberSet => AttributeValue::Ns([1.into()].into_iter().collect()),
            AttributeType::BinarySet => AttributeValue::Bs([vec![0x01]].into_iter().collect()),
        }
    }
}

/// The ULID sample items use for generated ids.
pub const SAMPLE_ULID: &str = "01JD7X3K5M0000000000000000";
/// The time sample items use for timestamps: 2024-11-22T08:00:00Z in epoch milliseconds.
pub const SAMPLE_TIME_MS: i64 = 1_732_262_400_000;

/// An index of the table: the table's own key, a global or a local secondary index.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Index {
    /// The table's primary key.
    Table,
    /// A global secondary index, by name.
    Global(String),
    /// A local secondary index, by name.
    Local(String),
}

impl Index {
    /// The index name to send with a request (`None` for the table).
    pub fn name(&self) -> Option<&str> {
        match self {
            Index::Table => None,
            Index::Global(n) | Index::Local(n) => Some(n),
        }
    }

    /// A name for humans: `table` or the index name.
    pub fn label(&self) -> &str {
        self.name().unwrap_or("table")
    }
}

impl fmt::Display for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// An entity's key on one index: the templates and the attributes they fill.
#[derive(Clone, Debug, PartialEq)]
pub struct EntityKey {
    /// The table or secondary index these templates key the entity on.
    pub index: Index,
    /// The partition key template (for a local index, the table's).
    pub partition: KeyTemplate,
    /// The sort key template, when the index has a sort key.
    pub sort: Option<KeyTemplate>,
    /// The partition key attribute name.
    pub partition_attribute: String,
    /// The sort key attribute name.
    pub sort_attribute: Option<String>,
    /// The partition key attribute's type (a string unless the template is one raw field).
    pub partition_type: ScalarType,
    /// The sort key attribute's type.
    pub sort_type: Option<ScalarType>,
}

/// One key attribute an entity writes: its name, template and type.
#[derive(Clone, Copy, Debug)]
pub struct KeyPart<'a> {
    /// The key attribute name.
    pub attribute: &'a str,
    /// The template that renders the attribute's value from the entity's fields.
    pub template: &'a KeyTemplate,
    /// Its type: `S` for rendered keys, `N` or `B` for a raw single field.
    pub ty: ScalarType,
    /// Whether it is a partition key (longer keys are allowed).
    pub is_partition: bool,
}

impl KeyPart<'_> {
    /// Renders this key attribute from `item`, or `None` when a field is absent.
    pub fn render(&self, item: &Item) -> Result<Option<AttributeValue>, KeyError> {
        if self.ty != ScalarType::S {
            // Validation made this template a single field of the matching type, so the
            // value is written as it is.
            let field = self.template.single_field().unwrap_or_default();
            return Ok(item.get(field).cloned());
        }
        let Some(s) = self.template.render(|f| item.get(f))? else {
            return Ok(None);
        };
        let max =
            if self.is_partition { store::limits::MAX_PARTITION_KEY_BYTES } else { store::limits::MAX_SORT_KEY_BYTES };
        if s.len() > max {
            return Err(KeyError::TooLong { attribute: self.attribute.to_string(), len: s.len(), max });
        }
        Ok(Some(AttributeValue::S(s)))
    }
}

impl EntityKey {
    /// The key attributes this key writes: for a local index only its sort key, since the
    /// partition key is the table's.
    pub fn written(&self) -> impl Iterator<Item = KeyPart<'_>> {
        let partition = (!matches!(self.index, Index::Local(_))).then_some(KeyPart {
            attribute: &self.partition_attribute,
            template: &self.partition,
            ty: self.partition_type,
            is_partition: true,
        });
        let sort = match (&self.sort_attribute, &self.sort, self.sort_type) {
            (Some(attribute), Some(template), Some(ty)) => {
                Some(KeyPart { attribute, template, ty, is_partition: false })
            }
            _ => None,
        };
        partition.into_iter().chain(sort)
    }

    /// The partition key part (for a local index, the table's partition key).
    pub fn partition_part(&self) -> KeyPart<'_> {
        KeyPart {
            attribute: &self.partition_attribute,
            template: &self.partition,
            ty: self.partition_type,
            is_partition: true,
        }
    }

    /// The sort key part, if the index has a sort key.
    pub fn sort_part(&self) -> Option<KeyPart<'_>> {
        match (&self.sort_attribute, &self.sort, self.sort_type) {
            (Some(attribute), Some(template), Some(ty)) => {
                Some(KeyPart { attribute, template, ty, is_partition: false })
            }
            _ => None,
        }
    }

    /// Every field either template references.
    pub fn fields(&self) -> BTreeSet<&str> {
        self.partition.fields().chain(self.sort.iter().flat_map(|s| s.fields())).collect()
    }
}

/// How an entity's TTL is set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TtlSpec {
    /// The attribute (the table's TTL attribute), epoch seconds.
    pub attribute: String,
    /// Written as now + this when the caller gives no TTL.
    pub default_after: Option<Duration>,
}

/// An entity: a kind of item on the table, with typed attributes and key templates.
#[derive(Clone, Debug, PartialEq)]
pub struct Entity {
    name: String,
    description: Option<String>,
    attributes: Vec<Attribute>,
    /// Each attribute's position in `attributes`, by name: every put checks each of its
    /// attributes, and events declare about thirty.
    by_name: hashbrown::HashMap<String, usize>,
    keys: Vec<EntityKey>,
    ttl: Option<TtlSpec>,
    open: bool,
}

impl Entity {
    /// Starts defining an entity named `name` (the value of the entity-type attribute).
    #[allow(clippy::new_ret_no_self)]
    pub fn new(name: impl Into<String>) -> EntityBuilder {
        EntityBuilder {
            name: name.into(),
            description: None,
            attributes: Vec::new(),
            keys: Vec::new(),
            ttl: None,
            open: false,
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its description.
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// Its declared attributes, in declaration order.
    pub fn attributes(&self) -> &[Attribute] {
        &self.attributes
    }

    /// The declared attribute named `name`.
    pub fn attribute(&self, name: &str) -> Option<&Attribute> {
        self.attributes.get(*self.by_name.get(name)?)
    }

    /// Its keys, the table's first.
    pub fn keys(&self) -> &[EntityKey] {
        &self.keys
    }

    /// Its key on `index`, if it has one.
    pub fn key(&self, index: &Index) -> Option<&EntityKey> {
        self.keys.iter().find(|k| &k.index == index)
    }

    /// Its key on the table.
    pub fn table_key(&self) -> &EntityKey {
        // Validation guarantees a table key, and builds put it first.
        &self.keys[0]
    }

    /// Its TTL, if it has one.
    pub fn ttl(&self) -> Option<&TtlSpec> {
        self.ttl.as_ref()
    }

    /// Whether undeclared attributes are accepted on write.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// The attribute holding the creation time, if timestamps are on.
    pub fn created_at(&self) -> Option<&Attribute> {
        self.attributes.iter().find(|a| a.generated == Some(Generated::CreatedAt))
    }

    /// The attribute holding the last write time, if timestamps are on.
    pub fn updated_at(&self) -> Option<&Attribute> {
        self.attributes.iter().find(|a| a.generated == Some(Generated::UpdatedAt))
    }

    /// Computes every index key attribute of `item` (which holds the entity's attributes).
    ///
    /// A key whose template references an absent field is left out, so the item stays out of
    /// that index (a sparse index). Only the table key is mandatory; `Ok(None)` for it means
    /// a field of the table key is missing.
    pub fn index_keys(&self, item: &Item) -> Result<Option<Item>, KeyError> {
        let mut out = Item::new();
        for key in &self.keys {
            // A local index shares the table's partition key, so it is written only when
            // the table key is; the table key is rendered first.
            let mut parts = vec![key.partition_part()];
            parts.extend(key.sort_part());
            let mut rendered = Vec::new();
            let mut complete = true;
            for part in parts {
                match part.render(item)? {
                    Some(v) => rendered.push((part.attribute.to_string(), v)),
                    None => complete = false,
                }
            }
            // Sparse keys: an index gets its attributes only when every one of them renders,
            // so an item never sits in an index with half a key.
            if complete {
                out.extend(rendered);
            } else if key.index == Index::Table {
                return Ok(None);
            }
        }
        Ok(Some(out))
    }

    /// The table's primary key of the item with these field values, or `None` when a field
    /// of the table key is missing.
    pub fn primary_key(&self, fields: &Item) -> Result<Option<Item>, KeyError> {
        let key = self.table_key();
        let mut out = Item::new();
        for part in std::iter::once(key.partition_part()).chain(key.sort_part()) {
            match part.render(fields)? {
                Some(v) => {
                    out.insert(part.attribute.to_string(), v);
                }
                None => return Ok(None),
            }
        }
        Ok(Some(out))
    }
}

/// Builds an [`Entity`]; the schema parses its templates and validates it.
#[derive(Clone, Debug)]
pub struct EntityBuilder {
    name: String,
    description: Option<String>,
    attributes: Vec<Attribute>,
    keys: Vec<(Option<String>, Option<String>, Option<String>)>,
    ttl: Option<TtlSpec>,
    open: bool,
}

impl EntityBuilder {
    /// Sets the description.
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    /// Declares an attribute.
    pub fn attribute(mut self, attribute: Attribute) -> Self {
        self.attributes.push(attribute);
        self
    }

    /// Declares `created_at` and `updated_at`, epoch milliseconds, maintained on every write.
    pub fn timestamps(self) -> Self {
        self.timestamps_named("created_at", "updated_at")
    }

    /// Declares creation and update timestamps under the given names.
    pub fn timestamps_named(self, created: &str, updated: &str) -> Self {
        self.attribute(
            Attribute::number(created)
                .generated(Generated::CreatedAt)
                .description("Creation time, epoch milliseconds."),
        )
        .attribute(
            Attribute::number(updated)
                .generated(Generated::UpdatedAt)
                .description("Time of the last write, epoch milliseconds."),
        )
    }

    /// The table key: partition and sort templates (pass `""` as the sort template when the
    /// table has no sort key).
    pub fn key(mut self, partition: &str, sort: &str) -> Self {
        self.keys.push((None, Some(partition.to_string()), (!sort.is_empty()).then(|| sort.to_string())));
        self
    }

    /// The key on a global secondary index (`""` as the sort template when it has none).
    pub fn gsi(mut self, index: &str, partition: &str, sort: &str) -> Self {
        self.keys.push((
            Some(index.to_string()),
            Some(partition.to_string()),
            (!sort.is_empty()).then(|| sort.to_string()),
        ));
        self
    }

    /// The sort key on a local secondary index (the partition key is the table's).
    pub fn lsi(mut self, index: &str, sort: &str) -> Self {
        self.keys.push((Some(index.to_string()), None, Some(sort.to_string())));
        self
    }

    /// Declares the TTL attribute (the table's TTL attribute, a number of epoch seconds).
    pub fn ttl(mut self, attribute: &str) -> Self {
        self.ttl = Some(TtlSpec { attribute: attribute.to_string(), default_after: None });
        if !self.attributes.iter().any(|a| a.name == attribute) {
            self.attributes.push(Attribute::number(attribute).description("Expiry time, epoch seconds (TTL)."));
        }
        self
    }

    /// Declares the TTL attribute and writes now + `after` when the caller gives no TTL.
    pub fn ttl_after(mut self, attribute: &str, after: Duration) -> Self {
        self = self.ttl(attribute);
        if let Some(t) = &mut self.ttl {
            t.default_after = Some(after);
        }
        self
    }

    /// Accepts attributes that are not declared (they are stored untyped).
    pub fn open(mut self) -> Self {
        self.open = true;
        self
    }
}

/// The operation an access pattern uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// `GetItem` by full key.
    Get,
    /// `Query` on a partition.
    Query,
    /// `Scan` (to be avoided for anything frequent).
    Scan,
}

/// What a query's sort key condition looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SortShape {
    /// No sort key condition: the whole partition.
    None,
    /// `sk = :v`.
    Equals,
    /// `begins_with(sk, :prefix)`.
    BeginsWith,
    /// `sk BETWEEN :a AND :b`.
    Between,
    /// `sk < :v`.
    LessThan,
    /// `sk <= :v`.
    LessOrEqual,
    /// `sk > :v`.
    GreaterThan,
    /// `sk >= :v`.
    GreaterOrEqual,
}

impl SortShape {
    /// The condition as DynamoDB writes it, with `sk` standing for the sort key attribute.
    pub fn render(self, sk: &str) -> Option<String> {
        Some(match self {
            SortShape::None => return None,
            SortShape::Equals => format!("{sk} = :sk"),
            SortShape::BeginsWith => format!("begins_with({sk}, :sk)"),
            SortShape::Between => format!("{sk} BETWEEN :lo AND :hi"),
            SortShape::LessThan => format!("{sk} < :sk"),
            SortShape::LessOrEqual => format!("{sk} <= :sk"),
            SortShape::GreaterThan => format!("{sk} > :sk"),
            SortShape::GreaterOrEqual => format!("{sk} >= :sk"),
        })
    }
}

/// One access pattern of the application: a row of the access-pattern matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct AccessPattern {
    /// Short identifier (`orders_by_customer`).
    pub name: String,
    /// What it is for.
    pub description: String,
    /// The entities it returns.
    pub entities: Vec<String>,
    /// The index it reads (resolved by [`SchemaBuilder::build`]).
    pub index: Index,
    /// Whether the pattern is a get, a query or a scan.
    pub operation: Operation,
    /// The sort key condition.
    pub sort: SortShape,
    /// Whether it reads newest first (descending sort key).
    pub descending: bool,
    index_name: Option<String>,
}

impl AccessPattern {
    fn new(name: &str, description: &str, operation: Operation) -> Self {
        AccessPattern {
            name: name.to_string(),
            description: description.to_string(),
            entities: Vec::new(),
            index: Index::Table,
            operation,
            sort: if operation == Operation::Get { SortShape::Equals } else { SortShape::None },
            descending: false,
            index_name: None,
        }
    }

    /// A `GetItem` by full key.
    pub fn get(name: &str, description: &str) -> Self {
        AccessPattern::new(name, description, Operation::Get)
    }

    /// A `Query`.
    pub fn query(name: &str, description: &str) -> Self {
        AccessPattern::new(name, description, Operation::Query)
    }

    /// A `Scan`.
    pub fn scan(name: &str, description: &str) -> Self {
        AccessPattern::new(name, description, Operation::Scan)
    }

    /// Adds an entity it returns.
    pub fn entity(mut self, entity: &str) -> Self {
        self.entities.push(entity.to_string());
        self
    }

    /// Reads the named secondary index instead of the table.
    pub fn index(mut self, index: &str) -> Self {
        self.index_name = Some(index.to_string());
        self
    }

    /// Sets the sort key condition.
    pub fn sort(mut self, sort: SortShape) -> Self {
        self.sort = sort;
        self
    }

    /// Marks it as reading in descending order.
    pub fn descending(mut self) -> Self {
        self.descending = true;
        self
    }

    /// The key condition with the entity's templates in place of values, for documents:
    /// `pk = CUSTOMER#{customer} AND begins_with(sk, ORDER#)`.
    pub fn key_condition_text(&self, schema: &Schema) -> String {
        let Some(entity) = self.entities.first().and_then(|e| schema.entity(e)) else {
            return String::new();
        };
        let Some(key) = entity.key(&self.index) else {
            return String::new();
        };
        if self.operation == Operation::Scan {
            return String::new();
        }
        let mut text = format!("{} = {}", key.partition_attribute, key.partition);
        if let (Some(sk), Some(template)) = (&key.sort_attribute, &key.sort) {
            let value = match self.sort {
                SortShape::BeginsWith => template.literal_prefix(),
                _ => template.source().to_string(),
            };
            let cond = match self.sort {
                SortShape::None => None,
                SortShape::Equals => Some(format!("{sk} = {value}")),
                SortShape::BeginsWith => Some(format!("begins_with({sk}, {value})")),
                SortShape::Between => Some(format!("{sk} BETWEEN {value} AND {value}")),
                SortShape::LessThan => Some(format!("{sk} < {value}")),
                SortShape::LessOrEqual => Some(format!("{sk} <= {value}")),
                SortShape::GreaterThan => Some(format!("{sk} > {value}")),
                SortShape::GreaterOrEqual => Some(format!("{sk} >= {value}")),
            };
            if let Some(c) = cond {
                text.push_str(" AND ");
                text.push_str(&c);
            }
        }
        text
    }
}

/// One thing wrong with a schema definition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaProblem {
    /// Two entities share a name, or a name is empty.
    #[error("entity name `{0}` is empty or used twice")]
    EntityName(String),
    /// An attribute is declared twice, or collides with a key or the entity-type attribute.
    #[error("entity `{entity}`: attribute `{attribute}` {reason}")]
    AttributeName {
        /// The entity.
        entity: String,
        /// The attribute.
        attribute: String,
        /// What is wrong.
        reason: String,
    },
    /// An attribute's default or generation does not fit its type.
    #[error("entity `{entity}`: attribute `{attribute}` {reason}")]
    AttributeSpec {
        /// The entity.
        entity: String,
        /// The attribute.
        attribute: String,
        /// What is wrong.
        reason: String,
    },
    /// A key template does not parse.
    #[error("entity `{entity}`: {error}")]
    Template {
        /// The entity.
        entity: String,
        /// The parse error.
        error: TemplateError,
    },
    /// A key references an index the table does not have, or does not fit its key schema.
    #[error("entity `{entity}`, index `{index}`: {reason}")]
    Index {
        /// The entity.
        entity: String,
        /// The index.
        index: String,
        /// What is wrong.
        reason: String,
    },
    /// A template field is not a declared attribute of a keyable type.
    #[error("entity `{entity}`, index `{index}`: field `{field}` {reason}")]
    Field {
        /// The entity.
        entity: String,
        /// The index.
        index: String,
        /// The field.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// Two entities' keys on one index could collide or reach into each other's prefix.
    #[error("index `{index}`: keys of `{first}` and `{second}` are ambiguous: {reason}")]
    AmbiguousKeys {
        /// The index.
        index: String,
        /// One entity.
        first: String,
        /// The other.
        second: String,
        /// Why.
        reason: String,
    },
    /// The TTL declaration does not fit the table.
    #[error("entity `{entity}`: {reason}")]
    Ttl {
        /// The entity.
        entity: String,
        /// What is wrong.
        reason: String,
    },
    /// An access pattern is malformed.
    #[error("access pattern `{pattern}`: {reason}")]
    AccessPattern {
        /// The pattern.
        pattern: String,
        /// What is wrong.
        reason: String,
    },
    /// The table definition itself is unusable.
    #[error("table: {0}")]
    Table(String),
}

/// Every problem found in a schema definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    /// The problems, in the order they were found.
    pub problems: Vec<SchemaProblem>,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid schema ({} problem", self.problems.len())?;
        if self.problems.len() != 1 {
            f.write_str("s")?;
        }
        f.write_str(")")?;
        for p in &self.problems {
            write!(f, "\n- {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SchemaError {}

/// A validated single-table schema.
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    table: TableDefinition,
    entity_type_attribute: String,
    entities: Vec<Entity>,
    access_patterns: Vec<AccessPattern>,
    description: Option<String>,
}

/// Builds a [`Schema`].
#[derive(Clone, Debug)]
pub struct SchemaBuilder {
    table: TableDefinition,
    entity_type_attribute: String,
    entities: Vec<EntityBuilder>,
    access_patterns: Vec<AccessPattern>,
    description: Option<String>,
}

/// The entity-type attribute's name unless set otherwise.
pub const DEFAULT_ENTITY_TYPE_ATTRIBUTE: &str = "_et";

impl Schema {
    /// Starts a schema on `table`.
    pub fn builder(table: TableDefinition) -> SchemaBuilder {
        SchemaBuilder {
            table,
            entity_type_attribute: DEFAULT_ENTITY_TYPE_ATTRIBUTE.to_string(),
            entities: Vec::new(),
            access_patterns: Vec::new(),
            description: None,
        }
    }

    /// The table definition.
    pub fn table(&self) -> &TableDefinition {
        &self.table
    }

    /// The table name.
    pub fn table_name(&self) -> &str {
        &self.table.name
    }

    /// The same schema on a table with another name (tests and per-tenant tables).
    pub fn with_table_name(mut self, name: impl Into<String>) -> Schema {
        self.table.name = name.into();
        self
    }

    /// The attribute holding each item's entity name.
    pub fn entity_type_attribute(&self) -> &str {
        &self.entity_type_attribute
    }

    /// The schema's description.
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// The entities, in definition order.
    pub fn entities(&self) -> &[Entity] {
        &self.entities
    }

    /// The entity named `name`.
    pub fn entity(&self, name: &str) -> Option<&Entity> {
        self.entities.iter().find(|e| e.name == name)
    }

    /// The access patterns, in definition order.
    pub fn access_patterns(&self) -> &[AccessPattern] {
        &self.access_patterns
    }

    /// Every index: the table first, then global, then local indexes in definition order.
    pub fn indexes(&self) -> Vec<Index> {
        let mut out = vec![Index::Table];
        out.extend(self.table.global_indexes.iter().map(|g| Index::Global(g.name.clone())));
        out.extend(self.table.local_indexes.iter().map(|l| Index::Local(l.name.clone())));
        out
    }

    /// Resolves an index name (`None` for the table).
    pub fn index(&self, name: Option<&str>) -> Option<Index> {
        let Some(name) = name else {
            return Some(Index::Table);
        };
        self.indexes().into_iter().find(|i| i.name() == Some(name))
    }

    /// The entities with a key on `index`.
    pub fn entities_on(&self, index: &Index) -> impl Iterator<Item = &Entity> {
        self.entities.iter().filter(move |e| e.key(index).is_some())
    }

    /// An example item of `entity` as it would be stored: every attribute filled with its
    /// example (or default, or a made-up value), every index key computed, the entity-type
    /// attribute set. For design documents.
    pub fn sample_item(&self, entity: &str) -> Option<Item> {
        let entity = self.entity(entity)?;
        let mut item: Item = entity.attributes.iter().map(|a| (a.name.clone(), a.sample_value())).collect();
        if let Some(ttl) = &entity.ttl
            && entity.attribute(&ttl.attribute).and_then(|a| a.example.as_ref()).is_none()
        {
            let after = ttl.default_after.map_or(86_400, |d| d.as_secs());
            let secs = SAMPLE_TIME_MS / 1000 + i64::try_from(after).unwrap_or(0);
            item.insert(ttl.attribute.clone(), AttributeValue::from(secs));
        }
        // Sample values are chosen to render, so an error here means an example value the
        // caller set does not fit a key; the item is then shown without that key.
        if let Ok(Some(keys)) = entity.index_keys(&item) {
            item.extend(keys);
        }
        item.insert(self.entity_type_attribute.clone(), AttributeValue::from(entity.name.as_str()));
        Some(item)
    }
}

impl SchemaBuilder {
    /// Sets the entity-type attribute's name (default `_et`).
    pub fn entity_type_attribute(mut self, name: &str) -> Self {
        self.entity_type_attribute = name.to_string();
        self
    }

    /// Sets the description.
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    /// Adds an entity.
    pub fn entity(mut self, entity: EntityBuilder) -> Self {
        self.entities.push(entity);
        self
    }

    /// Adds an access pattern.
    pub fn access_pattern(mut self, pattern: AccessPattern) -> Self {
        self.access_patterns.push(pattern);
        self
    }

    /// Validates the definition and builds the schema, or reports every problem found.
    pub fn build(self) -> Result<Schema, SchemaError> {
        let mut problems = Vec::new();
        let table = &self.table;
        if table.name.is_empty() {
            problems.push(SchemaProblem::Table("the table name is empty".into()));
        }
        if !table.local_indexes.is_empty() && table.key_schema.sort.is_none() {
            problems.push(SchemaProblem::Table("local secondary indexes need a table sort key".into()));
        }
        let key_names: BTreeSet<String> = table.key_attributes().into_iter().map(|k| k.name).collect();
        if self.entity_type_attribute.is_empty() || key_names.contains(&self.entity_type_attribute) {
            problems.push(SchemaProblem::Table(format!(
                "the entity-type attribute `{}` is empty or a key attribute",
                self.entity_type_attribute
            )));
        }

        let mut entities = Vec::new();
        let mut names = BTreeSet::new();
        for def in self.entities {
            if def.name.is_empty() || !names.insert(def.name.clone()) {
                problems.push(SchemaProblem::EntityName(def.name.clone()));
            }
            if let Some(entity) = build_entity(table, &self.entity_type_attribute, &key_names, def, &mut problems) {
                entities.push(entity);
            }
        }

        check_disjoint_keys(table, &entities, &mut problems);

        let mut access_patterns = Vec::new();
        let mut pattern_names = BTreeSet::new();
        for mut p in self.access_patterns {
            let problem = |reason: String| SchemaProblem::AccessPattern { pattern: p.name.clone(), reason };
            if p.name.is_empty() || !pattern_names.insert(p.name.clone()) {
                problems.push(problem("name is empty or used twice".into()));
            }
            let index = match &p.index_name {
                None => Some(Index::Table),
                Some(n) => resolve_index(table, n),
            };
            let Some(index) = index else {
                problems.push(problem(format!("index `{}` does not exist", p.index_name.clone().unwrap_or_default())));
                continue;
            };
            if p.entities.is_empty() {
                problems.push(problem("names no entity".into()));
            }
            for e in &p.entities {
                match entities.iter().find(|x| &x.name == e) {
                    None => problems.push(problem(format!("entity `{e}` does not exist"))),
                    Some(entity) if entity.key(&index).is_none() => {
                        problems.push(problem(format!("entity `{e}` has no key on index `{index}`")))
                    }
                    Some(_) => {}
                }
            }
            if p.operation == Operation::Get && index != Index::Table {
                problems.push(problem("a get reads the table, not an index".into()));
            }
            p.index = index;
            access_patterns.push(p);
        }

        if problems.is_empty() {
            Ok(Schema {
                table: self.table,
                entity_type_attribute: self.entity_type_attribute,
                entities,
                access_patterns,
                description: self.description,
            })
        } else {
            Err(SchemaError { problems })
        }
    }
}

fn resolve_index(table: &TableDefinition, name: &str) -> Option<Index> {
    if table.global_indexes.iter().any(|g| g.name == name) {
        Some(Index::Global(name.to_string()))
    } else if table.local_indexes.iter().any(|l| l.name == name) {
        Some(Index::Local(name.to_string()))
    } else {
        None
    }
}

fn build_entity(
    table: &TableDefinition,
    entity_type_attribute: &str,
    key_names: &BTreeSet<String>,
    def: EntityBuilder,
    problems: &mut Vec<SchemaProblem>,
) -> Option<Entity> {
    let entity = def.name.clone();
    let before = problems.len();

    // Attributes.
    let mut seen = BTreeSet::new();
    for a in &def.attributes {
        let name_problem = |reason: &str| SchemaProblem::AttributeName {
            entity: entity.clone(),
            attribute: a.name.clone(),
            reason: reason.to_string(),
        };
        if a.name.is_empty() || !seen.insert(a.name.clone()) {
            problems.push(name_problem("is empty or declared twice"));
        }
        if key_names.contains(&a.name) {
            problems
                .push(name_problem("is a key attribute of the table or an index; keys are computed from templates"));
        }
        if a.name == entity_type_attribute {
            problems.push(name_problem("is the entity-type attribute"));
        }
        if table.ttl_attribute.as_deref() == Some(a.name.as_str())
            && def.ttl.as_ref().map(|t| t.attribute.as_str()) != Some(a.name.as_str())
        {
            problems.push(name_problem("is the table's TTL attribute; declare it with `.ttl(…)`"));
        }
        let spec_problem =
            |reason: String| SchemaProblem::AttributeSpec { entity: entity.clone(), attribute: a.name.clone(), reason };
        if let Some(d) = &a.default
            && !a.ty.matches(d)
        {
            problems.push(spec_problem(format!(
                "has a default of type {} but is declared {}",
                d.value_type().descriptor(),
                a.ty
            )));
        }
        if let Some(e) = &a.example
            && !a.ty.matches(e)
        {
            problems.push(spec_problem(format!(
                "has an example of type {} but is declared {}",
                e.value_type().descriptor(),
                a.ty
            )));
        }
        match (a.generated, a.ty) {
            (Some(Generated::Ulid), AttributeType::String)
            | (Some(Generated::CreatedAt | Generated::UpdatedAt), AttributeType::Number)
            | (None, _) => {}
            (Some(g), ty) => problems.push(spec_problem(format!("is generated as {g:?} but declared {ty}"))),
        }
        if a.generated.is_some() && a.default.is_some() {
            problems.push(spec_problem("is both generated and defaulted".into()));
        }
    }
    for g in [Generated::CreatedAt, Generated::UpdatedAt] {
        if def.attributes.iter().filter(|a| a.generated == Some(g)).count() > 1 {
            problems.push(SchemaProblem::AttributeSpec {
                entity: entity.clone(),
                attribute: format!("{g:?}"),
                reason: "is generated by more than one attribute".into(),
            });
        }
    }

    // TTL.
    if let Some(ttl) = &def.ttl {
        let problem = |reason: String| SchemaProblem::Ttl { entity: entity.clone(), reason };
        match &table.ttl_attribute {
            None => problems.push(problem("declares a TTL but the table has no TTL attribute".into())),
            Some(t) if *t != ttl.attribute => problems
                .push(problem(format!("TTL attribute `{}` is not the table's TTL attribute `{t}`", ttl.attribute))),
            Some(_) => {}
        }
        if let Some(a) = def.attributes.iter().find(|a| a.name == ttl.attribute)
            && a.ty != AttributeType::Number
        {
            problems.push(problem(format!("TTL attribute `{}` must be a number (epoch seconds)", a.name)));
        }
    }

    // Keys.
    let mut keys: Vec<EntityKey> = Vec::new();
    let table_key_def = def.keys.iter().find(|(i, _, _)| i.is_none());
    if table_key_def.is_none() {
        problems.push(SchemaProblem::Index {
            entity: entity.clone(),
            index: "table".into(),
            reason: "the entity has no table key (use `.key(…)`)".into(),
        });
    }
    let parse = |source: &str, problems: &mut Vec<SchemaProblem>| match KeyTemplate::parse(source) {
        Ok(t) => Some(t),
        Err(error) => {
            problems.push(SchemaProblem::Template { entity: entity.clone(), error });
            None
        }
    };
    let table_partition = table_key_def.and_then(|(_, p, _)| p.as_deref()).and_then(|p| parse(p, problems));
    let mut seen_indexes = BTreeSet::new();
    // The table key first, so that `Entity::table_key` can rely on it.
    let ordered = def.keys.iter().filter(|k| k.0.is_none()).chain(def.keys.iter().filter(|k| k.0.is_some()));
    for (index_name, partition, sort) in ordered {
        let label = index_name.clone().unwrap_or_else(|| "table".into());
        let index_problem = |reason: &str| SchemaProblem::Index {
            entity: entity.clone(),
            index: label.clone(),
            reason: reason.to_string(),
        };
        if !seen_indexes.insert(index_name.clone()) {
            problems.push(index_problem("has two keys on this index"));
            continue;
        }
        let (index, schema) = match index_name {
            None => (Index::Table, table.key_schema.clone()),
            Some(n) => match (resolve_index(table, n), table.index_key_schema(Some(n))) {
                (Some(i), Some(s)) => (i, s),
                _ => {
                    problems.push(index_problem("the table has no such index"));
                    continue;
                }
            },
        };
        match (&index, partition.is_some()) {
            (Index::Local(_), true) => {
                problems.push(index_problem("a local index takes only a sort template (`.lsi`)"));
                continue;
            }
            (Index::Global(_), false) => {
                problems.push(index_problem("a global index needs a partition template (`.gsi`)"));
                continue;
            }
            _ => {}
        }
        if schema.sort.is_some() != sort.is_some() {
            problems.push(index_problem(if schema.sort.is_some() {
                "the index has a sort key but no sort template was given"
            } else {
                "the index has no sort key but a sort template was given"
            }));
            continue;
        }
        let partition_template = match partition {
            Some(p) => parse(p, problems),
            None => table_partition.clone(),
        };
        let sort_template = match sort {
            Some(s) => parse(s, problems).map(Some),
            None => Some(None),
        };
        let (Some(partition_template), Some(sort_template)) = (partition_template, sort_template) else {
            continue;
        };
        let key = EntityKey {
            index: index.clone(),
            partition: partition_template,
            sort: sort_template,
            partition_attribute: schema.partition.name.clone(),
            sort_attribute: schema.sort.as_ref().map(|s| s.name.clone()),
            partition_type: schema.partition.ty,
            sort_type: schema.sort.as_ref().map(|s| s.ty),
        };
        for part in std::iter::once(key.partition_part()).chain(key.sort_part()) {
            check_template_fields(&entity, &index, &def.attributes, part, problems);
        }
        if index == Index::Table {
            for field in key.fields() {
                if let Some(a) = def.attributes.iter().find(|a| a.name == field)
                    && !a.always_present()
                {
                    problems.push(SchemaProblem::Field {
                        entity: entity.clone(),
                        index: label.clone(),
                        field: field.to_string(),
                        reason: "is in the table key, so it must be required, defaulted or generated".into(),
                    });
                }
            }
        }
        keys.push(key);
    }

    // A name declared twice is a schema problem reported above; the first declaration wins.
    let mut by_name = hashbrown::HashMap::new();
    for (i, a) in def.attributes.iter().enumerate() {
        by_name.entry(a.name.clone()).or_insert(i);
    }
    (problems.len() == before).then_some(Entity {
        name: def.name,
        description: def.description,
        attributes: def.attributes,
        by_name,
        keys,
        ttl: def.ttl,
        open: def.open,
    })
}

fn check_template_fields(
    entity: &str,
    index: &Index,
    attributes: &[Attribute],
    part: KeyPart<'_>,
    problems: &mut Vec<SchemaProblem>,
) {
    let problem = |field: &str, reason: String| SchemaProblem::Field {
        entity: entity.to_string(),
        index: index.label().to_string(),
        field: field.to_string(),
        reason,
    };
    for seg in part.template.segments() {
        let Segment::Field { name, width } = seg else {
            continue;
        };
        let Some(a) = attributes.iter().find(|a| &a.name == name) else {
            problems.push(problem(name, "is not a declared attribute".into()));
            continue;
        };
        if a.ty.segment_kind().is_none() {
            problems.push(problem(name, format!("is of type {}, which cannot be part of a key", a.ty)));
        }
        if width.is_some() && a.ty != AttributeType::Number {
            problems.push(problem(name, "has a width but is not a number".into()));
        }
    }
    match part.ty {
        ScalarType::S => {}
        ty => {
            let want = if ty == ScalarType::N { AttributeType::Number } else { AttributeType::Binary };
            let ok = part
                .template
                .single_field()
                .and_then(|f| attributes.iter().find(|a| a.name == f))
                .is_some_and(|a| a.ty == want);
            if !ok {
                problems.push(SchemaProblem::Index {
                    entity: entity.to_string(),
                    index: index.label().to_string(),
                    reason: format!(
                        "key attribute `{}` is of type {}, so its template must be one `{{field}}` of type {}",
                        part.attribute,
                        ty.descriptor(),
                        want
                    ),
                });
            }
        }
    }
}

/// How two templates at the same key position relate.
enum Relation {
    /// No key of one can equal or start with a prefix of the other.
    Disjoint,
    /// Their first difference is a field facing a literal: a value could forge the literal.
    Ambiguous(usize),
    /// Same segments (fields facing fields) up to the shorter one's end.
    SameShape,
}

fn relate(a: &KeyTemplate, b: &KeyTemplate) -> Relation {
    for (i, (x, y)) in a.segments().iter().zip(b.segments()).enumerate() {
        match (x, y) {
            (Segment::Literal(l), Segment::Literal(m)) if l == m => {}
            (Segment::Literal(_), Segment::Literal(_)) => return Relation::Disjoint,
            (Segment::Field { .. }, Segment::Field { .. }) => {}
            _ => return Relation::Ambiguous(i),
        }
    }
    Relation::SameShape
}

/// Rejects pairs of entities whose keys on one index could be equal, or where one entity's
/// values could produce a key inside the other's literal prefix.
fn check_disjoint_keys(table: &TableDefinition, entities: &[Entity], problems: &mut Vec<SchemaProblem>) {
    let mut indexes = vec![Index::Table];
    indexes.extend(table.global_indexes.iter().map(|g| Index::Global(g.name.clone())));
    indexes.extend(table.local_indexes.iter().map(|l| Index::Local(l.name.clone())));
    for index in &indexes {
        let on: Vec<(&Entity, &EntityKey)> = entities.iter().filter_map(|e| e.key(index).map(|k| (e, k))).collect();
        for (i, (e1, k1)) in on.iter().enumerate() {
            for (e2, k2) in &on[i + 1..] {
                let mut problem = |reason: String| {
                    problems.push(SchemaProblem::AmbiguousKeys {
                        index: index.label().to_string(),
                        first: e1.name.clone(),
                        second: e2.name.clone(),
                        reason,
                    })
                };
                // Partition keys must be equal to share a partition, and rendered keys with
                // different segment counts never are.
                if k1.partition.segments().len() != k2.partition.segments().len() {
                    continue;
                }
                match relate(&k1.partition, &k2.partition) {
                    Relation::Disjoint => continue,
                    Relation::Ambiguous(at) => {
                        problem(format!(
                            "partition templates `{}` and `{}` differ first at segment {} where one has a field and the other a literal; use distinct literals",
                            k1.partition,
                            k2.partition,
                            at + 1
                        ));
                        continue;
                    }
                    Relation::SameShape => {}
                }
                match (&k1.sort, &k2.sort) {
                    (Some(s1), Some(s2)) => match relate(s1, s2) {
                        Relation::Disjoint => {}
                        Relation::Ambiguous(at) => problem(format!(
                            "sort templates `{s1}` and `{s2}` differ first at segment {} where one has a field and the other a literal; use distinct literals",
                            at + 1
                        )),
                        Relation::SameShape if s1.segments().len() == s2.segments().len() => problem(format!(
                            "keys `{} / {s1}` and `{} / {s2}` have the same shape; start the sort templates with distinct literals",
                            k1.partition, k2.partition
                        )),
                        // One extends the other (`ORDER#{id}` and `ORDER#{id}#LINE#{n}`): a
                        // hierarchy, which cannot collide because the segment counts differ.
                        Relation::SameShape => {}
                    },
                    _ => problem(format!(
                        "partition templates `{}` and `{}` have the same shape and the index has no sort key",
                        k1.partition, k2.partition
                    )),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use store::{KeySchema, ScalarType, TableDefinition};

    use super::*;
    use crate::sample;

    fn table() -> TableDefinition {
        sample::shop_table("t")
    }

    fn check_problems(builder: SchemaBuilder, expect: Expect) {
        let err = builder.build().expect_err("the schema is invalid");
        expect.assert_eq(&err.to_string());
    }

    fn show(item: &Item) -> String {
        item.iter().map(|(k, v)| format!("{k}={v:?}")).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn sample_schema_is_valid_and_renders_sample_items() {
        let schema = sample::shop("shop");
        expect![[r#"
            _et=S("Order")
            created_at=N(Number(1732262400000))
            customer_id=S("customer_id-1")
            gsi1pk=S("ORDER#01JD7X3K5M0000000000000000")
            gsi1sk=S("ORDER")
            gsi2pk=S("STATUS#PENDING")
            gsi2sk=S("ORDER#1732262400000#01JD7X3K5M0000000000000000")
            lsi1sk=S("STATUS#PENDING#01JD7X3K5M0000000000000000")
            note=S("note-1")
            order_id=S("01JD7X3K5M0000000000000000")
            pk=S("CUSTOMER#customer_id-1")
            sk=S("ORDER#01JD7X3K5M0000000000000000")
            status=S("PENDING")
            total=N(Number(0))
            updated_at=N(Number(1732262400000))"#]]
        .assert_eq(&show(&schema.sample_item("Order").unwrap()));
        expect![[r#"
            _et=S("Cart")
            created_at=N(Number(1732262400000))
            customer_id=S("customer_id-1")
            expires_at=N(Number(1732867200))
            lines=L([])
            pk=S("CUSTOMER#customer_id-1")
            sk=S("CART")
            updated_at=N(Number(1732262400000))"#]]
        .assert_eq(&show(&schema.sample_item("Cart").unwrap()));
    }

    #[test]
    fn key_condition_text_uses_templates() {
        let schema = sample::shop("shop");
        let text: Vec<String> =
            schema.access_patterns().iter().map(|p| format!("{}: {}", p.name, p.key_condition_text(&schema))).collect();
        expect![[r#"
            get_customer: pk = CUSTOMER#{customer_id} AND sk = PROFILE
            customer_by_email: gsi1pk = EMAIL#{email} AND gsi1sk = CUSTOMER
            orders_of_customer: pk = CUSTOMER#{customer_id} AND begins_with(sk, ORDER#)
            order_with_lines: gsi1pk = ORDER#{order_id}
            orders_by_status: gsi2pk = STATUS#{status} AND gsi2sk BETWEEN ORDER#{created_at:13}#{order_id} AND ORDER#{created_at:13}#{order_id}
            customer_orders_by_status: pk = CUSTOMER#{customer_id} AND begins_with(lsi1sk, STATUS#)
            products_in_category: gsi2pk = CATEGORY#{category}
            get_cart: pk = CUSTOMER#{customer_id} AND sk = CART"#]]
        .assert_eq(&text.join("\n"));
    }

    #[test]
    fn reports_every_problem() {
        check_problems(
            Schema::builder(table())
                .entity(
                    Entity::new("A")
                        .attribute(Attribute::string("id"))
                        .attribute(Attribute::map("m"))
                        .attribute(Attribute::string("pk"))
                        .attribute(Attribute::number("n").default_value("x"))
                        .key("A#{id}", "A#{nope}")
                        .gsi("gsi9", "X", "Y")
                        .gsi("gsi1", "A#{m}", "B"),
                )
                .access_pattern(AccessPattern::query("p", "").entity("Z").index("gsi7")),
            expect![[r#"
                invalid schema (7 problems)
                - entity `A`: attribute `pk` is a key attribute of the table or an index; keys are computed from templates
                - entity `A`: attribute `n` has a default of type S but is declared N
                - entity `A`, index `table`: field `nope` is not a declared attribute
                - entity `A`, index `table`: field `id` is in the table key, so it must be required, defaulted or generated
                - entity `A`, index `gsi9`: the table has no such index
                - entity `A`, index `gsi1`: field `m` is of type M, which cannot be part of a key
                - access pattern `p`: index `gsi7` does not exist"#]],
        );
    }

    #[test]
    fn rejects_templates_that_could_forge_each_other() {
        let base = || {
            Schema::builder(table()).entity(
                Entity::new("Order")
                    .attribute(Attribute::string("c").required())
                    .attribute(Attribute::string("id").required())
                    .key("C#{c}", "ORDER#{id}"),
            )
        };
        // A field facing a literal: `id = "META"` would render `ORDER#META`.
        check_problems(
            base().entity(Entity::new("Meta").attribute(Attribute::string("c").required()).key("C#{c}", "ORDER#META")),
            expect![[r#"
                invalid schema (1 problem)
                - index `table`: keys of `Order` and `Meta` are ambiguous: sort templates `ORDER#{id}` and `ORDER#META` differ first at segment 2 where one has a field and the other a literal; use distinct literals"#]],
        );
        // The same shape: both entities would share keys.
        check_problems(
            base().entity(
                Entity::new("Other")
                    .attribute(Attribute::string("c").required())
                    .attribute(Attribute::string("x").required())
                    .key("C#{c}", "ORDER#{x}"),
            ),
            expect![[r#"
                invalid schema (1 problem)
                - index `table`: keys of `Order` and `Other` are ambiguous: keys `C#{c} / ORDER#{id}` and `C#{c} / ORDER#{x}` have the same shape; start the sort templates with distinct literals"#]],
        );
        // A hierarchy and distinct literals are fine.
        base()
            .entity(
                Entity::new("Line")
                    .attribute(Attribute::string("c").required())
                    .attribute(Attribute::string("id").required())
                    .attribute(Attribute::number("n").required())
                    .key("C#{c}", "ORDER#{id}#LINE#{n}"),
            )
            .entity(Entity::new("Profile").attribute(Attribute::string("c").required()).key("C#{c}", "PROFILE"))
            .build()
            .unwrap();
    }

    #[test]
    fn raw_number_keys_need_a_single_number_field() {
        let table = TableDefinition::new("t", KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::N));
        check_problems(
            Schema::builder(table.clone())
                .entity(Entity::new("E").attribute(Attribute::string("a").required()).key("E#{a}", "N#{a}")),
            expect![[r#"
                invalid schema (1 problem)
                - entity `E`, index `table`: key attribute `sk` is of type N, so its template must be one `{field}` of type N"#]],
        );
        let schema = Schema::builder(table)
            .entity(
                Entity::new("E")
                    .attribute(Attribute::string("a").required())
                    .attribute(Attribute::number("ts").required())
                    .key("E#{a}", "{ts}"),
            )
            .build()
            .unwrap();
        let item = store::item! { "a" => "x", "ts" => 42 };
        let keys = schema.entity("E").unwrap().index_keys(&item).unwrap().unwrap();
        assert_eq!(keys["sk"], AttributeValue::from(42));
    }

    #[test]
    fn sparse_index_keys_are_left_out() {
        let schema = sample::shop("shop");
        let product = schema.entity("Product").unwrap();
        let item = store::item! { "product_id" => "p1", "name" => "Pen", "price" => 2 };
        let keys = product.index_keys(&item).unwrap().unwrap();
        assert_eq!(keys.keys().collect::<Vec<_>>(), ["pk", "sk"]);
        let mut with_category = item.clone();
        with_category.insert("category".into(), "office".into());
        let keys = product.index_keys(&with_category).unwrap().unwrap();
        assert_eq!(keys["gsi2pk"], AttributeValue::from("CATEGORY#office"));
        assert_eq!(keys["gsi2sk"], AttributeValue::from("PRODUCT#p1"));
    }

    fn template() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let segment = prop_oneof![Just("A"), Just("B"), Just("AB"), Just("{x}"), Just("{y}")];
        proptest::collection::vec(segment, 1..4).prop_map(|s| s.join("#"))
    }

    proptest::proptest! {
        /// Whatever two sort templates the validator accepts side by side, no values make
        /// one entity's key equal the other's, or reach into the other's literal prefix
        /// unless its own template starts with that prefix (a hierarchy).
        #[test]
        fn accepted_templates_never_forge_each_other(
            t1 in template(),
            t2 in template(),
            v1 in ("[AB#%]{0,3}", "[AB#%]{0,3}"),
            v2 in ("[AB#%]{0,3}", "[AB#%]{0,3}"),
        ) {
            let entity = |name: &str, sk: &str| {
                Entity::new(name)
                    .attribute(Attribute::string("p").required())
                    .attribute(Attribute::string("x").required())
                    .attribute(Attribute::string("y").required())
                    .key("P#{p}", sk)
            };
            let table = TableDefinition::new("t", KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::S));
            let Ok(schema) = Schema::builder(table).entity(entity("E1", &t1)).entity(entity("E2", &t2)).build() else {
                return Ok(());
            };
            let render = |e: &str, (x, y): &(String, String)| {
                let item = store::item! { "p" => "p", "x" => x.as_str(), "y" => y.as_str() };
                let keys = schema.entity(e).unwrap().index_keys(&item).unwrap().unwrap();
                keys["sk"].as_s().unwrap().to_string()
            };
            let (k1, k2) = (render("E1", &v1), render("E2", &v2));
            proptest::prop_assert_ne!(&k1, &k2);
            let p1 = KeyTemplate::parse(&t1).unwrap().literal_prefix();
            let p2 = KeyTemplate::parse(&t2).unwrap().literal_prefix();
            // Queries only ever use prefixes that end at a separator, or whole keys.
            if p2.ends_with(crate::key::SEPARATOR) && k1.starts_with(&p2) {
                proptest::prop_assert!(p1.starts_with(&p2), "{} key {} is inside {}'s prefix {}", t1, k1, t2, p2);
            }
            if p1.ends_with(crate::key::SEPARATOR) && k2.starts_with(&p1) {
                proptest::prop_assert!(p2.starts_with(&p1), "{} key {} is inside {}'s prefix {}", t2, k2, t1, p1);
            }
        }
    }
}
