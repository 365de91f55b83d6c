//! The harness example's bundle: what runs inside every sandbox.

fn main() {
    agentix::link_plugins!(harness_functions, agentix_bash, agentix_files);
    agentix::bundle::main()
}
