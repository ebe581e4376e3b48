//! `linkemu --config CONFIG.json`: run the link emulator inside the router
//! namespace (see README.md).  Prints `ready` once forwarding, runs until
//! SIGTERM/SIGINT, writes its statistics and exits 0.  A bad config prints one
//! line naming the field and exits 2; any other failure exits 1.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use linkemu::config::Config;
use linkemu::runtime::{run, RunError};

#[derive(Parser)]
#[command(name = "linkemu", version, about = "ccswitch's userspace link emulator (AF_PACKET L2 bridge)")]
struct Args {
    /// JSON configuration (see testbed/linkemu/README.md).
    #[arg(long, value_name = "CONFIG.json")]
    config: PathBuf,
    /// Only parse and validate the configuration (including trace files), then exit.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let cfg = match Config::from_file(&args.config).and_then(|c| c.validate().map(|_| c)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("linkemu: config error: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check {
        return ExitCode::SUCCESS;
    }
    match run(&cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(RunError::Config(e)) => {
            eprintln!("linkemu: config error: {e}");
            ExitCode::from(2)
        }
        Err(RunError::Other(m)) => {
            eprintln!("linkemu: error: {m}");
            ExitCode::from(1)
        }
    }
}
