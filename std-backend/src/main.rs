//! The `btl` command.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use btl_core::mca::{BTL_FRAMEWORK, BTL_FRAMEWORK_VERSION, Params};
use btl_std::info::{Filter, Report};
use btl_std::param_sources::{apply_environment, apply_file, default_param_file};
use btl_std::{ParamRegistry, register_all};
use clap::{Parser, Subcommand};

/// btl, a byte transfer layer: inspect and exercise its components.
#[derive(Debug, Parser)]
#[command(name = "btl", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the components of this build and every parameter with its
    /// current value, source, level and help (as ompi_info does).
    Info(InfoArgs),
}

#[derive(Debug, clap::Args)]
struct InfoArgs {
    /// Show only the parameters of FRAMEWORK and COMPONENT (`all` matches
    /// any; `--param btl all`, `--param btl tcp`).
    #[arg(long, num_args = 2, value_names = ["FRAMEWORK", "COMPONENT"])]
    param: Option<Vec<String>>,
    /// Show parameters up to this level: 1-3 users, 4-6 tuners, 7-9 developers.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=9))]
    level: u8,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Read parameters from this file instead of $BTL_PARAM_FILE or
    /// ~/.config/btl/params.conf (lines of `name = value`).
    #[arg(long, value_name = "PATH")]
    param_file: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info(args) => info(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("btl: {message}");
            ExitCode::from(2)
        }
    }
}

fn info(args: InfoArgs) -> Result<(), String> {
    let mut registry = Box::new(ParamRegistry::new());
    let params: &mut dyn Params = registry.as_mut();
    let components = register_all(params).map_err(|e| e.to_string())?;

    let env = |var: &str| std::env::var(var).ok();
    let param_file = args.param_file.or_else(|| default_param_file(env));
    if let Some(path) = &param_file {
        let unknown = apply_file(params, path).map_err(|e| e.to_string())?;
        for u in unknown {
            eprintln!(
                "btl: warning: {}:{}: no parameter `{}` in this build",
                path.display(),
                u.line,
                u.name
            );
        }
    }
    apply_environment(params, env).map_err(|e| e.to_string())?;

    let any = |s: String| (s != "all").then_some(s);
    let (framework, component) = match args.param {
        Some(v) => {
            let mut v = v.into_iter();
            (v.next().and_then(any), v.next().and_then(any))
        }
        None => (None, None),
    };
    let filter = Filter {
        framework,
        component,
        level: args.level,
    };
    let report = Report::gather(
        BTL_FRAMEWORK,
        BTL_FRAMEWORK_VERSION,
        components,
        params,
        param_file,
        &filter,
    );
    let text = if args.json {
        report.to_json() + "\n"
    } else {
        report.to_string()
    };
    write_stdout(&text)
}

/// Writes to stdout; a reader that went away (`btl info | head`) is not an
/// error.
fn write_stdout(text: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.to_string()),
        _ => Ok(()),
    }
}
