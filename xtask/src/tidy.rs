//! The tidy test: repository-wide rules checked by `cargo test`.
//!
//! Every `.rs` file opens with a `//!` doc comment, formatting is clean, and the design docs
//! (ARCHITECTURE.md and each crate's DESIGN.md) name only source files and modules that exist,
//! and no code handles a poisoned lock but `store::sync` (Tally's one policy for it).
//! Generated files are checked by the tests of the crates that generate them.

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name == "target" || name == "node_modules" {
                continue;
            }
            if path.is_dir() {
                rust_files(&path, out);
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }

    #[test]
    fn every_rust_file_opens_with_a_module_doc() {
        let root = crate::project_root();
        let mut files = Vec::new();
        rust_files(&root.join("crates"), &mut files);
        rust_files(&root.join("xtask"), &mut files);
        assert!(files.len() > 5, "found too few files under {}", root.display());
        let missing: Vec<String> = files
            .iter()
            .filter(|f| {
                let text = std::fs::read_to_string(f).unwrap_or_default();
                !text.trim_start().starts_with("//!")
            })
            .map(|f| f.strip_prefix(&root).unwrap_or(f).display().to_string())
            .collect();
        assert!(missing.is_empty(), "files without a leading `//!` doc comment:\n{}", missing.join("\n"));
    }

    #[test]
    fn formatting_is_clean() {
        let root = crate::project_root();
        let output = Command::new(env!("CARGO"))
            .args(["fmt", "--all", "--", "--check"])
            .current_dir(&root)
            .output()
            .expect("run cargo fmt");
        assert!(
            output.status.success(),
            "cargo fmt --check found unformatted code; run `cargo fmt --all`:\n{}",
            String::from_utf8_lossy(&output.stdout)
        );
    }

    /// The design docs and each doc's crate directory (`None`: ARCHITECTURE.md, the whole tree).
    fn design_docs(root: &Path) -> Vec<(PathBuf, Option<PathBuf>)> {
        let mut docs = vec![(root.join("ARCHITECTURE.md"), None)];
        for entry in std::fs::read_dir(root.join("crates")).expect("crates/ lists").flatten() {
            let doc = entry.path().join("DESIGN.md");
            if doc.exists() {
                docs.push((doc, Some(entry.path())));
            }
        }
        docs
    }

    /// Every `code span` of a Markdown text.
    fn code_spans(text: &str) -> Vec<&str> {
        text.split('`').skip(1).step_by(2).collect()
    }

    /// Whether a `src/…` path a doc names exists: under the doc's crate, under the tree for
    /// `crates/…`, as `crates/<name>/src/…` for `<name>/src/…`, or, from ARCHITECTURE.md, in
    /// any crate.
    fn source_path_exists(root: &Path, crate_dir: Option<&Path>, path: &str) -> bool {
        let path = path.trim_end_matches('/');
        if path.starts_with("crates/") {
            return root.join(path).exists();
        }
        if let Some((name, rest)) = path.split_once("/src/") {
            return root.join("crates").join(name).join("src").join(rest).exists();
        }
        match crate_dir {
            Some(dir) => dir.join(path).exists(),
            None => std::fs::read_dir(root.join("crates"))
                .expect("crates/ lists")
                .flatten()
                .any(|c| c.path().join(path).exists()),
        }
    }

    fn crate_dir_of(root: &Path, name: &str, own: Option<&Path>) -> Option<PathBuf> {
        let dir = match name {
            "crate" => return own.map(Path::to_path_buf),
            "tally" => "cli".to_owned(),
            "store" | "store_embedded" | "store_dynamodb" | "model" | "analytics" | "server" => name.replace('_', "-"),
            _ => return None,
        };
        Some(root.join("crates").join(dir))
    }

    /// Whether `crate::a::b…` names modules that exist, down to the first segment that is not a
    /// module, which some file of the crate must define or re-export.
    fn module_path_exists(root: &Path, crate_dir: Option<&Path>, path: &str) -> Option<bool> {
        let mut segments = path.split("::");
        let dir = crate_dir_of(root, segments.next()?, crate_dir)?;
        let mut module = dir.join("src");
        let mut files = Vec::new();
        rust_files(&module, &mut files);
        for segment in segments {
            if !segment.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || segment.is_empty() {
                return None;
            }
            if module.join(format!("{segment}.rs")).exists() || module.join(segment).join("mod.rs").exists() {
                module = module.join(segment);
                continue;
            }
            let defined = files.iter().any(|f| {
                let text = std::fs::read_to_string(f).unwrap_or_default();
                let kinds =
                    ["fn ", "struct ", "enum ", "const ", "type ", "trait ", "static ", "mod ", "macro_rules! "];
                kinds.iter().any(|kind| names_word(&text, &format!("{kind}{segment}")))
                    || text.lines().any(|l| l.trim_start().starts_with("pub use") && names_word(l, segment))
            });
            return Some(defined);
        }
        Some(true)
    }

    /// Whether `text` holds `word` not followed by more of an identifier.
    fn names_word(text: &str, word: &str) -> bool {
        text.match_indices(word)
            .any(|(at, _)| !text[at + word.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
    }

    #[test]
    fn design_docs_name_only_source_files_and_modules_that_exist() {
        let root = crate::project_root();
        let mut missing = Vec::new();
        for (doc, crate_dir) in design_docs(&root) {
            let text = std::fs::read_to_string(&doc).expect("the design doc reads");
            let name = doc.strip_prefix(&root).unwrap_or(&doc).display().to_string();
            for span in code_spans(&text) {
                let span = span.trim();
                if span.contains("src/") && !span.contains(' ') && !span.contains('*') {
                    if !source_path_exists(&root, crate_dir.as_deref(), span) {
                        missing.push(format!("{name}: `{span}` is not a file or directory"));
                    }
                } else if span.contains("::")
                    && !span.contains(' ')
                    && !span.contains('(')
                    && module_path_exists(&root, crate_dir.as_deref(), span) == Some(false)
                {
                    missing.push(format!("{name}: `{span}` names no module or item"));
                }
            }
        }
        assert!(missing.is_empty(), "design docs name what does not exist:\n{}", missing.join("\n"));
    }

    #[test]
    fn the_design_doc_check_sees_a_missing_file_and_module() {
        let root = crate::project_root();
        let analytics = root.join("crates/analytics");
        assert!(source_path_exists(&root, Some(&analytics), "src/block.rs"));
        assert!(!source_path_exists(&root, Some(&analytics), "src/no_such_module.rs"));
        assert!(source_path_exists(&root, None, "src/journal.rs"), "a file of some crate, from ARCHITECTURE.md");
        assert!(!source_path_exists(&root, None, "crates/server/src/gone.rs"));
        assert_eq!(module_path_exists(&root, Some(&analytics), "crate::block"), Some(true));
        assert_eq!(module_path_exists(&root, None, "analytics::stats::scan"), Some(true));
        assert_eq!(module_path_exists(&root, None, "analytics::no_such_module"), Some(false));
        assert_eq!(module_path_exists(&root, None, "serde::Deserialize"), None, "other crates are not checked");
    }

    #[test]
    fn poisoned_locks_are_handled_only_by_the_one_policy() {
        let root = crate::project_root();
        let mut files = Vec::new();
        rust_files(&root.join("crates"), &mut files);
        // Ways of taking a std lock that skip the work or recover on their own when it is poisoned.
        let skipping = [
            ".lock().ok()",
            ".lock().map(",
            ".lock().is_ok",
            ".lock().unwrap_or",
            ".read().ok()",
            ".read().map(",
            ".read().unwrap_or",
            ".write().ok()",
            ".write().map(",
            ".write().unwrap_or",
        ];
        let mut found = Vec::new();
        for file in files.iter().filter(|f| !f.ends_with("store/src/sync.rs")) {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            for (n, line) in text.lines().enumerate() {
                let poisoned_skip = line.contains("if let Ok(")
                    && (line.contains(".lock()") || line.contains(".read()") || line.contains(".write()"))
                    && !line.contains(".await");
                if poisoned_skip || skipping.iter().any(|p| line.contains(p)) {
                    let name = file.strip_prefix(&root).unwrap_or(file).display();
                    found.push(format!("{name}:{}: {}", n + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "take std locks through store::sync::{{lock, read, write}} (one policy for poisoning):\n{}",
            found.join("\n")
        );
    }
}
