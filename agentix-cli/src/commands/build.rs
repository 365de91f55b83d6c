//! `agentix build`: a cargo package's bundle binary, built in release and
//! assembled into a bundle directory (and, on request, an engine's image).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use agentix_cli::cargo_package::{self, PackageRef};
use agentix_cli::{assemble, BuildError, BundleSpec};

/// What `agentix build` takes.
#[derive(clap::Args)]
pub(crate) struct BuildArgs {
    /// The package whose binary to bundle (default: the current directory's).
    #[arg(short, long)]
    package: Option<String>,
    /// The binary to bundle (default: the package's only one).
    #[arg(long)]
    bin: Option<String>,
    /// Cargo.toml of the package or workspace (default: the current directory's).
    #[arg(long)]
    manifest_path: Option<PathBuf>,
    /// Where to write the bundle (default: agentix-bundle/<bin>); an earlier
    /// bundle there is replaced.
    #[arg(short, long)]
    out: Option<PathBuf>,
    /// An extra system tool to carry, found on PATH (repeatable).
    #[arg(long = "tool")]
    tools: Vec<String>,
    /// Also load the bundle into the Docker engine (DOCKER_HOST's, or the
    /// local one) as the image NAME (no registry), for
    /// ContainerSettings::bundle_image.
    #[arg(long, value_name = "NAME")]
    image: Option<String>,
}

/// Builds and assembles the bundle `args` describe.
pub(crate) fn run(args: BuildArgs) -> Result<ExitCode, String> {
    build(args)
        .map(|()| ExitCode::SUCCESS)
        .map_err(|e| e.to_string())
}

fn build(args: BuildArgs) -> Result<(), BuildError> {
    let package = PackageRef {
        manifest_path: args.manifest_path,
        package: args.package,
    };
    let facts = cargo_package::facts(&package)?;
    let bin = match (args.bin, facts.binaries.as_slice()) {
        (Some(bin), _) => bin,
        (None, [only]) => only.clone(),
        (None, many) => {
            return Err(BuildError::Command {
                command: "agentix build".into(),
                why: format!(
                    "`{}` has {} binaries ({}); pick one with --bin",
                    facts.name,
                    many.len(),
                    many.join(", ")
                ),
            })
        }
    };
    eprintln!("building {} (bin {bin}) in release", facts.name);
    let binary = cargo_package::build_release(&package, &facts.name, &bin)?;
    let mut tools = BTreeMap::new();
    let declared = facts.tools.into_iter();
    let extra = args.tools.into_iter().map(|t| (t, "--tool".to_owned()));
    for (tool, declared_by) in declared.chain(extra) {
        let path = cargo_package::find_on_path(&tool).ok_or_else(|| BuildError::ToolMissing {
            tool: tool.clone(),
            declared_by,
        })?;
        tools.insert(tool, path);
    }
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from("agentix-bundle").join(&bin));
    let spec = BundleSpec {
        binary,
        name: bin,
        version: facts.version,
        target: cargo_package::host_target()?,
        tools,
        out: cargo_package::absolute(&out),
    };
    let bundle = assemble(&spec, &mut |step| eprintln!("{step}"))?;
    println!(
        "{}: {} files, {:.1} MiB, digest sha256:{}",
        bundle.dir.display(),
        bundle.manifest.files.len(),
        bundle.size as f64 / (1 << 20) as f64,
        bundle.manifest.digest()
    );
    if let Some(image) = args.image {
        eprintln!("loading the bundle into the engine as {image}");
        agentix_cli::bundle_image::load_image(&bundle, &image)?;
        println!("image {image}");
    }
    Ok(())
}
