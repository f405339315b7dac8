//! Conversions between Tally's store types and the SDK's: attribute values (numbers stay exact
//! decimal strings both ways), items, consumed capacity, and table definitions.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    self as sdk, AttributeDefinition, BillingMode as SdkBilling, KeySchemaElement, KeyType, ProjectionType,
    ScalarAttributeType, StreamViewType,
};
use store::{
    AttributeValue, BillingMode, ConsumedCapacity, ExpressionAttributes, GlobalSecondaryIndex, Item, KeyAttribute,
    KeySchema, LocalSecondaryIndex, Number, Projection, ScalarType, StoreError, StreamView, TableDefinition,
    Throughput,
};

/// An SDK item.
pub(crate) type SdkItem = HashMap<String, sdk::AttributeValue>;

/// A store value as the SDK's.
pub(crate) fn value_to_sdk(value: &AttributeValue) -> sdk::AttributeValue {
    match value {
        AttributeValue::S(s) => sdk::AttributeValue::S(s.clone()),
        AttributeValue::N(n) => sdk::AttributeValue::N(n.to_string()),
        AttributeValue::B(b) => sdk::AttributeValue::B(Blob::new(b.clone())),
        AttributeValue::Bool(b) => sdk::AttributeValue::Bool(*b),
        AttributeValue::Null => sdk::AttributeValue::Null(true),
        AttributeValue::M(m) => sdk::AttributeValue::M(item_to_sdk(m)),
        AttributeValue::L(l) => sdk::AttributeValue::L(l.iter().map(value_to_sdk).collect()),
        AttributeValue::Ss(s) => sdk::AttributeValue::Ss(s.iter().cloned().collect()),
        AttributeValue::Ns(s) => sdk::AttributeValue::Ns(s.iter().map(Number::to_string).collect()),
        AttributeValue::Bs(s) => sdk::AttributeValue::Bs(s.iter().map(|b| Blob::new(b.clone())).collect()),
    }
}

/// An SDK value as a store value; fails on numbers that are not exact decimals and on types
/// this SDK version does not know.
pub(crate) fn value_from_sdk(value: &sdk::AttributeValue) -> Result<AttributeValue, StoreError> {
    Ok(match value {
        sdk::AttributeValue::S(s) => AttributeValue::S(s.clone()),
        sdk::AttributeValue::N(n) => AttributeValue::N(number(n)?),
        sdk::AttributeValue::B(b) => AttributeValue::B(b.as_ref().to_vec()),
        sdk::AttributeValue::Bool(b) => AttributeValue::Bool(*b),
        sdk::AttributeValue::Null(_) => AttributeValue::Null,
        sdk::AttributeValue::M(m) => AttributeValue::M(item_from_sdk(m)?),
        sdk::AttributeValue::L(l) => AttributeValue::L(l.iter().map(value_from_sdk).collect::<Result<_, _>>()?),
        sdk::AttributeValue::Ss(s) => AttributeValue::Ss(s.iter().cloned().collect()),
        sdk::AttributeValue::Ns(s) => AttributeValue::Ns(s.iter().map(|n| number(n)).collect::<Result<_, _>>()?),
        sdk::AttributeValue::Bs(s) => AttributeValue::Bs(s.iter().map(|b| b.as_ref().to_vec()).collect()),
        other => return Err(StoreError::Internal(format!("DynamoDB returned a value of an unknown type: {other:?}"))),
    })
}

fn number(text: &str) -> Result<Number, StoreError> {
    text.parse()
        .map_err(|e| StoreError::Internal(format!("DynamoDB returned the number {text:?}, which is not exact: {e}")))
}

/// A store item (or key) as the SDK's.
pub(crate) fn item_to_sdk(item: &BTreeMap<String, AttributeValue>) -> SdkItem {
    item.iter().map(|(k, v)| (k.clone(), value_to_sdk(v))).collect()
}

/// An SDK item as a store item.
pub(crate) fn item_from_sdk(item: &SdkItem) -> Result<Item, StoreError> {
    item.iter().map(|(k, v)| Ok((k.clone(), value_from_sdk(v)?))).collect()
}

/// An optional SDK item (absent stays absent).
pub(crate) fn opt_item(item: Option<&SdkItem>) -> Result<Option<Item>, StoreError> {
    item.map(item_from_sdk).transpose()
}

/// A list of SDK items.
pub(crate) fn items(items: &[SdkItem]) -> Result<Vec<Item>, StoreError> {
    items.iter().map(item_from_sdk).collect()
}

/// Expression attribute names, or `None` when there are none (DynamoDB rejects an empty map).
pub(crate) fn names(attrs: &ExpressionAttributes) -> Option<HashMap<String, String>> {
    (!attrs.names.is_empty()).then(|| attrs.names.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// Expression attribute values, or `None` when there are none (DynamoDB rejects an empty map).
pub(crate) fn values(attrs: &ExpressionAttributes) -> Option<SdkItem> {
    (!attrs.values.is_empty()).then(|| item_to_sdk(&attrs.values))
}

/// Which units a call consumes: reads (get, query, scan, batch get, transact get) or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Units {
    /// Read capacity units only.
    Read,
    /// Write capacity units only.
    Write,
}

/// DynamoDB's consumed capacity as Tally's. `table` names the table when DynamoDB returned
/// nothing (a server that does not report capacity): then every figure is zero.
///
/// `CapacityUnits` is the sum of read and write units. Some servers report only the sum; each
/// call consumes units of one kind only (`units`), so the sum is then that kind's figure.
pub(crate) fn capacity(c: Option<&sdk::ConsumedCapacity>, table: &str, units: Units) -> ConsumedCapacity {
    let Some(c) = c else {
        return ConsumedCapacity { table: table.to_string(), ..Default::default() };
    };
    let per_index = |m: Option<&HashMap<String, sdk::Capacity>>| -> BTreeMap<String, f64> {
        m.map(|m| m.iter().map(|(k, v)| (k.clone(), v.capacity_units().unwrap_or(0.0))).collect()).unwrap_or_default()
    };
    let total = c.capacity_units().unwrap_or(0.0);
    let (read, write) = match (c.read_capacity_units(), c.write_capacity_units(), units) {
        (None, None, Units::Read) => (total, 0.0),
        (None, None, Units::Write) => (0.0, total),
        (r, w, _) => (r.unwrap_or(0.0), w.unwrap_or(0.0)),
    };
    ConsumedCapacity {
        table: c.table_name().unwrap_or(table).to_string(),
        capacity_units: total,
        read_capacity_units: read,
        write_capacity_units: write,
        table_units: c.table().and_then(|t| t.capacity_units()).unwrap_or(0.0),
        global_indexes: per_index(c.global_secondary_indexes()),
        local_indexes: per_index(c.local_secondary_indexes()),
    }
}

/// Capacities of a multi-table call.
pub(crate) fn capacities(c: &[sdk::ConsumedCapacity], units: Units) -> Vec<ConsumedCapacity> {
    c.iter().map(|c| capacity(Some(c), "", units)).collect()
}

fn scalar_to_sdk(ty: ScalarType) -> ScalarAttributeType {
    match ty {
        ScalarType::S => ScalarAttributeType::S,
        ScalarType::N => ScalarAttributeType::N,
        ScalarType::B => ScalarAttributeType::B,
    }
}

fn scalar_from_sdk(ty: &ScalarAttributeType) -> Result<ScalarType, StoreError> {
    match ty {
        ScalarAttributeType::S => Ok(ScalarType::S),
        ScalarAttributeType::N => Ok(ScalarType::N),
        ScalarAttributeType::B => Ok(ScalarType::B),
        other => Err(StoreError::Internal(format!("DynamoDB returned an unknown key type {other:?}"))),
    }
}

fn build_err(e: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::Validation(e.to_string())
}

pub(crate) fn key_schema_to_sdk(schema: &KeySchema) -> Result<Vec<KeySchemaElement>, StoreError> {
    let mut out = vec![
        KeySchemaElement::builder()
            .attribute_name(&schema.partition.name)
            .key_type(KeyType::Hash)
            .build()
            .map_err(build_err)?,
    ];
    if let Some(sort) = &schema.sort {
        out.push(
            KeySchemaElement::builder()
                .attribute_name(&sort.name)
                .key_type(KeyType::Range)
                .build()
                .map_err(build_err)?,
        );
    }
    Ok(out)
}

fn projection_to_sdk(p: &Projection) -> sdk::Projection {
    match p {
        Projection::All => sdk::Projection::builder().projection_type(ProjectionType::All).build(),
        Projection::KeysOnly => sdk::Projection::builder().projection_type(ProjectionType::KeysOnly).build(),
        Projection::Include(attrs) => sdk::Projection::builder()
            .projection_type(ProjectionType::Include)
            .set_non_key_attributes(Some(attrs.clone()))
            .build(),
    }
}

fn projection_from_sdk(p: Option<&sdk::Projection>) -> Projection {
    match p.and_then(|p| p.projection_type()) {
        Some(ProjectionType::KeysOnly) => Projection::KeysOnly,
        Some(ProjectionType::Include) => {
            Projection::Include(p.map(|p| p.non_key_attributes().to_vec()).unwrap_or_default())
        }
        _ => Projection::All,
    }
}

fn throughput_to_sdk(t: Throughput) -> Result<sdk::ProvisionedThroughput, StoreError> {
    let units = |v: u64| i64::try_from(v).map_err(|_| StoreError::validation("provisioned throughput is too large"));
    sdk::ProvisionedThroughput::builder()
        .read_capacity_units(units(t.read)?)
        .write_capacity_units(units(t.write)?)
        .build()
        .map_err(build_err)
}

/// The `CreateTable` pieces of a definition (the caller sets the table name).
pub(crate) struct CreateParts {
    pub attribute_definitions: Vec<AttributeDefinition>,
    pub key_schema: Vec<KeySchemaElement>,
    pub global: Option<Vec<sdk::GlobalSecondaryIndex>>,
    pub local: Option<Vec<sdk::LocalSecondaryIndex>>,
    pub billing: SdkBilling,
    pub throughput: Option<sdk::ProvisionedThroughput>,
    pub stream: Option<sdk::StreamSpecification>,
}

/// Splits a definition into `CreateTable` parameters. Provisioned tables give each GSI the
/// table's throughput, as [`BillingMode::Provisioned`] documents.
pub(crate) fn create_parts(def: &TableDefinition) -> Result<CreateParts, StoreError> {
    let attribute_definitions = def
        .key_attributes()
        .iter()
        .map(|a| {
            AttributeDefinition::builder()
                .attribute_name(&a.name)
                .attribute_type(scalar_to_sdk(a.ty))
                .build()
                .map_err(build_err)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let throughput = match def.billing {
        BillingMode::PayPerRequest => None,
        BillingMode::Provisioned(t) => Some(throughput_to_sdk(t)?),
    };
    let global = def
        .global_indexes
        .iter()
        .map(|g| {
            sdk::GlobalSecondaryIndex::builder()
                .index_name(&g.name)
                .set_key_schema(Some(key_schema_to_sdk(&g.key_schema)?))
                .projection(projection_to_sdk(&g.projection))
                .set_provisioned_throughput(throughput.clone())
                .build()
                .map_err(build_err)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let local = def
        .local_indexes
        .iter()
        .map(|l| {
            let schema = KeySchema { partition: def.key_schema.partition.clone(), sort: Some(l.sort.clone()) };
            sdk::LocalSecondaryIndex::builder()
                .index_name(&l.name)
                .set_key_schema(Some(key_schema_to_sdk(&schema)?))
                .projection(projection_to_sdk(&l.projection))
                .build()
                .map_err(build_err)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let stream = def.stream.map(|view| {
        sdk::StreamSpecification::builder()
            .stream_enabled(true)
            .stream_view_type(match view {
                StreamView::KeysOnly => StreamViewType::KeysOnly,
                StreamView::NewImage => StreamViewType::NewImage,
                StreamView::OldImage => StreamViewType::OldImage,
                StreamView::NewAndOldImages => StreamViewType::NewAndOldImages,
            })
            .build()
    });
    let stream = stream.transpose().map_err(build_err)?;
    Ok(CreateParts {
        attribute_definitions,
        key_schema: key_schema_to_sdk(&def.key_schema)?,
        global: (!global.is_empty()).then_some(global),
        local: (!local.is_empty()).then_some(local),
        billing: if throughput.is_some() { SdkBilling::Provisioned } else { SdkBilling::PayPerRequest },
        throughput,
        stream,
    })
}

/// Rebuilds a definition from `DescribeTable`'s answer (TTL and point-in-time recovery come
/// from their own calls and are filled in by the caller).
pub(crate) fn definition_from_sdk(t: &sdk::TableDescription) -> Result<TableDefinition, StoreError> {
    let types: HashMap<&str, &ScalarAttributeType> =
        t.attribute_definitions().iter().map(|a| (a.attribute_name(), a.attribute_type())).collect();
    let key_attr = |name: &str| -> Result<KeyAttribute, StoreError> {
        let ty = types
            .get(name)
            .ok_or_else(|| StoreError::Internal(format!("DynamoDB described key attribute {name} without a type")))?;
        Ok(KeyAttribute::new(name, scalar_from_sdk(ty)?))
    };
    let schema = |elements: &[KeySchemaElement]| -> Result<KeySchema, StoreError> {
        let hash = elements
            .iter()
            .find(|e| *e.key_type() == KeyType::Hash)
            .ok_or_else(|| StoreError::Internal("DynamoDB described a key schema without a partition key".into()))?;
        let range = elements.iter().find(|e| *e.key_type() == KeyType::Range);
        Ok(KeySchema {
            partition: key_attr(hash.attribute_name())?,
            sort: range.map(|r| key_attr(r.attribute_name())).transpose()?,
        })
    };
    let name = t.table_name().unwrap_or_default().to_string();
    let mut def = TableDefinition::new(name, schema(t.key_schema())?);
    for g in t.global_secondary_indexes() {
        def.global_indexes.push(GlobalSecondaryIndex {
            name: g.index_name().unwrap_or_default().to_string(),
            key_schema: schema(g.key_schema())?,
            projection: projection_from_sdk(g.projection()),
        });
    }
    for l in t.local_secondary_indexes() {
        let ks = schema(l.key_schema())?;
        let sort =
            ks.sort.ok_or_else(|| StoreError::Internal("DynamoDB described an LSI without a sort key".into()))?;
        def.local_indexes.push(LocalSecondaryIndex {
            name: l.index_name().unwrap_or_default().to_string(),
            sort,
            projection: projection_from_sdk(l.projection()),
        });
    }
    let on_demand = t.billing_mode_summary().and_then(|b| b.billing_mode()) == Some(&SdkBilling::PayPerRequest);
    let provisioned = t
        .provisioned_throughput()
        .map(|p| Throughput {
            read: p.read_capacity_units().unwrap_or(0).max(0) as u64,
            write: p.write_capacity_units().unwrap_or(0).max(0) as u64,
        })
        .filter(|p| p.read > 0 || p.write > 0);
    def.billing = match provisioned {
        Some(p) if !on_demand => BillingMode::Provisioned(p),
        _ => BillingMode::PayPerRequest,
    };
    def.stream = t.stream_specification().filter(|s| s.stream_enabled()).and_then(|s| {
        Some(match s.stream_view_type()? {
            StreamViewType::KeysOnly => StreamView::KeysOnly,
            StreamViewType::NewImage => StreamView::NewImage,
            StreamViewType::OldImage => StreamView::OldImage,
            _ => StreamView::NewAndOldImages,
        })
    });
    Ok(def)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn number() -> impl Strategy<Value = Number> {
        // Up to 38 significant digits, exponents across DynamoDB's range.
        (any::<bool>(), "[1-9][0-9]{0,37}", -120i32..=120).prop_filter_map("in range", |(neg, digits, exp)| {
            let text = format!("{}{digits}E{exp}", if neg { "-" } else { "" });
            text.parse::<Number>().ok()
        })
    }

    fn value() -> impl Strategy<Value = AttributeValue> {
        let leaf = prop_oneof![
            ".{0,8}".prop_map(AttributeValue::S),
            number().prop_map(AttributeValue::N),
            proptest::collection::vec(any::<u8>(), 0..8).prop_map(AttributeValue::B),
            any::<bool>().prop_map(AttributeValue::Bool),
            Just(AttributeValue::Null),
            proptest::collection::btree_set(".{0,4}", 1..4).prop_map(AttributeValue::Ss),
            proptest::collection::btree_set(number(), 1..4).prop_map(AttributeValue::Ns),
            proptest::collection::btree_set(proptest::collection::vec(any::<u8>(), 0..4), 1..4)
                .prop_map(AttributeValue::Bs),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(AttributeValue::L),
                proptest::collection::btree_map("[a-z#]{1,4}", inner, 0..4).prop_map(AttributeValue::M),
            ]
        })
    }

    proptest! {
        #[test]
        fn values_round_trip_exactly(v in value()) {
            let back = value_from_sdk(&value_to_sdk(&v)).unwrap();
            prop_assert_eq!(back, v);
        }
    }

    #[test]
    fn numbers_travel_as_exact_decimal_text() {
        let big = "12345678901234567890123456789012345678";
        let v = AttributeValue::N(big.parse().unwrap());
        assert_eq!(value_to_sdk(&v), sdk::AttributeValue::N(big.to_string()));
        let tiny = value_from_sdk(&sdk::AttributeValue::N("0.000000000000000000000000000000000000001".into())).unwrap();
        assert_eq!(tiny, AttributeValue::N("1E-39".parse().unwrap()));
        assert!(value_from_sdk(&sdk::AttributeValue::N("not a number".into())).is_err());
    }

    #[test]
    fn a_capacity_sum_alone_is_attributed_to_the_call_kind() {
        let sum_only = sdk::ConsumedCapacity::builder().table_name("t").capacity_units(2.0).build();
        let read = capacity(Some(&sum_only), "t", Units::Read);
        assert_eq!((read.read_capacity_units, read.write_capacity_units), (2.0, 0.0));
        let write = capacity(Some(&sum_only), "t", Units::Write);
        assert_eq!((write.read_capacity_units, write.write_capacity_units), (0.0, 2.0));
        let split = sdk::ConsumedCapacity::builder()
            .capacity_units(3.0)
            .read_capacity_units(1.0)
            .write_capacity_units(2.0)
            .build();
        let c = capacity(Some(&split), "t", Units::Read);
        assert_eq!((c.table.as_str(), c.read_capacity_units, c.write_capacity_units), ("t", 1.0, 2.0));
        assert_eq!(capacity(None, "t", Units::Read), ConsumedCapacity { table: "t".into(), ..Default::default() });
    }

    #[test]
    fn empty_sets_are_sent_for_dynamodb_to_reject() {
        assert_eq!(value_to_sdk(&AttributeValue::Ss(BTreeSet::new())), sdk::AttributeValue::Ss(vec![]));
    }

    #[test]
    fn definitions_round_trip_through_create_and_describe() {
        let def = TableDefinition::new("t", KeySchema::composite("pk", ScalarType::S, "sk", ScalarType::N))
            .gsi("gsi1", KeySchema::composite("g", ScalarType::B, "sk", ScalarType::N), Projection::KeysOnly)
            .gsi("gsi2", KeySchema::hash("h", ScalarType::S), Projection::Include(vec!["a".into(), "b".into()]))
            .lsi("lsi1", KeyAttribute::new("l", ScalarType::S), Projection::All);
        let mut def = def;
        def.billing = BillingMode::Provisioned(Throughput { read: 5, write: 7 });
        def.stream = Some(StreamView::NewAndOldImages);
        let parts = create_parts(&def).unwrap();
        assert_eq!(parts.attribute_definitions.len(), 5);
        let gsis = parts.global.clone().unwrap();
        assert_eq!(gsis[0].provisioned_throughput().map(|p| p.read_capacity_units()), Some(5));
        let described = sdk::TableDescription::builder()
            .table_name("t")
            .set_attribute_definitions(Some(parts.attribute_definitions))
            .set_key_schema(Some(parts.key_schema))
            .set_global_secondary_indexes(Some(
                gsis.into_iter()
                    .map(|g| {
                        sdk::GlobalSecondaryIndexDescription::builder()
                            .index_name(g.index_name())
                            .set_key_schema(Some(g.key_schema().to_vec()))
                            .set_projection(g.projection().cloned())
                            .build()
                    })
                    .collect(),
            ))
            .set_local_secondary_indexes(Some(
                parts
                    .local
                    .unwrap()
                    .into_iter()
                    .map(|l| {
                        sdk::LocalSecondaryIndexDescription::builder()
                            .index_name(l.index_name())
                            .set_key_schema(Some(l.key_schema().to_vec()))
                            .set_projection(l.projection().cloned())
                            .build()
                    })
                    .collect(),
            ))
            .provisioned_throughput(
                sdk::ProvisionedThroughputDescription::builder().read_capacity_units(5).write_capacity_units(7).build(),
            )
            .set_stream_specification(parts.stream)
            .build();
        assert_eq!(definition_from_sdk(&described).unwrap(), def);
    }
}
