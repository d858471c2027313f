//! The forkscope command line: the commands live in [`cli`], one module each.

mod cli;

/// jemalloc, with a background thread that returns freed pages to the system within about a
/// second (settings in `.cargo/config.toml`): glibc's per-thread arenas kept a stalled load's
/// hundreds of MiB long after its connections had ended.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
