//! Tally's DynamoDB engine: the [`store::Store`] trait on Amazon DynamoDB or any
//! DynamoDB-compatible endpoint (DynamoDB Local, dynalite, moto, LocalStack, ScyllaDB Alternator).
//!
//! Region, credentials and endpoint come from the standard AWS configuration chain (environment,
//! profiles, web identity, container and instance metadata), overridden by explicit [`Options`],
//! usually parsed from a `--store` URL:
//!
//! ```no_run
//! use std::sync::Arc;
//! use store::{GetItem, Store, item};
//! use store_dynamodb::{DynamoDbStore, StoreUrl};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let url = StoreUrl::parse("dynamodb://tally?region=us-east-1&endpoint=http://127.0.0.1:8000")?;
//! let store: Arc<dyn Store> = Arc::new(DynamoDbStore::connect(url.options).await?);
//! let got = store.get_item(GetItem::new(&url.table, item! { "pk" => "SITE#1", "sk" => "META" })).await?;
//! println!("{:?} ({} read units)", got.item, got.consumed_capacity.capacity_units);
//! # Ok(())
//! # }
//! ```
//!
//! Every call asks for `ReturnConsumedCapacity=INDEXES` and passes DynamoDB's figures through.
//! Errors map to the same [`store::StoreError`] kinds as the embedded engine. The SDK retries
//! throttling, `InternalServerError`, other 5xx answers, dropped connections and timeouts with
//! jittered exponential backoff, a bounded number of times and within a bounded time
//! ([`Options::max_attempts`], [`Options::attempt_timeout`], [`Options::operation_timeout`]).
//! Retries also draw on a quota (the SDK's token bucket: a retry costs 5 units of 500, a retried
//! timeout 10, a success gives 1 back), so that a failing server is not hammered: once it is
//! spent, calls fail on their first error until successes refill it. Each store has a quota of
//! its own, not one shared by every client in the process.
//! `create_table` returns once the table and its indexes are active (and TTL and point-in-time
//! recovery are switched on, where the server supports them); `delete_table` returns once the
//! table is gone, so that its name is free again, as with the embedded engine.
//! `batch_get_item` and `batch_write_item` return unprocessed items exactly as DynamoDB does;
//! [`DynamoDbStore::batch_write_all`] and [`DynamoDbStore::batch_get_all`] resend them until done
//! or a deadline passes.
//!
//! # No double counting on retry
//!
//! An `UpdateItem` with `ADD views :one` that times out may have been applied; retrying it
//! (as the SDK does after a timeout) can count twice. Counters that must be exact therefore go
//! through `TransactWriteItems` with a `ClientRequestToken`
//! ([`store::TransactWriteItems::client_request_token`]): DynamoDB applies a transaction with a
//! given token at most once within ten minutes ([`store::limits::IDEMPOTENCY_WINDOW_SECS`]); a
//! repeat returns success without writing again. This engine passes the token through as given.
//! The SDK's own retries resend the same serialized request, token included (the token is fixed
//! in the input before the retry loop, and the SDK fills in a random one when none is given), so a
//! retried transaction is applied once. A caller that retries after an error (say, a lost
//! connection after the last attempt) must reuse the same token — derived, for instance, from
//! the flush it is writing — and must retry within ten minutes.
//!
//! Where one conditional write per item will do, [`store::counter::CounterFlush`] is the
//! cheaper way, and it works on every engine and emulator: the deltas travel with a per-flush
//! marker under the condition that the item's marker is lower, so a repeat (by the SDK or the
//! caller, minutes or days later) fails its condition and is reported as already applied. The
//! fault test (`tests/it/faults.rs`) drives counters that way through a proxy that drops
//! answers after forwarding, and checks that every total is exact.
//!
//! # What this crate is not
//!
//! It does not chunk batches, follow query pages or model entities: the `model` crate does that
//! above the [`store::Store`] trait, for every engine. It does not validate requests itself:
//! DynamoDB's own validation and messages are passed through.
//!
//! # Dependencies
//!
//! `aws-sdk-dynamodb` and `aws-config` are the AWS SDK for Rust (the wire protocol, signing,
//! retries, the configuration chain), with default features off; `aws-smithy-http-client`
//! supplies the HTTP client with rustls on *ring*, which avoids OpenSSL and the C build of
//! aws-lc while still reaching AWS over HTTPS (trusting the platform's root certificates). `tokio` for timers, `async-trait` for the
//! `Store` trait, `thiserror` for the URL error, `tracing` for the few warnings.

#![deny(missing_docs)]

mod batch;
mod convert;
mod error;
mod url;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use store::sync::lock;

use async_trait::async_trait;
use aws_config::BehaviorVersion;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::{RetryConfig, RetryPartition, TokenBucket};
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::config::{Credentials, Region};
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    self as sdk, ReturnConsumedCapacity, ReturnValue, ReturnValuesOnConditionCheckFailure, TimeToLiveStatus,
};
use store::{
    BatchGetItem, BatchGetItemOutput, BatchWriteItem, BatchWriteItemOutput, DeleteItem, GetItem, GetItemOutput, Item,
    KeysAndAttributes, PutItem, Query, QueryOutput, ReturnValues, Scan, Select, Store, StoreError, TableDefinition,
    TableDescription, TableStatus, TransactGetItems, TransactGetItemsOutput, TransactWrite, TransactWriteItems,
    TransactWriteItemsOutput, UpdateItem, WriteOutput, WriteRequest,
};

pub use url::{StoreUrl, UrlError};

use convert::{Units, capacities, capacity, item_to_sdk, names, opt_item, values};
use error::{condition_failed, map_sdk_error, transaction_canceled};

/// How to reach DynamoDB. Unset fields come from the standard AWS configuration chain.
///
/// Its `Debug` output never shows the secret key.
#[derive(Clone, PartialEq)]
pub struct Options {
    /// AWS region (`us-east-1`, …); otherwise `AWS_REGION` or the profile's.
    pub region: Option<String>,
    /// Endpoint URL, for DynamoDB Local, emulators or a VPC endpoint; otherwise AWS's.
    pub endpoint: Option<String>,
    /// Named profile of `~/.aws/config`; otherwise `AWS_PROFILE` or `default`.
    pub profile: Option<String>,
    /// Static credentials (for emulators, which accept any); otherwise the credential chain.
    pub static_credentials: Option<(String, String)>,
    /// Attempts per call, the first included (retries use jittered exponential backoff).
    pub max_attempts: u32,
    /// First retry delay; doubles each retry (with full jitter) up to [`Options::max_backoff`].
    pub initial_backoff: Duration,
    /// Longest retry delay.
    pub max_backoff: Duration,
    /// Time to open a connection.
    pub connect_timeout: Duration,
    /// Time for one attempt, from sending to the end of the answer.
    pub attempt_timeout: Duration,
    /// Time for a call, every attempt and backoff included.
    pub operation_timeout: Duration,
    /// How long `create_table` and `delete_table` wait for the table to become active or gone.
    pub table_wait: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            region: None,
            endpoint: None,
            profile: None,
            static_credentials: None,
            max_attempts: 8,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            attempt_timeout: Duration::from_secs(30),
            operation_timeout: Duration::from_secs(120),
            table_wait: Duration::from_secs(600),
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("profile", &self.profile)
            .field("static_credentials", &self.static_credentials.as_ref().map(|(id, _)| (id, "(secret)")))
            .field("max_attempts", &self.max_attempts)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("connect_timeout", &self.connect_timeout)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("operation_timeout", &self.operation_timeout)
            .field("table_wait", &self.table_wait)
            .finish()
    }
}

impl Options {
    /// Options for a local emulator at `endpoint`: region `us-east-1` and fake static credentials.
    pub fn emulator(endpoint: impl Into<String>) -> Self {
        Options {
            region: Some("us-east-1".into()),
            endpoint: Some(endpoint.into()),
            static_credentials: Some(("tally-test".into(), "tally-test-secret".into())),
            ..Options::default()
        }
    }
}

/// The attributes a write returned. An empty map is no attributes: DynamoDB omits `Attributes`
/// when there is nothing to return (an `UPDATED_OLD` of attributes that did not exist), while
/// dynalite answers `{}`; the embedded engine answers `None`, and so does this engine.
fn returned(
    attributes: Option<&std::collections::HashMap<String, sdk::AttributeValue>>,
) -> Result<Option<Item>, StoreError> {
    Ok(opt_item(attributes)?.filter(|a| !a.is_empty()))
}

/// The DynamoDB engine: a [`Store`] over one SDK client. Cheap to clone; share it with `Arc`.
#[derive(Clone, Debug)]
pub struct DynamoDbStore {
    client: Client,
    table_wait: Duration,
    /// Tables whose TTL could not be enabled because the server lacks `UpdateTimeToLive`.
    ttl_unsupported: Arc<Mutex<BTreeSet<String>>>,
}

impl DynamoDbStore {
    /// Loads the AWS configuration chain, applies `options` and builds a client.
    ///
    /// Fails with [`StoreError::Validation`] when no region is configured anywhere. No request
    /// is sent: a wrong endpoint or credentials show up on the first call.
    pub async fn connect(options: Options) -> Result<Self, StoreError> {
        use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
        let http =
            aws_smithy_http_client::Builder::new().tls_provider(Provider::Rustls(CryptoMode::Ring)).build_https();
        let retry = RetryConfig::standard()
            .with_max_attempts(options.max_attempts.max(1))
            .with_initial_backoff(options.initial_backoff)
            .with_max_backoff(options.max_backoff);
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(options.connect_timeout)
            .operation_attempt_timeout(options.attempt_timeout)
            .operation_timeout(options.operation_timeout)
            .build();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http)
            .retry_config(retry)
            .timeout_config(timeouts);
        if let Some(region) = &options.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(endpoint) = &options.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        if let Some(profile) = &options.profile {
            loader = loader.profile_name(profile);
        }
        if let Some((id, secret)) = &options.static_credentials {
            loader = loader.credentials_provider(Credentials::new(id, secret, None, None, "tally-static"));
        }
        let config = loader.load().await;
        if config.region().is_none() {
            return Err(StoreError::validation(
                "no AWS region: set AWS_REGION, a profile region, or region= in the store URL",
            ));
        }
        // A retry quota of this store's own. The SDK's default token bucket is shared by every
        // client of the process with the same partition (service and region): one store's run
        // of failures would switch off retries for all the others (the fault test did exactly
        // that to the retry tests running beside it).
        let partition = RetryPartition::custom("tally-dynamodb-store").token_bucket(TokenBucket::default()).build();
        let config = aws_sdk_dynamodb::config::Builder::from(&config).retry_partition(partition).build();
        Ok(Self::from_client(Client::from_conf(config), options.table_wait))
    }

    /// Wraps an SDK client configured elsewhere (its retry and timeout settings are kept).
    pub fn from_client(client: Client, table_wait: Duration) -> Self {
        DynamoDbStore { client, table_wait, ttl_unsupported: Arc::default() }
    }

    /// The SDK client, for operations the [`Store`] trait does not cover.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Whether `create_table` found the server unable to enable TTL on `table` (emulators
    /// such as dynalite lack `UpdateTimeToLive`); such a table keeps expired items.
    pub fn ttl_unsupported(&self, table: &str) -> bool {
        lock(&self.ttl_unsupported).contains(table)
    }

    /// Polls `DescribeTable` until the table and its indexes are active, within the table wait.
    async fn wait_active(&self, name: &str) -> Result<sdk::TableDescription, StoreError> {
        let deadline = Instant::now() + self.table_wait;
        let mut delay = Duration::from_millis(20);
        loop {
            let described =
                self.client.describe_table().table_name(name).send().await.map_err(|e| map_sdk_error(e, |_| None));
            let table = match described {
                Ok(out) => out.table,
                // A table just created may not be visible to DescribeTable yet.
                Err(StoreError::ResourceNotFound(_)) => None,
                Err(e) => return Err(e),
            };
            if let Some(t) = table {
                let active = t.table_status() == Some(&sdk::TableStatus::Active)
                    && t.global_secondary_indexes()
                        .iter()
                        .all(|g| g.index_status().is_none_or(|s| *s == sdk::IndexStatus::Active));
                if active {
                    return Ok(t);
                }
            }
            if Instant::now() >= deadline {
                return Err(StoreError::Internal(format!("table {name} is not active after {:?}", self.table_wait)));
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }

    /// Polls until `DescribeTable` says the table is gone, within the table wait.
    async fn wait_gone(&self, name: &str) -> Result<(), StoreError> {
        let deadline = Instant::now() + self.table_wait;
        let mut delay = Duration::from_millis(20);
        loop {
            match self.client.describe_table().table_name(name).send().await.map_err(|e| map_sdk_error(e, |_| None)) {
                Err(StoreError::ResourceNotFound(_)) => return Ok(()),
                Err(e) => return Err(e),
                Ok(_) if Instant::now() >= deadline => {
                    return Err(StoreError::Internal(format!("table {name} still exists after {:?}", self.table_wait)));
                }
                Ok(_) => {}
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
    }

    /// Enables TTL; a server without TTL support is recorded rather than failing the creation.
    async fn enable_ttl(&self, table: &str, attribute: &str) -> Result<(), StoreError> {
        let spec = sdk::TimeToLiveSpecification::builder()
            .enabled(true)
            .attribute_name(attribute)
            .build()
            .map_err(|e| StoreError::Validation(e.to_string()))?;
        match self.client.update_time_to_live().table_name(table).time_to_live_specification(spec).send().await {
            Ok(_) => Ok(()),
            Err(e) if is_unsupported(e.code()) => {
                tracing::warn!(table, "the DynamoDB server does not support TTL; expired items will stay");
                lock(&self.ttl_unsupported).insert(table.to_string());
                Ok(())
            }
            Err(e) => Err(map_sdk_error(e, |_| None)),
        }
    }

    /// The TTL attribute of a table, `None` when disabled or when the server lacks TTL.
    async fn ttl_attribute(&self, table: &str) -> Result<Option<String>, StoreError> {
        match self.client.describe_time_to_live().table_name(table).send().await {
            Ok(out) => Ok(out.time_to_live_description().and_then(|d| {
                let on =
                    matches!(d.time_to_live_status(), Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling));
                if on { d.attribute_name().map(str::to_string) } else { None }
            })),
            Err(e) if is_unsupported(e.code()) => Ok(None),
            Err(e) => Err(map_sdk_error(e, |_| None)),
        }
    }

    /// Whether point-in-time recovery is on; `false` when the server lacks backups.
    async fn pitr(&self, table: &str) -> Result<bool, StoreError> {
        match self.client.describe_continuous_backups().table_name(table).send().await {
            Ok(out) => Ok(out
                .continuous_backups_description()
                .and_then(|d| d.point_in_time_recovery_description())
                .and_then(|p| p.point_in_time_recovery_status())
                == Some(&sdk::PointInTimeRecoveryStatus::Enabled)),
            Err(e) if is_unsupported(e.code()) => Ok(false),
            Err(e) => Err(map_sdk_error(e, |_| None)),
        }
    }

    async fn describe(&self, t: &sdk::TableDescription) -> Result<TableDescription, StoreError> {
        let mut definition = convert::definition_from_sdk(t)?;
        definition.ttl_attribute = self.ttl_attribute(&definition.name).await?;
        definition.point_in_time_recovery = self.pitr(&definition.name).await?;
        Ok(description(definition, t))
    }
}

/// Whether an error code means "this server does not implement the operation".
pub(crate) fn is_unsupported(code: Option<&str>) -> bool {
    matches!(code, Some("UnknownOperationException" | "UnsupportedOperation" | "NotImplemented" | "InvalidAction"))
}

fn description(definition: TableDefinition, t: &sdk::TableDescription) -> TableDescription {
    let status = match t.table_status() {
        Some(sdk::TableStatus::Creating) => TableStatus::Creating,
        Some(sdk::TableStatus::Deleting) => TableStatus::Deleting,
        Some(sdk::TableStatus::Active) | None => TableStatus::Active,
        // Archiving, inaccessible and future states: not usable now, like a table being updated.
        Some(_) => TableStatus::Updating,
    };
    TableDescription {
        definition,
        status,
        item_count: t.item_count().unwrap_or(0).max(0) as u64,
        size_bytes: t.table_size_bytes().unwrap_or(0).max(0) as u64,
    }
}

fn return_value(rv: ReturnValues) -> ReturnValue {
    match rv {
        ReturnValues::None => ReturnValue::None,
        ReturnValues::AllOld => ReturnValue::AllOld,
        ReturnValues::UpdatedOld => ReturnValue::UpdatedOld,
        ReturnValues::AllNew => ReturnValue::AllNew,
        ReturnValues::UpdatedNew => ReturnValue::UpdatedNew,
    }
}

fn on_failure(all_old: bool) -> Option<ReturnValuesOnConditionCheckFailure> {
    all_old.then_some(ReturnValuesOnConditionCheckFailure::AllOld)
}

fn limit(limit: Option<u32>) -> Result<Option<i32>, StoreError> {
    limit
        .map(|l| i32::try_from(l).map_err(|_| StoreError::validation(format!("Limit {l} is out of range"))))
        .transpose()
}

fn select(select: Select) -> Option<sdk::Select> {
    // All attributes is DynamoDB's default (all projected ones on an index); saying it
    // explicitly would be rejected for a projection or a keys-only index.
    match select {
        Select::AllAttributes => None,
        Select::Count => Some(sdk::Select::Count),
    }
}

fn build(e: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::Validation(e.to_string())
}

fn keys_and_attributes(k: &KeysAndAttributes) -> Result<sdk::KeysAndAttributes, StoreError> {
    sdk::KeysAndAttributes::builder()
        .set_keys(Some(k.keys.iter().map(item_to_sdk).collect()))
        .set_projection_expression(k.projection.clone())
        .set_expression_attribute_names(names(&k.attrs))
        .set_consistent_read(k.consistent_read.then_some(true))
        .build()
        .map_err(build)
}

fn keys_and_attributes_back(k: &sdk::KeysAndAttributes) -> Result<KeysAndAttributes, StoreError> {
    Ok(KeysAndAttributes {
        keys: convert::items(k.keys())?,
        projection: k.projection_expression().map(str::to_string),
        attrs: store::ExpressionAttributes {
            names: k.expression_attribute_names().map(|m| m.clone().into_iter().collect()).unwrap_or_default(),
            values: BTreeMap::new(),
        },
        consistent_read: k.consistent_read().unwrap_or(false),
    })
}

fn write_request(w: &WriteRequest) -> Result<sdk::WriteRequest, StoreError> {
    Ok(match w {
        WriteRequest::Put(item) => sdk::WriteRequest::builder()
            .put_request(sdk::PutRequest::builder().set_item(Some(item_to_sdk(item))).build().map_err(build)?)
            .build(),
        WriteRequest::Delete(key) => sdk::WriteRequest::builder()
            .delete_request(sdk::DeleteRequest::builder().set_key(Some(item_to_sdk(key))).build().map_err(build)?)
            .build(),
    })
}

fn write_request_back(w: &sdk::WriteRequest) -> Result<WriteRequest, StoreError> {
    if let Some(p) = w.put_request() {
        return Ok(WriteRequest::Put(convert::item_from_sdk(p.item())?));
    }
    if let Some(d) = w.delete_request() {
        return Ok(WriteRequest::Delete(convert::item_from_sdk(d.key())?));
    }
    Err(StoreError::Internal("DynamoDB returned an unprocessed write that is neither a put nor a delete".into()))
}

fn transact_write(w: &TransactWrite) -> Result<sdk::TransactWriteItem, StoreError> {
    let item = sdk::TransactWriteItem::builder();
    Ok(match w {
        TransactWrite::Put(p) => item
            .put(
                sdk::Put::builder()
                    .table_name(&p.table)
                    .set_item(Some(item_to_sdk(&p.item)))
                    .set_condition_expression(p.condition.clone())
                    .set_expression_attribute_names(names(&p.attrs))
                    .set_expression_attribute_values(values(&p.attrs))
                    .set_return_values_on_condition_check_failure(on_failure(p.return_old_on_condition_failure))
                    .build()
                    .map_err(build)?,
            )
            .build(),
        TransactWrite::Update(u) => item
            .update(
                sdk::Update::builder()
                    .table_name(&u.table)
                    .set_key(Some(item_to_sdk(&u.key)))
                    .update_expression(&u.update)
                    .set_condition_expression(u.condition.clone())
                    .set_expression_attribute_names(names(&u.attrs))
                    .set_expression_attribute_values(values(&u.attrs))
                    .set_return_values_on_condition_check_failure(on_failure(u.return_old_on_condition_failure))
                    .build()
                    .map_err(build)?,
            )
            .build(),
        TransactWrite::Delete(d) => item
            .delete(
                sdk::Delete::builder()
                    .table_name(&d.table)
                    .set_key(Some(item_to_sdk(&d.key)))
                    .set_condition_expression(d.condition.clone())
                    .set_expression_attribute_names(names(&d.attrs))
                    .set_expression_attribute_values(values(&d.attrs))
                    .set_return_values_on_condition_check_failure(on_failure(d.return_old_on_condition_failure))
                    .build()
                    .map_err(build)?,
            )
            .build(),
        TransactWrite::ConditionCheck(c) => item
            .condition_check(
                sdk::ConditionCheck::builder()
                    .table_name(&c.table)
                    .set_key(Some(item_to_sdk(&c.key)))
                    .condition_expression(&c.condition)
                    .set_expression_attribute_names(names(&c.attrs))
                    .set_expression_attribute_values(values(&c.attrs))
                    .set_return_values_on_condition_check_failure(on_failure(c.return_old_on_condition_failure))
                    .build()
                    .map_err(build)?,
            )
            .build(),
    })
}

#[async_trait]
impl Store for DynamoDbStore {
    async fn create_table(&self, definition: TableDefinition) -> Result<TableDescription, StoreError> {
        let parts = convert::create_parts(&definition)?;
        self.client
            .create_table()
            .table_name(&definition.name)
            .set_attribute_definitions(Some(parts.attribute_definitions))
            .set_key_schema(Some(parts.key_schema))
            .set_global_secondary_indexes(parts.global)
            .set_local_secondary_indexes(parts.local)
            .billing_mode(parts.billing)
            .set_provisioned_throughput(parts.throughput)
            .set_stream_specification(parts.stream)
            .send()
            .await
            .map_err(|e| map_sdk_error(e, |_| None))?;
        let t = self.wait_active(&definition.name).await?;
        if let Some(attribute) = &definition.ttl_attribute {
            self.enable_ttl(&definition.name, attribute).await?;
        }
        if definition.point_in_time_recovery {
            let spec = sdk::PointInTimeRecoverySpecification::builder()
                .point_in_time_recovery_enabled(true)
                .build()
                .map_err(build)?;
            match self
                .client
                .update_continuous_backups()
                .table_name(&definition.name)
                .point_in_time_recovery_specification(spec)
                .send()
                .await
            {
                Ok(_) => {}
                Err(e) if is_unsupported(e.code()) => {
                    tracing::warn!(table = %definition.name, "the DynamoDB server does not support point-in-time recovery");
                }
                Err(e) => return Err(map_sdk_error(e, |_| None)),
            }
        }
        self.describe(&t).await
    }

    async fn delete_table(&self, name: &str) -> Result<TableDescription, StoreError> {
        let out = self.client.delete_table().table_name(name).send().await.map_err(|e| map_sdk_error(e, |_| None))?;
        let t = out.table_description.unwrap_or_else(|| sdk::TableDescription::builder().table_name(name).build());
        // DeleteTable describes the table it deletes; a server that answers with less gets a
        // description with what is known (the name).
        let mut definition = convert::definition_from_sdk(&t)
            .unwrap_or_else(|_| TableDefinition::new(name, store::KeySchema::hash("", store::ScalarType::S)));
        definition.name = name.to_string();
        // The name is free again once the call returns, as with the embedded engine.
        self.wait_gone(name).await?;
        lock(&self.ttl_unsupported).remove(name);
        let mut d = description(definition, &t);
        d.status = TableStatus::Deleting;
        Ok(d)
    }

    async fn describe_table(&self, name: &str) -> Result<TableDescription, StoreError> {
        let out = self.client.describe_table().table_name(name).send().await.map_err(|e| map_sdk_error(e, |_| None))?;
        let t = out.table.ok_or_else(|| StoreError::Internal("DescribeTable returned no table".into()))?;
        self.describe(&t).await
    }

    async fn list_tables(&self) -> Result<Vec<String>, StoreError> {
        let mut names = Vec::new();
        let mut start: Option<String> = None;
        // Bounded: 100 names a page, and no account has a million tables.
        for _ in 0..10_000 {
            let out = self
                .client
                .list_tables()
                .set_exclusive_start_table_name(start.take())
                .send()
                .await
                .map_err(|e| map_sdk_error(e, |_| None))?;
            names.extend(out.table_names.unwrap_or_default());
            match out.last_evaluated_table_name {
                Some(last) => start = Some(last),
                None => return Ok(names),
            }
        }
        Err(StoreError::Internal("ListTables did not finish after 10,000 pages".into()))
    }

    async fn get_item(&self, r: GetItem) -> Result<GetItemOutput, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&r.table)
            .set_key(Some(item_to_sdk(&r.key)))
            .set_consistent_read(r.consistent_read.then_some(true))
            .set_projection_expression(r.projection)
            .set_expression_attribute_names(names(&r.attrs))
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
            .send()
            .await
            .map_err(|e| map_sdk_error(e, |_| None))?;
        Ok(GetItemOutput {
            item: opt_item(out.item())?,
            consumed_capacity: capacity(out.consumed_capacity(), &r.table, Units::Read),
        })
    }

    async fn put_item(&self, r: PutItem) -> Result<WriteOutput, StoreError> {
        let out = self
            .client
            .put_item()
            .table_name(&r.table)
            .set_item(Some(item_to_sdk(&r.item)))
            .set_condition_expression(r.condition)
            .set_expression_attribute_names(names(&r.attrs))
            .set_expression_attribute_values(values(&r.attrs))
            .return_values(return_value(r.return_values))
            .set_return_values_on_condition_check_failure(on_failure(r.return_old_on_condition_failure))
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
            .send()
            .await
            .map_err(|e| {
                map_sdk_error(e, |e| match e {
                    PutItemError::ConditionalCheckFailedException(c) => Some(condition_failed(c.item())),
                    _ => None,
                })
            })?;
        Ok(WriteOutput {
            attributes: returned(out.attributes())?,
            consumed_capacity: capacity(out.consumed_capacity(), &r.table, Units::Write),
        })
    }

    async fn update_item(&self, r: UpdateItem) -> Result<WriteOutput, StoreError> {
        let out = self
            .client
            .update_item()
            .table_name(&r.table)
            .set_key(Some(item_to_sdk(&r.key)))
            .update_expression(r.update)
            .set_condition_expression(r.condition)
            .set_expression_attribute_names(names(&r.attrs))
            .set_expression_attribute_values(values(&r.attrs))
            .return_values(return_value(r.return_values))
            .set_return_values_on_condition_check_failure(on_failure(r.return_old_on_condition_failure))
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
            .send()
            .await
            .map_err(|e| {
                map_sdk_error(e, |e| match e {
                    UpdateItemError::ConditionalCheckFailedException(c) => Some(condition_failed(c.item())),
                    _ => None,
                })
            })?;
        Ok(WriteOutput {
            attributes: returned(out.attributes())?,
            consumed_capacity: capacity(out.consumed_capacity(), &r.table, Units::Write),
        })
    }

    async fn delete_item(&self, r: DeleteItem) -> Result<WriteOutput, StoreError> {
        let out = self
            .client
            .delete_item()
            .table_name(&r.table)
            .set_key(Some(item_to_sdk(&r.key)))
            .set_condition_expression(r.condition)
            .set_expression_attribute_names(names(&r.attrs))
            .set_expression_attribute_values(values(&r.attrs))
            .return_values(return_value(r.return_values))
            .set_return_values_on_condition_check_failure(on_failure(r.return_old_on_condition_failure))
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
            .send()
            .await
            .map_err(|e| {
                map_sdk_error(e, |e| match e {
                    DeleteItemError::ConditionalCheckFailedException(c) => Some(condition_failed(c.item())),
                    _ => None,
                })
            })?;
        Ok(WriteOutput {
            attributes: returned(out.attributes())?,
            consumed_capacity: capacity(out.consumed_capacity(), &r.table, Units::Write),
        })
    }

    async fn query(&self, r: Query) -> Result<QueryOutput, StoreError> {
        let out = self
            .client
            .query()
            .table_name(&r.table)
            .set_index_name(r.index)
            .key_condition_expression(r.key_condition)
            .set_filter_expression(r.filter)
            .set_projection_expression(r.projection)
            .set_expression_attribute_names(names(&r.attrs))
            .set_expression_attribute_values(values(&r.attrs))
            .set_scan_index_forward((!r.scan_forward).then_some(false))
            .set_limit(limit(r.limit)?)
            .set_exclusive_start_key(r.exclusive_start_key.as_ref().map(item_to_sdk))
            .set_consistent_read(r.consistent_read.then_some(true))
            .set_select(select(r.select))
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
            .send()
            .await
            .map_err(|e| map_sdk_error(e, |_| None))?;
        Ok(QueryOutput {
            items: convert::items(out.items())?,
            count: out.count().max(0) as usize,
            scanned_count: out.scanned_count().max(0) as usize,
            last_evaluated_key: opt_item(out.last_evaluated_key())?,
            consumed_capacity: capacity(out.consumed_capacity(), &r.table, Units::Read),
        })
    }

    async fn scan(&self, r: Scan) -> Result<QueryOutput, StoreError> {
        let (segment, total) = match r.segment {
            Some((s, t)) => {
                let conv = |v: u32| i32::try_from(v).map_err(|_| StoreError::validation("segment out of range"));
                (Some(conv(s)?), Some(conv(t)?))
            }
            None => (None, None),
        };
        let out = self
            .client
            .scan()
            .table_name(&r.table)
            .set_index_name(r.index)
            .set_filter_expression(r.filter)
            .set_projection_expression(r.projection)
            .set_expression_attribute_names(names(&r.attrs))
            .set_expression_attribute_values(values(&r.attrs))
            .set_limit(limit(r.limit)?)
            .set_exclusive_start_key(r.exclusive_start_key.as_ref().map(item_to_sdk))
            .set_segment(segment)
            .set_total_segments(total)
            .set_consistent_read(r.consistent_read.then_some(true))
            .set_select(select(r.select))
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
            .send()
            .await
            .map_err(|e| map_sdk_error(e, |_| None))?;
        Ok(QueryOutput {
            items: convert::items(out.items())?,
            count: out.count().max(0) as usize,
            scanned_count: out.scanned_count().max(0) as usize,
            last_evaluated_key: opt_item(out.last_evaluated_key())?,
            consumed_capacity: capacity(out.consumed_capacity(), &r.table, Units::Read),
        })
    }

    async fn batch_get_item(&self, r: BatchGetItem) -> Result<BatchGetItemOutput, StoreError> {
        let requests = r
            .requests
            .iter()
            .map(|(t, k)| Ok((t.clone(), keys_and_attributes(k)?)))
            .collect::<Result<_, StoreError>>()?;
        let out = self
            .client
            .batch_get_item()
            .set_request_items(Some(requests))
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
            .send()
            .await
            .map_err(|e| map_sdk_error(e, |_| None))?;
        let mut responses = BTreeMap::new();
        for (table, items) in out.responses.unwrap_or_default() {
            responses.insert(table, convert::items(&items)?);
        }
        let mut unprocessed_keys = BTreeMap::new();
        for (table, keys) in out.unprocessed_keys.unwrap_or_default() {
            let mut back = keys_and_attributes_back(&keys)?;
            // DynamoDB echoes the request's settings; keep the caller's values placeholders too.
            if let Some(orig) = r.requests.get(&table) {
                back.attrs = orig.attrs.clone();
            }
            if !back.keys.is_empty() {
                unprocessed_keys.insert(table, back);
            }
        }
        Ok(BatchGetItemOutput {
            responses,
            unprocessed_keys,
            consumed_capacity: capacities(out.consumed_capacity.as_deref().unwrap_or_default(), Units::Read),
        })
    }

    async fn batch_write_item(&self, r: BatchWriteItem) -> Result<BatchWriteItemOutput, StoreError> {
        let requests = r
            .requests
            .iter()
            .map(|(t, ws)| Ok((t.clone(), ws.iter().map(write_request).collect::<Result<Vec<_>, _>>()?)))
            .collect::<Result<_, StoreError>>()?;
        let out = self
            .client
            .batch_write_item()
            .set_request_items(Some(requests))
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
            .send()
            .await
            .map_err(|e| map_sdk_error(e, |_| None))?;
        let mut unprocessed_items = BTreeMap::new();
        for (table, writes) in out.unprocessed_items.unwrap_or_default() {
            let writes = writes.iter().map(write_request_back).collect::<Result<Vec<_>, _>>()?;
            if !writes.is_empty() {
                unprocessed_items.insert(table, writes);
            }
        }
        Ok(BatchWriteItemOutput {
            unprocessed_items,
            consumed_capacity: capacities(out.consumed_capacity.as_deref().unwrap_or_default(), Units::Write),
        })
    }

    async fn transact_get_items(&self, r: TransactGetItems) -> Result<TransactGetItemsOutput, StoreError> {
        let items = r
            .items
            .iter()
            .map(|g| {
                let get = sdk::Get::builder()
                    .table_name(&g.table)
                    .set_key(Some(item_to_sdk(&g.key)))
                    .set_projection_expression(g.projection.clone())
                    .set_expression_attribute_names(names(&g.attrs))
                    .build()
                    .map_err(build)?;
                Ok(sdk::TransactGetItem::builder().get(get).build())
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let n = items.len();
        let out = self
            .client
            .transact_get_items()
            .set_transact_items(Some(items))
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
            .send()
            .await
            .map_err(|e| {
                map_sdk_error(e, |e| match e {
                    aws_sdk_dynamodb::operation::transact_get_items::TransactGetItemsError::TransactionCanceledException(
                        c,
                    ) => Some(transaction_canceled(c.cancellation_reasons())),
                    _ => None,
                })
            })?;
        let items = match out.responses() {
            [] => vec![None; n],
            responses => responses.iter().map(|r| opt_item(r.item())).collect::<Result<Vec<_>, _>>()?,
        };
        Ok(TransactGetItemsOutput { items, consumed_capacity: capacities(out.consumed_capacity(), Units::Read) })
    }

    async fn transact_write_items(&self, r: TransactWriteItems) -> Result<TransactWriteItemsOutput, StoreError> {
        let items = r.items.iter().map(transact_write).collect::<Result<Vec<_>, _>>()?;
        let out = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            // Passed through as given; the SDK resends the same token on each of its retries.
            .set_client_request_token(r.client_request_token)
            .return_consumed_capacity(ReturnConsumedCapacity::Indexes)
            .send()
            .await
            .map_err(|e| {
                map_sdk_error(e, |e| match e {
                    TransactWriteItemsError::TransactionCanceledException(c) => {
                        Some(transaction_canceled(c.cancellation_reasons()))
                    }
                    _ => None,
                })
            })?;
        Ok(TransactWriteItemsOutput { consumed_capacity: capacities(out.consumed_capacity(), Units::Write) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_the_secret_key() {
        let text = format!("{:?}", Options::emulator("http://127.0.0.1:1"));
        assert!(text.contains("tally-test") && !text.contains("tally-test-secret"), "{text}");
    }
}
