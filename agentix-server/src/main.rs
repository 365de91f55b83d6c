//! `agentix-server --worker CMD [ARGS..]`: the standalone runtime server.
//!
//! Bundles built with `agentix::bundle::main()` embed the same server as
//! `<bundle> serve`; this binary is for workers built some other way.

fn main() {
    // Before the token is read: sandbox code runs as this user.
    if let Err(e) = agentix_wire::process::hide_memory() {
        eprintln!("agentix-server: cannot keep its memory private: {e}");
        std::process::exit(1);
    }
    let config = match agentix_server::ServerConfig::from_args(std::env::args_os().skip(1)) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("agentix-server: {e}\nusage: agentix-server [--host ADDR] [--port N] [--max-message-bytes N] [--cleanup-dir DIR] --worker CMD [ARGS..]");
            std::process::exit(2);
        }
    };
    std::process::exit(agentix_server::run(config));
}
