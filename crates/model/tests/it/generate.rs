//! The generated design document against real writes: the sample items it shows must be
//! the items the model layer stores, or the document would teach the wrong keys.

use std::sync::atomic::Ordering;

use model::generate;
use model::schema::{Generated, SAMPLE_TIME_MS};
use store::{AttributeValue, Item};

use crate::Fixture;

#[tokio::test]
async fn sample_keys_in_the_design_doc_are_the_keys_a_write_stores() {
    let f = Fixture::new().await;
    // Sample items are stamped with this time, so the write must be too.
    f.clock.store(SAMPLE_TIME_MS, Ordering::SeqCst);
    let schema = f.table.schema().clone();
    let doc = generate::design_doc(&schema);
    let key_names: Vec<String> = schema.table().key_attributes().into_iter().map(|a| a.name).collect();
    for e in schema.entities() {
        let sample = schema.sample_item(e.name()).expect("the entity exists");
        // The caller's part of the sample: declared attributes, without the timestamps the
        // table's clock writes.
        let input: Item = e
            .attributes()
            .iter()
            .filter(|a| !matches!(a.generated, Some(Generated::CreatedAt | Generated::UpdatedAt)))
            .filter_map(|a| sample.get(&a.name).map(|v| (a.name.clone(), v.clone())))
            .collect();
        let stored = f.table.put(e.name(), input).await.expect("the sample item is writable");
        for name in &key_names {
            assert_eq!(stored.get(name), sample.get(name), "{}.{name}", e.name());
            if let Some(AttributeValue::S(key)) = stored.get(name) {
                assert!(doc.contains(&format!("`{key}`")), "{}'s {name} `{key}` is not in the design doc", e.name());
            }
        }
    }
}
