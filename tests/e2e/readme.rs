//! The book's "Your project" chapter shows the code of `examples/harness`,
//! which CI builds and runs: so it compiles as written.

use std::path::Path;

/// The ```rust blocks of the page `text`.
fn rust_blocks(text: &str) -> Vec<String> {
    text.split("```rust\n")
        .skip(1)
        .map(|block| block[..block.find("```").expect("a closed block")].to_owned())
        .collect()
}

#[test]
fn the_book_shows_the_harness_files_as_they_are() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let page = std::fs::read_to_string(root.join("docs/src/project-layout.md")).unwrap();
    let blocks = rust_blocks(&page);
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
            "the book's {path} differs from the file; copy the file into \
             docs/src/project-layout.md"
        );
    }
}
