use clap::Parser;

fn main() {
    let cli = rewindfs::cli::Cli::parse();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("rewindfs=warn")).init();
    std::process::exit(rewindfs::cli::run(cli));
}
