//! The README's "Use Agentix in your project" code is the code of
//! `examples/harness`, which CI builds and runs: so it compiles as written.

use std::path::Path;

/// The ```rust blocks of the README's section `heading`.
fn rust_blocks(readme: &str, heading: &str) -> Vec<String> {
    let start = readme.find(heading).expect("the section is in the README");
    let section = &readme[start + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .split("```rust\n")
        .skip(1)
        .map(|block| block[..block.find("```").expect("a closed block")].to_owned())
        .collect()
}

#[test]
fn the_readme_shows_the_harness_files_as_they_are() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let blocks = rust_blocks(&readme, "## Use Agentix in your project");
    assert_eq!(blocks.len(), 3, "functions, bundle and host");
    for block in blocks {
        let (first, code) = block.split_once('\n').unwrap();
        let path = first
            .strip_prefix("// ")
            .expect("each block opens with its file's path");
        let file = std::fs::read_to_string(root.join(path))
            .unwrap_or_else(|e| panic!("{path} is not in the repository: {e}"));
        assert!(
            file == code,
            "the README's {path} differs from the file; copy the file into the README"
        );
    }
}
