//! Criterion benches of reading trackers' request bodies: a Plausible event as its tracker sends
//! it, with and without custom properties, and an Umami event. `cargo bench -p server --bench wire`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use server::wire::{RequestMeta, plausible, umami};

const PAGEVIEW: &str = r#"{"n":"pageview","u":"https://www.example.com/blog/post?utm_source=newsletter","d":"example.com","r":"https://www.google.com/","w":1280}"#;
const WITH_PROPS: &str = r#"{"n":"Signup","u":"https://www.example.com/pricing","d":"example.com","r":null,"p":{"plan":"pro","seats":3},"w":390}"#;
const UMAMI: &str = r#"{"type":"event","payload":{"website":"c37edc28-ee5f-4c62-9ce3-377fa6f600a8","hostname":"example.com","screen":"1920x1080","language":"en-US","title":"Home","url":"/pricing?utm_source=x","referrer":"https://news.ycombinator.com/"}}"#;

fn benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("wire");
    group.bench_function("plausible_pageview", |b| {
        b.iter(|| plausible::parse(black_box(PAGEVIEW.as_bytes()), RequestMeta::default()).unwrap())
    });
    group.bench_function("plausible_with_props", |b| {
        b.iter(|| plausible::parse(black_box(WITH_PROPS.as_bytes()), RequestMeta::default()).unwrap())
    });
    group.bench_function("umami_event", |b| {
        b.iter(|| umami::parse(black_box(UMAMI.as_bytes()), RequestMeta::default()).unwrap())
    });
    group.finish();
}

criterion_group!(wire, benches);
criterion_main!(wire);
