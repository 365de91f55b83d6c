//! Bundles as the assembler makes them: complete (every library, the
//! loader), refused when something does not resolve, and running in an
//! empty root with no shell and no libc.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use agentix_cli::assemble::verify;
use agentix_cli::cargo_package::{self, PackageRef};
use agentix_cli::{assemble, BuildError, BundleSpec};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agentix-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A bundle of this crate's own binary (dynamically linked, like any
/// bundle binary) and bash.
fn bundle_of_agentix(out: &Path) -> agentix_cli::Bundle {
    let binary = env!("CARGO_BIN_EXE_agentix");
    let spec = BundleSpec::for_binary(binary, "agentix", "0.0.0", &["bash"], out).unwrap();
    assemble(&spec, &mut |_| {}).unwrap()
}

#[test]
fn a_bundle_holds_its_loader_and_every_library_and_says_so() {
    let dir = scratch("complete");
    let bundle = bundle_of_agentix(&dir.join("b"));
    let libs: Vec<String> = std::fs::read_dir(bundle.dir.join("lib"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for want in ["libc.so.6", "libtinfo.so.6"] {
        assert!(
            libs.iter().any(|l| l == want),
            "{want} missing from {libs:?}"
        );
    }
    assert!(
        libs.iter().any(|l| l.starts_with("ld-linux")),
        "no loader in {libs:?}"
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.dir.join("bundle.json")).unwrap()).unwrap();
    assert_eq!(manifest["entry"], "bin/agentix");
    assert_eq!(manifest["tools"], serde_json::json!(["bash"]));
    assert_eq!(
        manifest["files"].as_object().unwrap().len(),
        libs.len() + 2,
        "a digest for every file"
    );
    assert_eq!(bundle.manifest.digest().len(), 64);

    // A library taken away is named by the check.
    std::fs::remove_file(bundle.dir.join("lib/libtinfo.so.6")).unwrap();
    let loader = libs.iter().find(|l| l.starts_with("ld-linux")).unwrap();
    match verify(&bundle.dir, Some(loader)) {
        Err(BuildError::Incomplete(why)) => assert!(why.contains("libtinfo.so.6"), "{why}"),
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_dependency_that_does_not_resolve_is_refused_by_name() {
    let dir = scratch("unresolved");
    let program = dir.join("needy");
    // A program linked against a library that is then taken away.
    let library = dir.join("libagentix-nowhere.so.7");
    let empty = dir.join("empty.c");
    std::fs::write(&empty, "int agentix_nowhere(void) { return 7; }\n").unwrap();
    let main = dir.join("main.c");
    std::fs::write(&main, "int main(void) { return 0; }\n").unwrap();
    let gcc = |args: &[&std::ffi::OsStr]| {
        let status = Command::new("gcc")
            .args(args)
            .status()
            .expect("gcc (the C compiler crates that build C need)");
        assert!(status.success(), "gcc {args:?}");
    };
    gcc(&[
        "-shared".as_ref(),
        "-o".as_ref(),
        library.as_os_str(),
        empty.as_os_str(),
    ]);
    gcc(&[
        main.as_os_str(),
        "-o".as_ref(),
        program.as_os_str(),
        "-Wl,--no-as-needed".as_ref(),
        "-L".as_ref(),
        dir.as_os_str(),
        "-l:libagentix-nowhere.so.7".as_ref(),
    ]);
    std::fs::remove_file(&library).unwrap();
    let spec = BundleSpec {
        binary: program,
        name: "needy".into(),
        version: "0".into(),
        target: "x".into(),
        tools: BTreeMap::new(),
        out: dir.join("b"),
    };
    match assemble(&spec, &mut |_| {}) {
        Err(e @ BuildError::Unresolved { .. }) => {
            assert!(e.to_string().contains("libagentix-nowhere.so.7"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn tools_declared_by_dependencies_are_collected() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let facts = cargo_package::facts(&PackageRef {
        manifest_path: Some(workspace),
        package: Some("harness-bundle".into()),
    })
    .unwrap();
    assert_eq!(facts.binaries, ["harness-bundle"]);
    // harness-bundle links agentix-bash, which declares bash.
    assert_eq!(
        facts.tools.get("bash").map(String::as_str),
        Some("agentix-bash")
    );
}

/// Runs `command` inside `root` (chroot), with /proc and /dev as every
/// container has them; returns its stdout.
fn in_root(root: &Path, command: &[&str]) -> String {
    for dir in ["proc", "dev"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    let mount = |args: &[&str]| Command::new("mount").args(args).status().unwrap().success();
    let proc_dir = root.join("proc").to_string_lossy().into_owned();
    let dev_dir = root.join("dev").to_string_lossy().into_owned();
    assert!(
        mount(&["-t", "proc", "proc", &proc_dir]) && mount(&["--bind", "/dev", &dev_dir]),
        "this test needs root (to chroot and mount), as CI has"
    );
    let out = Command::new("chroot").arg(root).args(command).output();
    let _ = Command::new("umount").args([&proc_dir, &dev_dir]).status();
    let out = out.expect("chroot runs");
    assert!(
        out.status.success(),
        "{command:?} failed in the empty root: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_bundle_runs_in_an_empty_root_without_a_shell_or_a_libc() {
    let dir = scratch("empty-root");
    let root = dir.join("root");
    bundle_of_agentix(&root.join("agentix"));
    // Nothing else in the root: no /bin, no /lib, no libc.
    assert!(!root.join("lib").exists() && !root.join("bin").exists());
    let version = in_root(&root, &["/agentix/bin/agentix", "--version"]);
    assert!(version.starts_with("agentix "), "{version}");
    let said = in_root(
        &root,
        &[
            "/agentix/bin/bash",
            "-c",
            "echo hello from $0; command -v ls || echo no ls here",
        ],
    );
    assert!(said.starts_with("hello from /agentix/bin/bash"), "{said}");
    assert!(said.contains("no ls here"), "the root has no ls: {said}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Where a loader that takes `AT_PHDR` as the first `LOAD`'s address plus
/// `e_phoff` (gVisor, kernels before 5.18) finds the program headers, and
/// where `PT_PHDR` says they are.
fn program_header_addresses(program: &Path) -> (u64, u64) {
    let mut file = std::fs::File::open(program).unwrap();
    let elf = elb::Elf::read(&mut file, 4096).unwrap();
    let first = elf
        .segments
        .iter()
        .find(|s| s.kind == elb::SegmentKind::Loadable)
        .unwrap();
    let table = elf
        .segments
        .iter()
        .find(|s| s.kind == elb::SegmentKind::ProgramHeader)
        .unwrap();
    assert_eq!(table.offset, elf.header.program_header_offset);
    (
        first.virtual_address - first.offset + elf.header.program_header_offset,
        table.virtual_address,
    )
}

#[test]
fn a_rewritten_program_keeps_its_headers_where_every_loader_looks_and_runs() {
    let dir = scratch("phdr");
    let bundle = bundle_of_agentix(&dir.join("b"));
    for program in ["agentix", "bash"] {
        let (computed, declared) = program_header_addresses(&bundle.dir.join("bin").join(program));
        assert_eq!(computed, declared, "bin/{program}: AT_PHDR would miss");
    }
    // Moved past a segment that grew (a longer rpath than the program had),
    // a host program still runs with the host's loader.
    let copy = dir.join("true");
    std::fs::copy("/bin/true", &copy).unwrap();
    let loader = agentix_cli::elf_patch::interpreter(&copy).unwrap();
    agentix_cli::elf_patch::point_at(&copy, &loader, &"/nowhere".repeat(40)).unwrap();
    let (computed, declared) = program_header_addresses(&copy);
    assert_eq!(computed, declared);
    let status = Command::new(&copy).status().unwrap();
    assert!(status.success(), "{status}");
    // No hole where the table moved: archivers that refuse sparse files
    // (an engine's image import) take the program as it is.
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&copy).unwrap();
    assert!(
        meta.blocks() * 512 >= meta.len(),
        "a sparse program: {meta:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
