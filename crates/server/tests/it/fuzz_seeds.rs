//! The fuzz targets' functions (`server::fuzz`) on stable: every committed seed of
//! `fuzz/corpus/{stats_query,import}` and a few generated extremes, so the targets cannot rot
//! and what the fuzzer once found stays fixed. A crash the fuzzer finds goes into the corpus.

use std::path::PathBuf;

fn seeds(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut out: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("a directory entry").path();
            let bytes = std::fs::read(&path).expect("a seed reads");
            (path, bytes)
        })
        .collect();
    out.sort();
    assert!(out.len() >= 4, "{} holds the seeds", dir.display());
    out
}

#[test]
fn the_stats_query_target_holds_on_its_seeds_and_extremes() {
    for (path, bytes) in seeds("stats_query") {
        eprintln!("{}", path.display());
        server::fuzz::stats_query_body(&bytes);
    }
    let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_filters = format!(r#"{{"site_id":"x","metrics":["visitors"],"date_range":"day","filters":{nested}}}"#);
    let many_values = format!(
        r#"{{"metrics":["visitors"],"date_range":"day","filters":[["is","event:page",[{}"/"]]]}}"#,
        "\"/\",".repeat(5000)
    );
    let many_metrics = format!(r#"{{"metrics":[{}"visits"],"date_range":"day"}}"#, "\"visitors\",".repeat(5000));
    let long_prop =
        format!(r#"{{"metrics":["visitors"],"date_range":"day","dimensions":["event:props:{}"]}}"#, "k".repeat(5000));
    for body in [nested, deep_filters, many_values, many_metrics, long_prop] {
        server::fuzz::stats_query_body(body.as_bytes());
    }
}

#[test]
fn the_import_target_holds_on_its_seeds_and_extremes() {
    for (path, bytes) in seeds("import") {
        eprintln!("{}", path.display());
        server::fuzz::import_body(&bytes);
    }
    let long = "%20".repeat(700);
    let longest = format!(
        r#"{{"timestamp":1795332600000,"url":"https://example.com/{long}","name":"{}","referrer":"https://r.example/{long}","props":{{"{}":"{}"}}}}"#,
        "n".repeat(120),
        "k".repeat(300),
        "#".repeat(2000),
    );
    let nested = format!(
        r#"{{"timestamp":1,"url":"https://example.com/","props":{}{}}}"#,
        "{\"a\":".repeat(5000),
        "}".repeat(5001)
    );
    let csv_wide = format!(
        "timestamp,url,{}\n1,https://example.com/,{}\n",
        (0..500).map(|i| format!("props.p{i}")).collect::<Vec<_>>().join(","),
        ",".repeat(499)
    );
    for body in [longest, nested, csv_wide, "\r\r\r\n\n".into(), String::new()] {
        server::fuzz::import_body(body.as_bytes());
    }
}
